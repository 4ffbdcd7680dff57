"""What `xbench grid --dry-run` says before anything runs: for every cell, whether it is done
already (resume), whether it cannot run here and why, and otherwise about how long it should take
here, with where that forecast comes from. The grid run forecasts the same way before its first
cell, without probing (rows and kept probes only), and its live ETA starts from those forecasts
(common.running.progress.GridProgress).

A forecast comes, in this order, from earlier ok rows of this machine (those in the results
file's folder): the same cell's seconds; else the same model and backend on as many devices,
their seconds per sample scaled to this cell's samples and epochs, plus their start-up and
finish. Else it is put together from two parts, each measured:
- start-up and finish: from earlier rows of the same backend on as many devices (another model):
  their seconds outside the epochs; else this machine's start-up of the backend's rank module
  (common.running.timings), once per process, the processes sharing the cores, once more for a
  launcher (torchrun, horovodrun), plus the test evaluation at the probe's forward rate;
- training: the model's PyTorch throughput probe (kept per model and version), scaled by the
  cores the cell's devices have. A TensorFlow or JAX cell trains at its own rate and traces or
  compiles its step first: its line says that the rate is PyTorch's.
"""
from __future__ import annotations

import math
import socket
import statistics
from dataclasses import dataclass
from pathlib import Path

from xbench.common.backends.start import Start
from xbench.common.backends.traits import HOROVODRUN, TORCHRUN
from xbench.common.grids.cell import Cell, threads_per_device
from xbench.common.machine import cpu_cores
from xbench.common.results.store import read_rows, results_files
from xbench.common.running.launch import Launcher, refused
from xbench.common.running.progress import duration
from xbench.common.running.timings import PROBE_STEPS, model_rates, start_seconds
from xbench.common.workload.data import test_samples, train_samples
from xbench.common.workload.resolve import resolve_model


@dataclass
class Estimate:
    status: str            # "done", "unsupported", "to run"
    seconds: float | None  # for cells to run
    source: str            # why that status, or where the seconds come from


def gpus_here() -> int:
    """NVIDIA GPUs the driver lists on this machine (no framework needed)."""
    folder = Path("/proc/driver/nvidia/gpus")
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def unsupported_here(backend: Start, cell: Cell, gpus: int, launcher: Launcher) -> str | None:
    """Why `cell` would be an unsupported row here (as its backend and launcher would say), or
    None."""
    reason = refused(backend, cell, launcher)
    if reason:
        return reason
    if cell.launcher == "slurm":
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


def samples_per_epoch(cell: Cell) -> int:
    base = min(train_samples(cell.data, resolve_model(cell.model)),
               cell.max_train_samples or math.inf)
    return base * cell.multiple // cell.global_batch * cell.global_batch


def outside_epochs(row: dict) -> float:
    """A row's seconds outside its epochs: launch, imports, data, model, test evaluation, the
    evidence's gathering."""
    return row["cell_seconds"] - sum(e["seconds"] for e in row["epochs"])


def from_rows(cell: Cell, rows: list[dict]) -> Estimate | None:
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
                    + per_sample * samples_per_epoch(cell) * cell.epochs,
                    f"{len(like)} earlier row(s) of the same model and backend on as many "
                    f"devices")


def device_share(cell: Cell) -> float:
    """The share of the cores the cell's devices have: the probe had every core; a cell whose
    devices have fewer threads in all (a compute reference at the N-device ranks' threads)
    trains that much slower."""
    return min(1.0, threads_per_device(cell, cpu_cores()) * cell.devices / cpu_cores())


def composed(cell: Cell, rows: list[dict], measure: bool) -> Estimate:
    """Start-up and finish plus training, each measured (the module's docstring); where
    `measure` is False only what is kept is read, and a part not kept is no forecast."""
    backend = Start.of(cell.backend)
    rates, probed = model_rates(cell.model, measure)
    if rates is None:
        return Estimate("to run", None, "no earlier rows, and " + (
            "no PyTorch here to probe the model with" if measure else
            "no probe of the model kept here (`xbench grid --dry-run` measures one)"))
    share = device_share(cell)
    training = samples_per_epoch(cell) * cell.epochs / (rates["training"] * share)
    rate = (f"{'' if backend.framework == 'torch' else 'PyTorch, '}a {PROBE_STEPS}-step probe"
            f"{' now' if probed else ' kept'}: {rates['training']:,.0f} samples/s")
    like = [r for r in rows if (r["backend"], r["world_size"]) == (cell.backend, cell.world)]
    if like:
        return Estimate("to run", statistics.mean(map(outside_epochs, like)) + training,
                        f"start-up of {len(like)} earlier row(s) of {cell.backend} on "
                        f"{cell.world} device(s), training at {rate}")
    start, timed = start_seconds(backend, measure)
    if start is None:
        return Estimate("to run", None, f"no earlier rows of {cell.backend}, and its start-up "
                        + ("failed to import here" if measure else "not measured here yet"))
    processes = backend.processes(cell)
    launcher = 1 if backend.traits.start in (TORCHRUN, HOROVODRUN) else 0
    starting = start * (launcher + max(1.0, processes / cpu_cores()))
    tests = min(test_samples(cell.data, resolve_model(cell.model)),
                cell.max_test_samples or math.inf)
    evaluation = tests / (rates["forward"] * share)
    return Estimate("to run", starting + training + evaluation,
                    f"start-up {starting:.0f} s ({processes} process(es)"
                    f"{' and a launcher' if launcher else ''}, {start:.1f} s each "
                    f"{'now' if timed else 'kept'}), training at {rate}")


def estimate(cells: list[Cell], results_path: Path, resume: bool, launcher: Launcher,
             measure: bool = True) -> list[Estimate]:
    """Every cell's status and forecast; `measure`: probe what is not kept (the dry run), else
    read only (the grid run, before its first cell)."""
    rows = history(results_path)
    done = ({(r["cell_key"], r["repeat"]) for r in read_rows(results_path)[0]
             if r["status"] == "ok"} if resume and results_path.is_file() else set())
    gpus, estimates = gpus_here(), []
    for cell in cells:
        reason = unsupported_here(Start.of(cell.backend), cell, gpus, launcher)
        if (cell.key, cell.repeat) in done:
            estimates.append(Estimate("done", None, f"an ok row in {results_path.name}"))
        elif reason:
            estimates.append(Estimate("unsupported", None, reason))
        else:
            estimates.append(from_rows(cell, rows) or composed(cell, rows, measure))
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
