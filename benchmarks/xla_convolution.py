"""Why JAX's CPU rate is what it is: the small model's convolution alone, in XLA and in PyTorch.

Times, at the benchmark's batch, the small MNIST CNN's one convolution (3 x 3, 1 -> 32 channels
over 28 x 28 images, PyTorch's padding 1, no bias) forward and backward, the 2 x 2 max pool after
it forward and backward, and the whole training step of each framework, in ms per call (the
least over rounds that alternate the frameworks and settings, the least contended on a shared
machine; their median beside it), with the minor page faults of a call (fresh pages the kernel
maps in: memory a call allocates that the allocator had handed back):

- XLA: jitted lax.conv_general_dilated in Flax's layout (NHWC images, HWIO kernel); its backward
  the kernel's gradient (jax.vjp), the only one the first layer needs (its input is the data);
  flax.linen.max_pool and its jax.vjp (XLA's select-and-scatter); the whole step
  benchmarks/jax_fidelity.py's plain Flax + Optax step, and the same step with the max pool
  written as a reshape and a max over the 2 x 2 windows (the same forward; its backward
  elementwise, no select-and-scatter); and the temporaries XLA allocates for a call.
- PyTorch: torch.nn.functional.conv2d (oneDNN on a CPU), channels last as in the model (its
  input is the NHWC batch permuted); its backward aten's convolution_backward for the weight
  alone, what autograd calls; max_pool2d_with_indices and its backward, as autograd calls them;
  the whole step benchmarks/fidelity.py's minimal loop's (normalise, zero_grad, forward,
  backward, Adam).

Both run as they come and again with glibc's malloc keeping the blocks it frees (KEEP_MEMORY),
then XLA under each XLA flag setting (`--flags`, repeatable; the defaults are the ones tried for
docs/backends.md). Each setting runs in a subprocess of this script (XLA reads XLA_FLAGS and
glibc its settings once, at start); a flag this XLA does not know aborts it, which is printed,
as is what ran the forward convolution in XLA's compiled program (a YNNPACK fusion, XLA's own
convolution thunk ...). Every side uses the cores this process may use.

    python benchmarks/xla_convolution.py [--batch 128] [--flags=--xla_cpu_enable_fast_math=true]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from xbench.common.machine import cpu_cores
from xbench.common.workload.models import ADAM, MODELS
from xbench.common.workload.samples import NORMALISATION

MODEL, IMAGE, CHANNELS = "small", 28, 32  # the small model's first (only) convolution
# glibc's malloc hands a block above its mmap threshold (128 KiB at first, then the largest block
# freed) back to the kernel when it is freed, so the next call's block is fresh pages that fault
# in: these settings have it keep freed blocks in the process instead
KEEP_MEMORY = {"MALLOC_MMAP_THRESHOLD_": "1073741824", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
PARTS = {"forward": "conv forward", "backward": "conv backward", "pool": "pool forward",
         "pool_backward": "pool backward", "step": "whole step"}
LABELS = {**PARTS, "step_reshaped_pool": "whole step, pool as reshape + max"}
FLAGS = ["--xla_cpu_use_thunk_runtime=false", "--xla_cpu_enable_fast_math=true",
         "--xla_cpu_multi_thread_eigen=false", "--xla_cpu_use_onednn=true",
         "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"]


def per_call(call, calls, repeats):
    """{"ms": the mean ms of `calls` calls, `repeats` times, "faults": minor page faults per
    call (the kernel mapping in fresh pages: memory a call allocates and frees)}, after two
    warm-up calls."""
    call()
    call()
    times, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"ms": times, "faults": faults / (calls * repeats)}


def batch_of(batch):
    """A batch of random uint8 MNIST-shaped images (NHWC) and labels: the timings do not depend
    on the pixels."""
    import numpy as np
    rng = np.random.default_rng(0)
    return (rng.integers(0, 256, (batch, IMAGE, IMAGE, 1), dtype=np.uint8),
            rng.integers(0, 10, batch).astype(np.int32))


def xla_timings(batch, calls, repeats):
    """XLA's parts and whole steps (`per_call`), the MB of temporaries XLA allocates for a call,
    and what ran the forward convolution."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((batch, IMAGE, IMAGE, 1), np.float32))
    w = jnp.asarray(rng.standard_normal((3, 3, 1, CHANNELS), np.float32))
    dy = jnp.asarray(rng.standard_normal((batch, IMAGE, IMAGE, CHANNELS), np.float32))
    dz = dy[:, ::2, ::2]

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def kernel_gradient(x, w, dy):
        return jax.vjp(lambda w: conv(x, w), w)[1](dy)[0]

    def pool(y):
        return nn.max_pool(y, (2, 2), (2, 2))

    def pool_gradient(y, dz):
        return jax.vjp(pool, y)[1](dz)[0]

    forward, backward = jax.jit(conv), jax.jit(kernel_gradient)
    pooled, pooled_backward = jax.jit(pool), jax.jit(pool_gradient)
    forward_text = forward.lower(x, w).compile().as_text()
    steps, temporaries = xla_steps(batch, calls, repeats)
    temporaries["pool_backward"] = pooled_backward.lower(dy, dz).compile()
    return {"forward": per_call(lambda: forward(x, w).block_until_ready(), calls, repeats),
            "backward": per_call(lambda: backward(x, w, dy).block_until_ready(), calls,
                                 repeats),
            "pool": per_call(lambda: pooled(dy).block_until_ready(), calls, repeats),
            "pool_backward": per_call(lambda: pooled_backward(dy, dz).block_until_ready(),
                                      calls, repeats),
            **steps,
            "version": jax.__version__,
            "temp_mb": {part: compiled.memory_analysis().temp_size_in_bytes / 1e6
                        for part, compiled in temporaries.items()},
            "ran_as": ("a YNNPACK fusion" if "__ynn_fusion" in forward_text else
                       "oneDNN" if "onednn" in forward_text.lower() else
                       "an XNNPACK fusion" if "__xnn_fusion" in forward_text else
                       "XLA's convolution thunk" if " convolution(" in forward_text else "?")}


