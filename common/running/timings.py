"""What the dry run measures of this machine, kept between runs (in $XBENCH_CACHE/timings, one
file per host), each a real short cell of a framework's single-device backend launched as a grid
launches it:

- a framework's reference (`framework_reference`): the same short cell whatever the grid, of
  REFERENCE_MODEL on synthetic data, measured once per host and framework version; the dry run
  scales it to each cell (common.running.estimate). At most one per framework, one at a time,
  all of them within PROBES_SECONDS; and, where a cell compiles, a compiled one (its first
  epoch holds what compiling costs), each within COMPILED_PROBE_SECONDS;
- a cell's own probe (`cell_costs`, `xbench grid --dry-run --probe`): the cell's model, data,
  batch, test set and knobs, keyed by that short cell's key (a model file's name holds its
  digest) and its packages' versions.

Either is keyed with its packages' versions, so a new version is measured afresh. The grid run
after a dry run, and the next dry run, read them instead of measuring again, and the grid run
never measures. An entry that is not what was written (damaged by hand or by the disk) is
measured again; to measure everything again (the machine was busy when it was measured), delete
the file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from xbench.common import cache
from xbench.common.backends.start import Start
from xbench.common.backends.traits import TRAITS, references
from xbench.common.grids.cell import Cell
from xbench.common.grids.grid import normalised
from xbench.common.json_shapes import NUMBER, is_kind
from xbench.common.running.launch import Launcher, refused
from xbench.common.running.runner import launch
from xbench.common.workload import faults
from xbench.common.workload.resolve import resolve_model

if TYPE_CHECKING:
    from xbench.common.workload.model import Model

PROBE_CELL_STEPS = 8  # steps an epoch of a framework's probe cell
COSTS = ("start", "per_sample", "first_epoch_extra", "finish")  # its seconds, as kept
# A framework's reference: the small CNN at batch 128 on synthetic data (no dataset needed), 256
# test samples, evaluated once an epoch too (a target accuracy no random label reaches): what a
# test sample costs is measured apart from the processes' end (here a test sample took 0.7-1.0x
# a training sample's seconds in PyTorch, 0.2-0.4x in TensorFlow, 0.16x in JAX: no one share of
# the training holds for all).
REFERENCE_MODEL, REFERENCE_BATCH, REFERENCE_TEST_SAMPLES = "small", 128, 256
REFERENCE_COSTS = (*COSTS, "per_test_sample")
PROBES_SECONDS = 30  # at most, every reference a dry run measures, together
# At most, each compiled reference (after the others): compiling is the cost it measures, and a
# compile cut short measures nothing; the small CNN's torch.compile took 15-17 s on a quiet 2-core
# machine here and past 30 s beside two busy loops.
COMPILED_PROBE_SECONDS = 120


def timings_path() -> Path:
    return cache.cache_path("timings", f"{socket.gethostname()}.json")


def kept_timings() -> dict:
    """Every entry kept for this host ({} where there is no file, or it is not JSON)."""
    try:
        kept = json.loads(timings_path().read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def kept_or_measured(key: str, fields: tuple[str, ...],
                     measure: Callable[[], dict | None] | None) -> tuple[dict | None, bool]:
    """The entry `key` (its `fields` positive numbers), else what `measure` gives, kept whole
    (None: nothing is measured). Also whether it was measured now."""
    found = kept_timings().get(key)
    if isinstance(found, dict) and all(is_kind(found.get(f), NUMBER) and found[f] > 0
                                       for f in fields):
        return found, False
    measured = measure() if measure else None
    if measured is not None:
        with contextlib.suppress(OSError):  # not kept: measured again next time
            cache.write_whole(timings_path(),
                              json.dumps({**kept_timings(), key: measured}).encode())
    return measured, measured is not None


def reference_cell(cell: Cell) -> Cell:
    """A short cell of `cell`'s framework's single-device backend: its model, data, batch, test
    set and knobs but a capped link (its one process has no gradients to cross it),
    PROBE_CELL_STEPS steps an epoch for 2 epochs. Its OpenMP threads wait passively unless the
    cell asks otherwise, as a busy machine's PyTorch cells do (`omp_wait auto`): spinning, a
    probe beside other work would read a fraction of their rate (a framework whose threads are
    not OpenMP's keeps the setting's default: `normalised`)."""
    short = normalised(dataclasses.replace(
        cell, backend=references()[TRAITS[cell.backend].framework.name], devices=1, epochs=2,
        multiple=1, repeat=0, seed=0, max_train_samples=None,
        inject=faults.without_link(cell.inject),
        omp_wait="passive" if cell.omp_wait == "auto" else cell.omp_wait))
    return dataclasses.replace(short, max_train_samples=PROBE_CELL_STEPS * short.global_batch)


@functools.cache
def versions(backend: str) -> str:
    """What `backend` uses here (its packages' versions), read once a process: a dry run asks
    it of every cell."""
    return Start.of(backend).describe()


def probe_key(cell: Cell) -> str:
    """The kept entry of `cell`'s framework's probe cell."""
    probe = reference_cell(cell)
    return f"cell {probe.key} {versions(probe.backend)}"


def measured_costs(probe: Cell, model: Model, launcher: Launcher) -> dict | None:
    """What a short cell of a single-device backend (`probe`, of `model`) cost here, launched as
    a grid launches it: its start-up (imports, data, model), its second epoch's seconds per
    sample, its first epoch's extra seconds (TensorFlow's tracing, JAX's compilation), its
    finish (the test evaluation, the evidence, the processes' end) and, where its epochs
    evaluated too (a reference), a test sample's seconds; None where it does not run ok (within
    its timeout)."""
    backend = Start.of(probe.backend)
    if refused(backend, probe, model, launcher) or backend.missing():
        return None
    with tempfile.TemporaryDirectory(prefix="xbench-probe-") as folder:
        started = time.perf_counter()
        ended = launch(backend, probe, model, Path(folder) / "probe.log", launcher)
        seconds = time.perf_counter() - started
    if ended["status"] != "ok":
        return None
    result = ended["result"]["measurement"]
    first, second = result["epochs"][:2]
    evaluating = first.get("evaluation_seconds", 0.0) + second.get("evaluation_seconds", 0.0)
    outside = (seconds - result["startup_seconds"] - first["seconds"] - second["seconds"]
               - evaluating)
    costs = {"start": result["startup_seconds"],
             "per_sample": second["seconds"] / second["samples"],
             "first_epoch_extra": max(1e-3, first["seconds"] - second["seconds"]),
             "finish": max(1e-3, outside)}
    if "evaluation_seconds" in second:  # a reference: its epochs' evaluations, timed
        costs["per_test_sample"] = max(1e-6, second["evaluation_seconds"] / probe.max_test_samples)
    return costs


def cell_costs(cell: Cell, model: Model, launcher: Launcher,
               measure: bool) -> tuple[dict | None, bool]:
    """What `cell`'s own probe cost here (reference_cell, of `model`: the cell's), on this
    machine only: kept, or (where `measure`) run now; None where it is neither. Also whether it
    ran now."""
    if launcher.name != "local":  # this machine's timings say nothing of a cluster's nodes
        return None, False
    return kept_or_measured(
        probe_key(cell), COSTS,
        (lambda: measured_costs(reference_cell(cell), model, launcher)) if measure else None)


def framework_reference_cell(framework: str, device: str, compile: str = "off",
                             timeout: int = 600) -> Cell:
    """A framework's reference on `device` (a cell's setting: auto, cpu, cuda), its step
    compiled or not (`compile`, the cell's setting): its single-device backend's short cell of
    REFERENCE_MODEL on synthetic data, PROBE_CELL_STEPS steps an epoch for 2 epochs, evaluated
    at each epoch's end (to an accuracy of 1, which it never reaches), its OpenMP threads
    waiting passively (as reference_cell's), killed after `timeout` seconds."""
    return normalised(Cell(
        grid="reference", backend=references()[framework], model=REFERENCE_MODEL, multiple=1,
        batch=REFERENCE_BATCH, devices=1, epochs=2, batch_mode="global", seed=0,
        max_train_samples=PROBE_CELL_STEPS * REFERENCE_BATCH,
        max_test_samples=REFERENCE_TEST_SAMPLES, data="synthetic", device=device,
        timeout=timeout, omp_wait="passive", target_accuracy=1.0, evals_per_epoch=1,
        compile=compile))


def reference_key(framework: str, device: str, compile: str = "off") -> str:
    """The kept entry of `framework`'s reference on `device`, compiled or not."""
    probe = framework_reference_cell(framework, device, compile)
    return f"reference {probe.key} {versions(probe.backend)}"


def framework_reference(framework: str, device: str, compile: str, launcher: Launcher,
                        seconds: float | None) -> tuple[dict | None, bool]:
    """`framework`'s reference costs here on `device`, compiled or not (framework_reference_cell):
    kept, or (given `seconds` it may take, where it is not kept) measured now within them; None
    where it is neither. Also whether it ran now."""
    if launcher.name != "local":
        return None, False
    probe = framework_reference_cell(framework, device, compile, max(1, int(seconds or 0)))
    return kept_or_measured(
        reference_key(framework, device, compile), REFERENCE_COSTS,
        (lambda: measured_costs(probe, resolve_model(REFERENCE_MODEL), launcher))
        if seconds and seconds > 0 else None)
