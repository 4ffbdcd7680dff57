"""`xbench profile`: the per-layer timing a study of CPU offloading asks for. A model's units
(conv1, bn1, block1 ... as common.workload.models.SpecModel.named_layers names them) are timed
forward and backward on one device, in each framework, beside the whole training step they
belong to.

A time is taken the same way in both frameworks. pt_backend.profile and tf_backend.profile give
the passes, and `time_passes` runs them:
- each unit runs alone on the input it gets inside the model (the activations of one forward
  pass of a synthetic batch);
- its backward pass computes the gradients of its weights and of its input from a fixed
  upstream gradient (not those of the first unit's input, which training never computes);
- then one whole training step runs, in three passes: forward with the loss, backward, and the
  optimizer's update.

The device is synchronised before and after each pass, and the clock is the wall clock. The
first `warmup` rounds are dropped: they hold tracing, the allocator's growth and cuDNN's
algorithm search. The next `steps` rounds are kept. A round runs every pass once, so a
disturbance of the machine hits all passes alike. A time is the median of the rounds, with its
distribution-free 95% interval (scipy.stats.quantile_test).

The frameworks' profilers are not used: they attribute time to operations, not to the model's
units, and TensorFlow's operations are not PyTorch's, so the two tables would not mean the same.
A unit timed alone still runs without what surrounds it in a step (launch gaps, warm caches), so
the table puts the units' sum beside the step and shows the difference as "rest of step".
"""
from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats

from xbench.common.backends.traits import profiled
from xbench.common.errors import UserError, did_you_mean
from xbench.common.grids.cell import Cell
from xbench.common.measuring.contention import ContentionProbe, epoch_contention
from xbench.common.results.schema import now
from xbench.common.running import env
from xbench.common.running.placement import node_name
from xbench.common.running.runner import measure, stop_on_signals
from xbench.common.workload import layers
from xbench.common.workload.layers import layer_flops, layer_parameters, output_shape
from xbench.common.workload.models import MODELS
from xbench.common.workload.resolve import model_name, own_model

PROFILE_VERSION = 1
# one device, where a unit's time is its own: the frameworks whose units xbench times
PROFILE_BACKENDS = tuple(profiled())
STEP_PASSES = ("forward", "backward", "optimizer")  # the whole step: loss in forward
PROFILE_OPTIMIZER = "adam"  # the grids' default optimizer, with its default settings
TIMEOUT = 1800  # seconds one framework's profile may take
LEVEL = 0.95
MIN_STEPS = 6  # the fewest rounds whose extremes bracket the median with 95% confidence
MAX_STEPS = 1000  # beyond, a profile runs for hours and its interval is no narrower to speak of
MAX_WARMUP = 100  # tracing, allocation and algorithm search are over after a few rounds
SEEDS = 2 ** 32  # seeds are 32-bit in every framework


def check_request(model: str, batch: int, backends: list[str], units: list[str],
                  steps: int, warmup: int, seed: int) -> list[str]:
    """The units to time (every one where `units` is empty); a UserError on bad input."""
    spec = own_model(model_name(model))
    if spec is None:
        raise UserError("xbench profile times the units of xbench's own models, whose spec "
                        "names them; a model file's units are not known to it: time its cells "
                        "with `xbench grid`, whose rows split each step into its parts")
    if batch < 1:
        raise UserError(f"--batch must be at least 1, not {batch}")
    if not MIN_STEPS <= steps <= MAX_STEPS:
        raise UserError(f"--steps must be from {MIN_STEPS} (fewer rounds give the median no 95% "
                        f"interval) to {MAX_STEPS}, not {steps}")
    if not 1 <= warmup <= MAX_WARMUP:
        raise UserError(f"--warmup must be from 1 (the first round traces and allocates) to "
                        f"{MAX_WARMUP}, not {warmup}")
    if not 0 <= seed < SEEDS:
        raise UserError(f"--seed must be from 0 to {SEEDS - 1:,} (seeds are 32-bit in every "
                        f"framework), not {seed}")
    for name in backends:
        if name not in PROFILE_BACKENDS:
            raise UserError(f"profile times units on one device: backend '{name}' is not one of "
                            f"{', '.join(PROFILE_BACKENDS)}")
    known = [unit for unit, _, _ in spec.named_layers()]
    for unit in units:
        if unit not in known:
            raise UserError(f"{model} has no layer '{unit}'{did_you_mean(unit, known)}; its "
                            f"layers are {', '.join(known)}")
    return [unit for unit in known if not units or unit in units]