def xla_steps(batch, calls, repeats):
    """The plain Flax + Optax step (`per_call`), and the same with the max pool written as a
    reshape and a max; and each compiled (its temporaries)."""
    from unittest import mock

    import flax.linen as nn
    from jax_fidelity import plain_step

    images, labels = batch_of(batch)

    def reshape_max(y, window, strides):  # nn.max_pool's forward for 2 x 2 windows, stride 2
        b, h, w, c = y.shape
        return y.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))

    def whole_step():
        """The step's call (it traces the model at its first) and the step compiled."""
        step, state = plain_step(MODEL, 0, ADAM["learning_rate"],
                                 *(v[0] for v in NORMALISATION["mnist"]))
        compiled = step.lower(*state, images, labels).compile()

        def call():
            nonlocal state
            *state, loss = step(*state, images, labels)
            loss.block_until_ready()
        call()
        return call, compiled

    plain, plain_compiled = whole_step()
    with mock.patch.object(nn, "max_pool", reshape_max):
        reshaped, reshaped_compiled = whole_step()
    return ({"step": per_call(plain, calls, repeats),
             "step_reshaped_pool": per_call(reshaped, calls, repeats)},
            {"step": plain_compiled, "step_reshaped_pool": reshaped_compiled})


def torch_timings(batch, calls, repeats):
    """PyTorch's forward, backward and whole step (ms)."""
    import torch
    import torch.nn.functional as F

    from xbench.pt_backend.models import build_model, build_optimizer

    torch.manual_seed(0)
    # channels last, as in the model: its input is the NHWC batch permuted, so the conv's
    # output and gradient are channels last too
    x = torch.randn(batch, IMAGE, IMAGE, 1).permute(0, 3, 1, 2)
    w = torch.randn(CHANNELS, 1, 3, 3)
    dy = torch.randn(batch, CHANNELS, IMAGE, IMAGE).contiguous(memory_format=torch.channels_last)

    def backward():
        return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1],
                                                   False, [0, 0], 1, [False, True, False])

    pooled, indices = F.max_pool2d(dy, 2, return_indices=True)

    def pool_backward():
        return torch.ops.aten.max_pool2d_with_indices_backward(pooled, dy, [2, 2], [2, 2],
                                                               [0, 0], [1, 1], False, indices)

    model = build_model(MODELS[MODEL], 0)
    optimizer = build_optimizer(model.parameters())
    images, labels = (torch.from_numpy(a) for a in batch_of(batch))
    labels = labels.long()
    mean, std = (v[0] for v in NORMALISATION["mnist"])

    def whole_step():
        inputs = images.permute(0, 3, 1, 2).float().div_(255).sub_(mean).div_(std)
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

    with torch.no_grad():
        timings = {"forward": per_call(lambda: F.conv2d(x, w, padding=1), calls, repeats),
                   "backward": per_call(backward, calls, repeats),
                   "pool": per_call(lambda: F.max_pool2d(dy, 2, return_indices=True),
                                       calls, repeats),
                   "pool_backward": per_call(pool_backward, calls, repeats)}
    return {**timings, "step": per_call(whole_step, calls, repeats)}


