"""Where JAX's training step of the small model spends its time, op by op, as the row's step parts
label it: the compiled step (jit of value_and_grad of the loss, batch 128, xbench's Flax network
and initial weights) traced by JAX's profiler, each op's part from the compiled program as
jax_backend/trace.py's `Program` gives it, and PyTorch's forward and backward of xbench's module
timed alone, alternated.

It prints each part's ms a call, the ops of the max pool's gradient (the select_and_scatter XLA's
CPU compiler expands into iotas and a reduce-window carrying them, then a scatter), the slowest
ops, and forward / (forward + backward) for JAX with and without the pool's gradient beside
PyTorch's: the question whether JAX's forward share differs from PyTorch's because of the labels
or because of the work.

    python benchmarks/jax_step_parts.py [--rounds 3] [--calls 10]
"""
import argparse
import collections
import glob
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from xbench.common.workload.models import MODELS
from xbench.jax_backend.models import build_model as build_flax
from xbench.jax_backend.trace import Program
from xbench.pt_backend.models import build_model as build_torch

BATCH = 128
POOL_GRADIENT = "select_and_scatter"  # JAX's name of the max pool's gradient


def pool_gradient_ops(program: Program) -> set[str]:
    """The select_and_scatter's ops and the unnamed ops XLA made for it (its operands' producers
    that carry no name of JAX's, back to the first named one)."""
    found = {name for name, instruction in program.instructions.items()
             if instruction.op_name.endswith(POOL_GRADIENT)}
    pending = list(found)
    while pending:
        for operand in program.instructions[pending.pop()].operands:
            if (operand in program.instructions and operand not in found
                    and not program.instructions[operand].op_name):
                found.add(operand)
                pending.append(operand)
    return found


def jax_round(calls: int) -> tuple[dict, collections.Counter, float]:
    """Each part's ms a call, each op's, and the pool's gradient's ms a call, from a trace."""
    module, variables = build_flax("small", 0)
    images = jnp.asarray(np.random.default_rng(0).random((BATCH, 28, 28, 1), np.float32))
    labels = jnp.asarray(np.random.default_rng(1).integers(0, 10, BATCH))

    def loss(params):
        logits = module.apply({"params": params}, images, train=True)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    step = jax.jit(jax.value_and_grad(loss))
    params = variables["params"]
    program = Program(step.lower(params).compile().as_text())
    pool = pool_gradient_ops(program)
    for _ in range(5):
        jax.block_until_ready(step(params))
    folder = tempfile.mkdtemp()
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level, options.host_tracer_level = 0, 2
    jax.profiler.start_trace(folder, profiler_options=options)
    for _ in range(calls):
        jax.block_until_ready(step(params))
    jax.profiler.stop_trace()
    [path] = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    parts, ops, pooled = collections.Counter(), collections.Counter(), 0.0
    for plane in jax.profiler.ProfileData.from_file(path).planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                name = stats.get("hlo_op")
                if stats.get("hlo_module") != program.module or name not in program.instructions:
                    continue
                ms = event.duration_ns / 1e6 / calls
                parts[program.part(name)] += ms
                ops[(program.part(name), name, program.instructions[name].op_name)] += ms
                pooled += ms if name in pool else 0.0
    return parts, ops, pooled


def torch_round(calls: int) -> tuple[float, float]:
    """PyTorch's forward (with the loss) and backward ms, the medians of `calls` after 5 (its
    max pool's backward, 0.7 ms of them, through the indices its forward kept)."""
    model = build_torch(MODELS["small"], 0)  # contiguous (NCHW), as pt_backend.train feeds it
    images = torch.from_numpy(np.random.default_rng(0).random((BATCH, 1, 28, 28), np.float32))
    labels = torch.from_numpy(np.random.default_rng(1).integers(0, 10, BATCH))
    forward, backward = [], []
    for call in range(calls + 5):
        started = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        middle = time.perf_counter()
        loss.backward()
        if call >= 5:
            forward.append((middle - started) * 1e3)
            backward.append((time.perf_counter() - middle) * 1e3)
    return statistics.median(forward), statistics.median(backward)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    for round_ in range(1, args.rounds + 1):
        parts, ops, pooled = jax_round(args.calls)
        forward, backward = parts["forward"], parts["backward"]
        torch_forward, torch_backward = torch_round(args.calls * 4)
        print(f"round {round_}: JAX ms a call " + ", ".join(
            f"{part} {ms:.2f}" for part, ms in sorted(parts.items())) +
            f"; of backward, the max pool's gradient {pooled:.2f}")
        for (part, name, op_name), ms in ops.most_common(6):
            print(f"    {ms:6.2f} ms  {part:9} {name} {op_name or '(no name of JAX)'}")
        print(f"  forward / (forward + backward): JAX {forward / (forward + backward):.2f}, "
              f"without the pool's gradient {forward / (forward + backward - pooled):.2f}; "
              f"PyTorch {torch_forward / (torch_forward + torch_backward):.2f} "
              f"(forward {torch_forward:.2f} ms, backward {torch_backward:.2f} ms)")


if __name__ == "__main__":
    main()
