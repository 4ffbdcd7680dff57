"""What `xbench grid --dry-run` says before anything runs: for every cell, whether it is done
already (resume), whether it cannot run here and why, and otherwise about how long it should take
here, with where that forecast comes from. The grid run forecasts the same way before its first
cell, without probing (rows and kept probes only), and its live ETA starts from those forecasts
(common.running.progress.GridProgress).

A forecast comes, in this order, from earlier ok rows of this machine (those in the results
file's folder): the same cell's seconds; else the same model and backend on as many devices,
their seconds per sample scaled to this cell's samples and epochs, plus their start-up and
finish. Else from a real short cell of the cell's framework's single-device backend, of its
model, data, batch and test set, run here once and kept (common.running.timings): its start-up
(once per process, the processes sharing the cores, once more for a launcher: torchrun,
horovodrun), its seconds per sample scaled to the cell's samples, epochs and share of the cores,
its first epoch's extra (tracing, compilation) and its finish (the test evaluation and the
processes' end); start-up and finish from earlier rows of the same backend on as many devices
(another model) where there are. What a wrapper adds to its framework's reference (collectives,
more processes' own overhead) is known only from its rows.
"""
from __future__ import annotations

import math
import socket
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xbench.common.backends.start import Start
from xbench.common.grids.cell import Cell, threads_per_device
from xbench.common.machine import cpu_cores
from xbench.common.results.store import read_rows, results_files
from xbench.common.running.launch import Launcher, refused
from xbench.common.running.progress import duration
from xbench.common.running.timings import PROBE_CELL_STEPS, framework_costs, reference_cell
from xbench.common.workload.data import train_samples
from xbench.common.workload.resolve import resolve_model

if TYPE_CHECKING:
    from xbench.common.workload.model import Model


@dataclass
class Estimate:
    status: str            # "done", "unsupported", "to run"
    seconds: float | None  # for cells to run
    source: str            # why that status, or where the seconds come from


def gpus_here() -> int:
    """NVIDIA GPUs the driver lists on this machine (no framework needed)."""
    folder = Path("/proc/driver/nvidia/gpus")
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def unsupported_here(backend: Start, cell: Cell, model: Model, gpus: int,
                     launcher: Launcher) -> str | None:
    """Why `cell` (of `model`) would be an unsupported row here (as its backend and launcher
    would say), or None."""
    reason = refused(backend, cell, model, launcher)
    if reason:
        return reason
    if cell.launcher != "local":
        return None  # the cluster's nodes decide
    if cell.device == "cuda" and gpus == 0:
        return "the cell asks for device 'cuda' and this machine has no NVIDIA GPU"
    kind = "cuda" if gpus and cell.device != "cpu" else "cpu"
    if kind == "cuda" and gpus < cell.devices:
        return f"the cell needs {cell.devices} CUDA devices; this machine has {gpus}"
    return backend.unsupported_on(cell, kind)


def history(results_path: Path) -> list[dict]:
    """Ok rows of this machine in the results file's folder (every *.jsonl there)."""
    host, rows, seen = socket.gethostname(), [], set()
    folder = results_path.parent
    for path in results_files(folder) if folder.is_dir() else []:
        rows += [r for r in read_rows(path, seen)[0]
                 if r["status"] == "ok" and r["env"].get("host") == host]
    return rows


def samples_per_epoch(cell: Cell, model: Model) -> int:
    base = min(train_samples(cell.data, model),
               cell.max_train_samples or math.inf)
    return base * cell.multiple // cell.global_batch * cell.global_batch


def outside_epochs(row: dict) -> float:
    """A row's seconds outside its epochs: launch, imports, data, model, test evaluation, the
    evidence's gathering."""
    return row["cell_seconds"] - sum(e["seconds"] for e in row["epochs"])


def from_rows(cell: Cell, model: Model, rows: list[dict]) -> Estimate | None:
    same_cell = [r["cell_seconds"] for r in rows if r["cell_key"] == cell.key]
    if same_cell:
        return Estimate("to run", statistics.mean(same_cell),
                        f"{len(same_cell)} earlier run(s) of this cell")
    like = [r for r in rows if (r["model"], r["backend"], r["world_size"])
            == (cell.model, cell.backend, cell.world)]
    if not like:
        return None
    per_sample = statistics.mean(r["epochs"][-1]["seconds"] / r["epochs"][-1]["samples"]
                                 for r in like)
    return Estimate("to run", statistics.mean(map(outside_epochs, like))
                    + per_sample * samples_per_epoch(cell, model) * cell.epochs,
                    f"{len(like)} earlier row(s) of the same model and backend on as many "
                    f"devices")