def in_subprocess(side, args, flags="", keep_memory=False):
    """`side`'s timings ("xla" or "torch") from a subprocess of this script, under
    XLA_FLAGS=`flags`, glibc's malloc keeping freed blocks where `keep_memory`; (None, the
    error's line) where XLA refused the flags."""
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu",
           **(KEEP_MEMORY if keep_memory else {})}
    done = subprocess.run([sys.executable, __file__, "--only", side, "--batch", str(args.batch),
                           "--calls", str(args.calls), "--repeats", str(args.repeats)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        refusal = next((line for line in lines if line.startswith(("F", "E"))),
                       lines[-1] if lines else f"exit status {done.returncode}")
        return None, refusal
    return json.loads(done.stdout.splitlines()[-1]), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--calls", type=int, default=10, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per round")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds over both frameworks and every XLA setting in turn")
    parser.add_argument("--flags", action="append", default=None,
                        help="an XLA_FLAGS setting to time XLA under, besides the default "
                             "(repeatable; written --flags=--xla_...)")
    parser.add_argument("--only", choices=("xla", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:  # a subprocess of this script, under its environment
        if args.only == "torch":
            import torch
            torch.set_num_threads(cpu_cores())
            found = torch_timings(args.batch, args.calls, args.repeats)
            found["version"] = torch.__version__
        else:
            found = xla_timings(args.batch, args.calls, args.repeats)
        print(json.dumps(found))
        return

    flag_settings = args.flags if args.flags is not None else FLAGS
    runs = [("torch", "", False), ("xla", "", False), ("torch", "", True), ("xla", "", True),
            *(("xla", flags, False) for flags in flag_settings)]
    measured, refused = {run: {} for run in runs}, {}
    for _ in range(args.rounds):  # alternated, so that a busy spell does not fall on one side
        for run in runs:
            if run not in refused:
                found, refusal = in_subprocess(run[0], args, run[1], run[2])
                if found is None:
                    refused[run] = refusal
                else:
                    gather(measured[run], found)
    report(measured, refused, flag_settings, args)


def report(measured, refused, flag_settings, args):
    """Print the two tables (as they run, glibc keeping freed blocks) and XLA under each flag."""
    print(f"small model's convolution (3x3, 1 -> {CHANNELS} channels, {IMAGE}x{IMAGE}) and 2x2 "
          f"max pool, batch {args.batch}, {cpu_cores()} cores. ms per call: the least of "
          f"{args.rounds} alternated rounds x {args.repeats} repeats of {args.calls} calls "
          f"(their median), f: minor page faults per call; ratios of the least")
    for keep, title in ((False, "as they run (glibc's malloc as it comes)"),
                        (True, "glibc's malloc keeping freed blocks ("
                               + " ".join(f"{k}={v}" for k, v in KEEP_MEMORY.items()) + ")")):
        pt, xla = measured[("torch", "", keep)], measured[("xla", "", keep)]
        print(f"{title}:")
        print(f"  {'':34} {'PyTorch ' + pt['version']:>26} {'XLA (JAX ' + xla['version'] + ')':>26}"
              f" {'XLA / PyTorch':>14}")
        for part, label in LABELS.items():
            if part in pt:
                torch_side, against = cell(pt[part]), pt[part]
            else:
                torch_side, against = "", pt["step"]
            ratio = f"{min(xla[part]['ms']) / min(against['ms']):.2f}x"
            print(f"  {label:34} {torch_side:>26} {cell(xla[part]):>26} {ratio:>14}")
        print(f"  XLA's forward convolution ran as {xla['ran_as']}; XLA's temporaries a call: "
              + ", ".join(f"{LABELS[part]} {mb:.1f} MB" for part, mb in xla["temp_mb"].items()))
    default = measured[("xla", "", False)]
    print("XLA under each flag, glibc's malloc as it comes (ms, the least; x: against XLA's "
          "defaults):")
    for flags in flag_settings:
        run = ("xla", flags, False)
        if run in refused:
            print(f"  {flags}: refused: {refused[run]}")
            continue
        found = measured[run]
        parts = ", ".join(f"{label} {min(found[part]['ms']):.2f} "
                          f"({min(found[part]['ms']) / min(default[part]['ms']):.2f}x)"
                          for part, label in PARTS.items())
        print(f"  {flags} (the convolution ran as {found['ran_as']}): {parts}")


def gather(into, found):
    """Add one round's timings (`found`) to `into`'s."""
    for part, value in found.items():
        if isinstance(value, dict) and "ms" in value:
            kept = into.setdefault(part, {"ms": [], "faults": []})
            kept["ms"] += value["ms"]
            kept["faults"].append(value["faults"])
        else:
            into[part] = value


def cell(measured):
    """'least (median) faults' of a part's measurements."""
    return (f"{min(measured['ms']):.2f} ({statistics.median(measured['ms']):.2f}) "
            f"{statistics.median(measured['faults']):,.0f}f")


if __name__ == "__main__":
    main()
