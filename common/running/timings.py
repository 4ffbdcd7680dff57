"""What the dry run measures of this machine, kept between runs (in $XBENCH_CACHE/timings, one
file per host): for each framework, model and setup, a real short cell of the framework's
single-device backend (`framework_costs`). Each entry is keyed by that cell's key (its model,
whose name holds a model file's digest, its data, batch, test set and knobs) and its packages'
versions, so a new version is measured afresh. The grid run after a dry
run, and the next dry run, read them instead of measuring again (a probe costs seconds to a
minute of a busy machine), and the grid run never measures. An entry that is not what was
written (damaged by hand or by the disk) is measured again; to measure everything again (the
machine was busy when it was measured), delete the file.
"""
from __future__ import annotations

import contextlib
import dataclasses
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

if TYPE_CHECKING:
    from xbench.common.workload.model import Model

PROBE_CELL_STEPS = 8  # steps an epoch of a framework's probe cell
COSTS = ("start", "per_sample", "first_epoch_extra", "finish")  # its seconds, as kept


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


def probe_key(cell: Cell) -> str:
    """The kept entry of `cell`'s framework's probe cell."""
    probe = reference_cell(cell)
    return f"cell {probe.key} {Start.of(probe.backend).describe()}"


def framework_costs(cell: Cell, model: Model, launcher: Launcher,
                    measure: bool) -> tuple[dict | None, bool]:
    """What `cell`'s framework costs here (`model`: the cell's, the probe cell's too), from a
    real short cell of its single-device backend
    (reference_cell, launched as a grid launches it, on this machine only): its start-up
    (imports, data, model), its second epoch's seconds per sample, its first epoch's extra
    seconds (TensorFlow's tracing, JAX's compilation), and its finish (the test evaluation on
    the cell's test set, the evidence, the processes' end). Kept, or (where `measure`) run now;
    None where that cell does not run ok here."""
    probe = reference_cell(cell)
    backend = Start.of(probe.backend)

    def run() -> dict | None:
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
        outside = seconds - result["startup_seconds"] - first["seconds"] - second["seconds"]
        return {"start": result["startup_seconds"],
                "per_sample": second["seconds"] / second["samples"],
                "first_epoch_extra": max(1e-3, first["seconds"] - second["seconds"]),
                "finish": max(1e-3, outside)}
    if launcher.name != "local":  # this machine's timings say nothing of a cluster's nodes
        return None, False
    return kept_or_measured(probe_key(cell), COSTS, run if measure else None)