def device_share(cell: Cell) -> float:
    """The share of the cores the cell's devices have: the probe had every core; a cell whose
    devices have fewer threads in all (a compute reference at the N-device ranks' threads)
    trains that much slower."""
    return min(1.0, threads_per_device(cell, cpu_cores()) * cell.devices / cpu_cores())


def composed(cell: Cell, model: Model, rows: list[dict], launcher: Launcher,
             measure: bool) -> Estimate:
    """Start-up, training and finish, each measured (the module's docstring); where `measure`
    is False only what is kept is read, and what is not kept is no forecast."""
    backend = Start.of(cell.backend)
    costs, ran = framework_costs(cell, model, launcher, measure)
    if costs is None:
        return Estimate("to run", None, f"no earlier rows, and no {PROBE_CELL_STEPS}-step "
                        f"{reference_cell(cell).backend} cell of it " + (
                            "ran ok here" if measure else
                            "kept here (`xbench grid --dry-run` runs one)"))
    training = (samples_per_epoch(cell, model) * cell.epochs * costs["per_sample"]
                / device_share(cell) + costs["first_epoch_extra"])
    probe = (f"a {PROBE_CELL_STEPS}-step {reference_cell(cell).backend} cell "
             f"{'now' if ran else 'kept'}")
    like = [r for r in rows if (r["backend"], r["world_size"]) == (cell.backend, cell.world)]
    if like:
        return Estimate("to run", statistics.mean(map(outside_epochs, like)) + training,
                        f"start-up and finish of {len(like)} earlier row(s) of {cell.backend} "
                        f"on {cell.world} device(s), training as {probe} trained")
    processes = backend.processes(cell)
    starter = 1 if backend.scope.tool else 0
    starting = costs["start"] * (starter + max(1.0, processes / cpu_cores()))
    return Estimate("to run", starting + training + costs["finish"],
                    f"as {probe} ran: start-up {starting:.0f} s ({processes} process(es)"
                    f"{' and a launcher' if starter else ''}), training, finish "
                    f"{costs['finish']:.0f} s")


def estimate(cells: list[Cell], results_path: Path, resume: bool, launcher: Launcher,
             measure: bool = True) -> list[Estimate]:
    """Every cell's status and forecast; `measure`: probe what is not kept (the dry run), else
    read only (the grid run, before its first cell)."""
    rows = history(results_path)
    done = ({(r["cell_key"], r["repeat"]) for r in read_rows(results_path)[0]
             if r["status"] == "ok"} if resume and results_path.is_file() else set())
    gpus, estimates = gpus_here(), []
    for cell in cells:
        model = resolve_model(cell.model)  # once for the cell: each question below is given it
        reason = unsupported_here(Start.of(cell.backend), cell, model, gpus, launcher)
        if (cell.key, cell.repeat) in done:
            estimates.append(Estimate("done", None, f"an ok row in {results_path.name}"))
        elif reason:
            estimates.append(Estimate("unsupported", None, reason))
        else:
            estimates.append(from_rows(cell, model, rows)
                             or composed(cell, model, rows, launcher, measure))
    return estimates


def forecasts(cells: list[Cell], results_path: Path, resume: bool,
              launcher: Launcher) -> list[float | None]:
    """What the grid run's ETA starts from, before its first cell: each cell's forecast as the
    dry run makes it, from rows and kept probes only (probing would take the machine from the
    grid); 0 for a cell that will not train here, None where nothing is known."""
    return [found.seconds if found.status == "to run" else 0.0
            for found in estimate(cells, results_path, resume, launcher, measure=False)]


def dry_run_plan(cells: list[Cell], results_path: Path, resume: bool,
                 launcher: Launcher) -> list[str]:
    """`xbench grid --dry-run`'s lines: every cell with what would happen to it here (`launcher`
    runs it), then the total time it should take."""
    estimates = estimate(cells, results_path, resume, launcher)
    lines = []
    for number, (cell, found) in enumerate(zip(cells, estimates), 1):
        what = (f"about {duration(found.seconds)} ({found.source})" if found.status == "to run"
                else f"{found.status}: {found.source}")
        lines.append(f"[{number}/{len(cells)}] {cell.label}  [{cell.key}]  {what}")
    by = {status: [e for e in estimates if e.status == status]
          for status in ("done", "unsupported", "to run")}
    known = [e.seconds for e in by["to run"] if e.seconds is not None]
    total = f"about {duration(sum(known))} here" if known else "no estimate here"
    unknown = len(by["to run"]) - len(known)
    lines.append(f"{len(cells)} cells: {len(by['done'])} done already, {len(by['unsupported'])} "
                 f"unsupported here, {len(by['to run'])} to run: {total}"
                 + (f" (and {unknown} without an estimate)" if unknown else "")
                 + f"; would append to {results_path}")
    return lines