def profile_cell(backend: str, model: str, batch: int, device: str, seed: int) -> Cell:
    """The cell a profile's process is launched as: one device, one synthetic batch."""
    return Cell(grid="profile", backend=backend, model=model, multiple=1, batch=batch,
                devices=1, epochs=2, batch_mode="global", seed=seed, max_train_samples=batch,
                data="synthetic", device=device, timeout=TIMEOUT, max_test_samples=1,
                optimizer=PROFILE_OPTIMIZER)


def time_passes(passes: list[tuple[str, Callable[[], None]]], sync: Callable[[], None],
                steps: int, warmup: int, contention_limit: float) -> dict:
    """Run every pass once per round, `warmup` rounds dropped, then `steps` rounds kept:
    {"seconds": {pass: [seconds per kept round]}, "contention": what else ran meanwhile}."""
    seconds = {name: [] for name, _ in passes}
    probe = ContentionProbe(node_name())
    probe.list_cell()
    for round_number in range(warmup + steps):
        if round_number == warmup:
            probe.start()
        for name, run in passes:
            sync()
            started = time.perf_counter()
            run()
            sync()
            if round_number >= warmup:
                seconds[name].append(time.perf_counter() - started)
    return {"seconds": seconds, "contention": epoch_contention([probe.stop()], contention_limit)}


def median_interval(values: list[float] | np.ndarray) -> dict:
    """The median of `values` (one per round) with its distribution-free 95% interval (the
    order statistics that bracket the median, scipy.stats.quantile_test) and the 90th
    percentile."""
    values = np.asarray(values, dtype=float)
    median = float(np.median(values))
    ci = stats.quantile_test(values, q=median, p=0.5).confidence_interval(LEVEL)
    return {"median": median, "low": float(ci.low), "high": float(ci.high),
            "p90": float(np.percentile(values, 90)), "n": len(values)}


def layer_text(layer) -> str:
    """What a unit is, in a few words."""
    if isinstance(layer, layers.Conv):
        return (f"conv {layer.kernel}x{layer.kernel}/{layer.stride} "
                f"{layer.in_channels}->{layer.out_channels}" + (" +relu" if layer.relu else ""))
    if isinstance(layer, layers.BatchNorm):
        return f"batchnorm {layer.channels}" + (" +relu" if layer.relu else "")
    if isinstance(layer, layers.Dense):
        return f"dense {layer.in_features}->{layer.out_features}" + (" +relu" if layer.relu else "")
    if isinstance(layer, layers.Residual):
        convs = [inner for inner in layer.body if isinstance(inner, layers.Conv)]
        return (f"residual {convs[0].in_channels}->{convs[0].out_channels}/{convs[0].stride}: "
                f"{len(convs)} convs" + (" + shortcut" if layer.shortcut else ""))
    if isinstance(layer, layers.MaxPool):
        return f"max pool {layer.size}x{layer.size}"
    if isinstance(layer, layers.GlobalAvgPool):
        return "global average pool"
    if isinstance(layer, layers.Embedding):
        return f"token + position embedding {layer.vocab}+{layer.context}->{layer.width}"
    if isinstance(layer, layers.Block):
        return f"transformer block {layer.width}, {layer.heads} heads"
    if isinstance(layer, layers.LayerNorm):
        return f"layernorm {layer.width}"
    if isinstance(layer, layers.TiedLogits):
        return f"logits {layer.width}->{layer.vocab} (embedding's table)"
    return "flatten"


