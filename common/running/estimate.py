"""What `xbench grid --dry-run` says before anything runs: for every cell, whether it is done
already (resume), whether it cannot run here and why, and otherwise about how long it should take
here, with where that estimate comes from.

An estimate comes, in this order, from earlier ok rows of this machine (the same cell; else the
same model and backend on as many devices; else the same model): their seconds per sample, scaled
to this cell's samples and epochs, plus their start-up and evaluation; else from a short measured
training throughput of the model on this machine (pt_backend.throughput, a few seconds per model).
"""
from __future__ import annotations

import math
import socket
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from xbench.common.backends.start import Start
from xbench.common.children import ask
from xbench.common.grids.cell import Cell, threads_per_device
from xbench.common.machine import cpu_cores
from xbench.common.results.store import read_rows, results_files
from xbench.common.running.launch import Launcher, refused
from xbench.common.running.progress import duration
from xbench.common.shapes import NUMBER, is_kind
from xbench.common.workload.data import train_samples
from xbench.common.workload.resolve import resolve_model

PROBE_BATCH, PROBE_STEPS = 128, 20
PROBE_SECONDS = 600  # the probe's own limit: a few seconds here, far more on a busy machine
PROBE_OVERHEAD_SECONDS = 15  # launch, imports, data, test accuracy: what a probe does not see


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


def from_rows(cell: Cell, rows: list[dict]) -> Estimate | None:
    same_cell = [r["cell_seconds"] for r in rows if r["cell_key"] == cell.key]
    if same_cell:
        return Estimate("to run", statistics.mean(same_cell),
                        f"{len(same_cell)} earlier run(s) of this cell")
    for what, match in (
            ("the same model and backend on as many devices",
             lambda r: (r["model"], r["backend"], r["world_size"]) == (cell.model, cell.backend,
                                                                       cell.world)),
            ("the same model", lambda r: r["model"] == cell.model)):
        like = [r for r in rows if match(r)]
        if like:
            per_sample = statistics.mean(r["epochs"][-1]["seconds"] / r["epochs"][-1]["samples"]
                                         for r in like)
            overhead = statistics.mean(r["cell_seconds"] - sum(e["seconds"] for e in r["epochs"])
                                       for r in like)
            return Estimate("to run", overhead + per_sample * samples_per_epoch(cell) * cell.epochs,
                            f"{len(like)} earlier row(s) of {what}")
    return None


def probe(model: str) -> float | None:
    """Samples per second of `model` on this machine's CPU (None without PyTorch, or where the
    probe gave no rate: a model file's pytorch() that fails there, say). The probe is a process
    of its own, ended whole, a model file's processes too, however it ends."""
    ended = ask([sys.executable, "-m", "xbench.pt_backend.throughput", model, str(PROBE_BATCH),
                 str(PROBE_STEPS)], PROBE_SECONDS)
    rate = ended.answer.get("samples_per_second") if isinstance(ended.answer, dict) else None
    return rate if ended.returncode == 0 and is_kind(rate, NUMBER) and rate > 0 else None


def estimate(cells: list[Cell], results_path: Path, resume: bool,
             launcher: Launcher) -> list[Estimate]:
    rows = history(results_path)
    done = ({(r["cell_key"], r["repeat"]) for r in read_rows(results_path)[0]
             if r["status"] == "ok"} if resume and results_path.is_file() else set())
    gpus, probes, estimates = gpus_here(), {}, []
    for cell in cells:
        reason = unsupported_here(Start.of(cell.backend), cell, gpus, launcher)
        if (cell.key, cell.repeat) in done:
            estimates.append(Estimate("done", None, f"an ok row in {results_path.name}"))
        elif reason:
            estimates.append(Estimate("unsupported", None, reason))
        else:
            found = from_rows(cell, rows)
            if found is None:
                if cell.model not in probes:
                    probes[cell.model] = probe(cell.model)
                rate = probes[cell.model]
                # the probe had every core; a cell whose devices have fewer threads in all
                # (a compute reference at the N-device ranks' threads) trains that much slower
                share = min(1.0, threads_per_device(cell, cpu_cores()) * cell.devices / cpu_cores())
                found = (Estimate("to run", PROBE_OVERHEAD_SECONDS
                                  + samples_per_epoch(cell) * cell.epochs / (rate * share),
                                  f"a {PROBE_STEPS}-step throughput probe of {cell.model} here "
                                  f"({rate:,.0f} samples/s on one device)")
                         if rate else Estimate("to run", None, "no earlier rows, and no PyTorch "
                                                               "here to probe with"))
            estimates.append(found)
    return estimates


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