def backward_flops(layer, shape: tuple, first: bool) -> int:
    """FLOPs of a unit's backward pass: the gradients of its weights and of its input, each as
    many as the forward pass; the first unit computes no input gradient (a language model's
    first, its embedding, has no products at all). The tied output layer's weight gradient is
    its embedding table's, computed in its pass too."""
    flops = layer_flops(layer, shape)
    return flops if first and isinstance(layer, (layers.Conv, layers.Dense)) else 2 * flops


def summarize(model: str, batch: int, measured: dict) -> dict:
    """One framework's table: per unit its times, share of the step and achieved GFLOP/s, and
    the units' sum beside the step. A round ran every pass once, so each derived number is taken
    per round (a share, a rate, a sum) and summarised like a time: median and 95% interval."""
    seconds = {name: np.asarray(values, dtype=float)
               for name, values in measured["seconds"].items()}
    total = np.sum([seconds[f"step.{name}"] for name in STEP_PASSES], axis=0)
    step = {name: median_interval(seconds[f"step.{name}"]) for name in STEP_PASSES}
    step["total"] = median_interval(total)
    units, units_total = [], np.zeros_like(total)
    for index, (unit, layer, shape) in enumerate(MODELS[model].named_layers()):
        if f"{unit}.forward" not in seconds:
            continue
        forward, backward = seconds[f"{unit}.forward"], seconds.get(f"{unit}.backward")
        both = forward + (backward if backward is not None else 0.0)
        units_total += both
        flops = layer_flops(layer, shape) * batch
        flops_back = backward_flops(layer, shape, index == 0) * batch
        units.append({
            "unit": unit, "layer": layer_text(layer),
            "output_shape": list(output_shape(layer, shape)),
            "params": layer_parameters(layer), "forward_flops": flops,
            "backward_flops": flops_back, "forward": median_interval(forward),
            "backward": median_interval(backward) if backward is not None else None,
            "share_of_step": median_interval(both / total),
            "forward_gflops": median_interval(flops / forward / 1e9) if flops else None,
            "backward_gflops": (median_interval(flops_back / backward / 1e9)
                                if flops_back and backward is not None else None)})
    return {"units": units, "step": step, "units_seconds": median_interval(units_total),
            "units_share": median_interval(units_total / total),
            "rest_seconds": median_interval(total - units_total),
            "all_units": len(units) == len(list(MODELS[model].named_layers()))}


def run_profile(model: str, batch: int, backends: list[str], units: list[str], steps: int,
                warmup: int, device: str, seed: int, launcher,
                echo: Callable[[str], None] = print) -> dict:
    """Profile `model` with each backend, one launched process each
    (common.running.runner.launch, as a grid's cells): the record that `xbench profile` prints
    and writes."""
    record = {"profile_version": PROFILE_VERSION, "measured_at": now(), "model": model,
              "batch": batch, "device": device, "steps": steps, "warmup": warmup, "seed": seed,
              "data": "synthetic", "optimizer": PROFILE_OPTIMIZER, "units": units,
              "env": env.capture(), "frameworks": [], "not_measured": []}
    request = {"units": units, "steps": steps, "warmup": warmup}
    with stop_on_signals(), tempfile.TemporaryDirectory(prefix="xbench-profile-") as logs:
        for name in backends:
            echo(f"{name}: timing {len(units)} unit(s) of {model} at batch {batch}, "
                 f"{warmup} warm-up + {steps} rounds ...")
            measured, why = measure(profile_cell(name, model, batch, device, seed), "profile",
                                    request, Path(logs) / f"{name}.log", launcher)
            if why:
                record["not_measured"].append({"backend": name, "why": why})
                echo(f"{name}: not measured: {why.splitlines()[0]}")
                continue
            record["frameworks"].append({**measured, "backend": name,
                                         **summarize(model, batch, measured)})
    return record
