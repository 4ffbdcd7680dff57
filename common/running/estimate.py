"""What `xbench grid --dry-run` says in seconds, training nothing: for every cell, whether it is
done already (resume), whether it cannot run here and why, and otherwise about how long it should
take here, with where that forecast comes from. The grid run forecasts the same way before its
first cell, measuring nothing (rows and what is kept only), and its live ETA starts from those
forecasts (common.running.progress.GridProgress).

A forecast comes, in this order, from earlier ok rows of this machine (those in the results
file's folder): the same cell's seconds; else the same model and backend on as many devices,
their seconds per sample scaled to this cell's samples and epochs, plus their start-up and
finish. Else from a short cell measured here and kept (common.running.timings): the cell's own
probe (its model, data, batch, test set and knobs) where `--probe` ran one, else its framework's
reference (the small CNN, the same short cell whatever the grid), measured once per host and
framework version (a compiled one for a cell that compiles: its first epoch holds the
compiling). From either: its start-up (once per process, the processes sharing the cores,
once more for a launcher: torchrun, horovodrun), its seconds per sample scaled to the cell's
FLOPs (a reference's: FLOPS_EXPONENT), samples, epochs and share of the cores, its first epoch's
extra (tracing, compilation), its finish (the processes' end, and the test evaluation: a
reference's test sample's seconds, measured, scaled as a training sample's and to the cell's test
set), and a capped link's time to carry the cell's gradients; start-up and finish
from earlier rows of the same backend on as many devices (another model) where there are. What a
wrapper adds to its framework's reference (collectives, more processes' own overhead) and what
accumulating costs are known only from their rows.
"""
from __future__ import annotations

import math
import socket
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xbench.common.backends.start import Start
from xbench.common.backends.traits import TRAITS, references
from xbench.common.grids.cell import Cell, threads_per_device
from xbench.common.machine import cpu_cores
from xbench.common.results.store import read_rows, results_files
from xbench.common.running.launch import Launcher, refused
from xbench.common.running.progress import duration
from xbench.common.running.timings import (
    COMPILED_PROBE_SECONDS,
    PROBE_CELL_STEPS,
    PROBES_SECONDS,
    REFERENCE_MODEL,
    REFERENCE_TEST_SAMPLES,
    cell_costs,
    framework_reference,
    reference_cell,
    timings_path,
)
from xbench.common.workload import faults
from xbench.common.workload.data import test_samples, train_samples
from xbench.common.workload.resolve import resolve_model

if TYPE_CHECKING:
    from xbench.common.workload.model import Model

# What the forecasts may measure now: nothing (the grid run), each framework's reference (the
# dry run), each cell's own probe (the dry run with --probe).
KEPT, REFERENCES, CELLS = "kept", "references", "cells"
ELSEWHERE = "elsewhere"  # what none of them is of: a cell a cluster's nodes run
SPENT = "spent"  # a reference whose turn came after the dry run's time for them
# A sample's seconds grow slower than its FLOPs: a larger model's convolutions and products run
# nearer the machine's peak. Measured here (2 CPU cores, epoch 2, one process): the large CNN
# (190x the small one's FLOPs) took 53x (PyTorch) and 93x (TensorFlow) the small one's seconds a
# sample, gpt-tiny (88x) 25x and 39x; an exponent of 0.75 puts each within 2x.
FLOPS_EXPONENT = 0.75


@dataclass
class Estimate:
    status: str            # "done", "unsupported", "to run"
    seconds: float | None  # for cells to run
    source: str            # why that status, or where the seconds come from
    measured: bool = False  # whether what it rests on was measured by this dry run


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


def device_share(cell: Cell, cores: int) -> float:
    """The share of the `cores` the cell's devices have: the probe had every core; a cell whose
    devices have fewer threads in all (a compute reference at the N-device ranks' threads)
    trains that much slower."""
    return min(1.0, threads_per_device(cell, cores) * cell.devices / cores)


def test_set(cell: Cell, model: Model) -> int:
    return min(test_samples(cell.data, model), cell.max_test_samples or math.inf)


def link_seconds(cell: Cell, model: Model) -> float:
    """What a capped link (`inject link=RATE`) adds to the cell: its gradients' bytes through
    a ring's passes, once a step or once a micro-batch (accumulate_sync each), at the rate, from
    every rank: the cell's ranks share the one capped loopback (the row's traffic, all links
    together, over the rate: the phantom of tests/test_phantoms.py holds it to the exposed
    time). The knobs preset's capped cells ran 1.3-1.9x what one rank's bytes forecast."""
    rate = faults.parse(cell.inject).link_bytes_per_second
    traits = Start.of(cell.backend).traits
    kind = "cuda" if cell.device == "cuda" or (cell.device == "auto" and gpus_here()) else "cpu"
    protocol = traits.protocol[kind]
    if not rate or not protocol.crosses or cell.world < 2:
        return 0.0
    crossings = cell.accumulate if cell.accumulate_sync == "each" else 1
    step = (crossings * protocol.ring_passes(cell.reshard) * (cell.world - 1)
            * model.gradient_bytes(traits.framework.name) / rate)
    return step * (samples_per_epoch(cell, model) // cell.global_batch) * cell.epochs


@dataclass(frozen=True)
class Basis:
    """A short cell's costs (common.timings.COSTS) and how they reach a cell: `words` (where
    they come from), `work` (a sample's seconds here over the short cell's), `tested` (the
    test samples it evaluated, its finish without them; None: its finish evaluated the cell's
    own test set)."""
    costs: dict
    words: str
    measured: bool
    work: float = 1.0
    tested: int | None = None


def reference_of(cell: Cell) -> tuple[str, str, str]:
    """Which reference a cell's forecast scales: its framework's, on its device, compiled where
    the cell compiles (its first epoch holds the compiling)."""
    return TRAITS[cell.backend].framework.name, cell.device, cell.compile


def reference_title(cell: Cell) -> str:
    compiled = "compiled " if cell.compile == "on" else ""
    return f"{TRAITS[cell.backend].framework.title}'s {compiled}reference"


def reference_basis(cell: Cell, model: Model, costs: dict, ran: bool) -> Basis:
    """A framework's reference scaled to the cell's model: a sample's seconds by its training
    FLOPs over the reference model's, to FLOPS_EXPONENT."""
    framework = TRAITS[cell.backend].framework
    flops = max(1, model.flops_per_sample(framework.name))
    reference = resolve_model(REFERENCE_MODEL).flops_per_sample(framework.name)
    work = (flops / reference) ** FLOPS_EXPONENT
    return Basis(costs, f"from {reference_title(cell)} here "
                        f"({references()[framework.name]}, {REFERENCE_MODEL}, "
                        f"{'measured now' if ran else 'kept'}) scaled to this cell's FLOPs "
                        f"(x{work:.3g}) and samples", ran, work, REFERENCE_TEST_SAMPLES)


def composed(cell: Cell, model: Model, rows: list[dict], basis: Basis, cores: int) -> Estimate:
    """Start-up, training and finish from `basis` (the module's docstring), on this machine's
    `cores`."""
    costs, backend = basis.costs, Start.of(cell.backend)
    per_sample = costs["per_sample"] * basis.work
    finish = costs["finish"] if basis.tested is None else (
        max(0.0, costs["finish"] - costs["per_test_sample"] * basis.tested)
        + costs["per_test_sample"] * basis.work * test_set(cell, model))
    link = link_seconds(cell, model)
    training = (samples_per_epoch(cell, model) * cell.epochs * per_sample
                / device_share(cell, cores) + costs["first_epoch_extra"] + link)
    crossing = f", its {faults.parse(cell.inject).link} link {link:.0f} s" if link else ""
    like = [r for r in rows if (r["backend"], r["world_size"]) == (cell.backend, cell.world)]
    if like:
        return Estimate("to run", statistics.mean(map(outside_epochs, like)) + training,
                        f"start-up and finish of {len(like)} earlier row(s) of {cell.backend} "
                        f"on {cell.world} device(s), training {basis.words}{crossing}",
                        basis.measured)
    processes = backend.processes(cell)
    starter = 1 if backend.scope.tool else 0
    starting = costs["start"] * (starter + max(1.0, processes / cores))
    return Estimate("to run", starting + training + finish,
                    f"{basis.words}: start-up {starting:.0f} s ({processes} process(es)"
                    f"{' and a launcher' if starter else ''}), training{crossing}, finish "
                    f"{finish:.0f} s", basis.measured)


def measure_references(wanted: list[tuple[str, str, str]], launcher: Launcher, measure: bool
                       ) -> tuple[dict[tuple[str, str, str], tuple[dict | None, bool]], set]:
    """Each (framework, device, compile)'s reference as kept, or (where `measure`) measured
    now, one at a time: the others first, all within PROBES_SECONDS, then each compiled one
    within COMPILED_PROBE_SECONDS; and those whose turn came after their time was spent (not
    measured: the next dry run measures them)."""
    found, spent, ends = {}, set(), time.monotonic() + PROBES_SECONDS
    for which in sorted(wanted, key=compiled):  # stable: the most wanted first
        if compiled(which):
            ends = time.monotonic() + COMPILED_PROBE_SECONDS
        left = ends - time.monotonic() if measure else None
        found[which] = framework_reference(*which, launcher, left)
        if measure and left <= 0 and found[which][0] is None:
            spent.add(which)
    return found, spent


def compiled(reference: tuple[str, str, str]) -> bool:
    return reference[2] == "on"


def probe_seconds(cell: Cell) -> int:
    """What the dry run gives the reference of `cell` (measure_references)."""
    return COMPILED_PROBE_SECONDS if compiled(reference_of(cell)) else PROBES_SECONDS


def own_probe(cell: Cell, model: Model, rows: list[dict], launcher: Launcher,
              measure: bool, cores: int) -> Estimate:
    """The cell composed from its own probe, kept or (where `measure`) run now; else no
    forecast, and why."""
    costs, ran = cell_costs(cell, model, launcher, measure)
    if costs is None:
        return unknown(cell, ELSEWHERE if launcher.name != "local" else CELLS if measure else KEPT)
    probe = (f"a {PROBE_CELL_STEPS}-step {reference_cell(cell).backend} cell "
             f"{'now' if ran else 'kept'}")
    return composed(cell, model, rows, Basis(costs, f"as {probe} ran", ran), cores)


def unknown(cell: Cell, measured: str) -> Estimate:
    """No forecast, and why: nothing kept (`measured` KEPT), what was measured (REFERENCES,
    CELLS) did not run ok in its time, the time was SPENT before its turn, or the cell runs
    ELSEWHERE."""
    title = reference_title(cell)
    why = {KEPT: f"{title} is not kept here (`xbench grid --dry-run` measures it)",
           REFERENCES: f"{title} did not run ok here within the "
                       f"{probe_seconds(cell)} s the dry run gives it",
           SPENT: f"{title} was not measured: the {PROBES_SECONDS} s the dry run "
                  f"gives its references went to the others (the next dry run measures it)",
           CELLS: f"no {PROBE_CELL_STEPS}-step {reference_cell(cell).backend} cell of it ran "
                  f"ok here",
           ELSEWHERE: "its launcher runs it elsewhere (this machine's timings say nothing of "
                      "those nodes)"}[measured]
    return Estimate("to run", None, f"no earlier rows, and {why}")


def estimate(cells: list[Cell], results_path: Path, resume: bool, launcher: Launcher,
             measure: str = KEPT) -> list[Estimate]:
    """Every cell's status and forecast; `measure`: what may be measured now, KEPT (nothing:
    the grid run, before its first cell), REFERENCES (the dry run) or CELLS (`--probe`: each
    cell's own probe, the references where it does not run)."""
    rows = history(results_path)
    done = ({(r["cell_key"], r["repeat"]) for r in read_rows(results_path)[0]
             if r["status"] == "ok"} if resume and results_path.is_file() else set())
    gpus, cores, found, waiting = gpus_here(), cpu_cores(), [], {}
    for number, cell in enumerate(cells):
        model = resolve_model(cell.model)  # once for the cell: each question below is given it
        reason = unsupported_here(Start.of(cell.backend), cell, model, gpus, launcher)
        if (cell.key, cell.repeat) in done:
            found.append(Estimate("done", None, f"an ok row in {results_path.name}"))
        elif reason:
            found.append(Estimate("unsupported", None, reason))
        else:
            found.append(from_rows(cell, model, rows)
                         or own_probe(cell, model, rows, launcher, measure == CELLS, cores))
            if found[-1].seconds is None:
                waiting[number] = model
    wanted = Counter(reference_of(cells[n]) for n in waiting)
    kept, spent = measure_references([w for w, _ in wanted.most_common()], launcher,
                                     measure != KEPT)
    why = (ELSEWHERE if launcher.name != "local" else KEPT if measure == KEPT else REFERENCES)
    for number, model in waiting.items():
        cell = cells[number]
        which = reference_of(cell)
        costs, ran = kept[which]
        found[number] = (composed(cell, model, rows, reference_basis(cell, model, costs, ran),
                                  cores) if costs else unknown(cell, SPENT if which in spent
                                                               else why))
    return found


def forecasts(cells: list[Cell], results_path: Path, resume: bool,
              launcher: Launcher) -> list[float | None]:
    """What the grid run's ETA starts from, before its first cell: each cell's forecast as the
    dry run makes it, from rows and what is kept only (measuring would take the machine from
    the grid); 0 for a cell that will not train here, None where nothing is known."""
    return [found.seconds if found.status == "to run" else 0.0
            for found in estimate(cells, results_path, resume, launcher)]


def dry_run_plan(cells: list[Cell], results_path: Path, resume: bool, launcher: Launcher,
                 probe: bool = False) -> list[str]:
    """`xbench grid --dry-run`'s lines: every cell with what would happen to it here (`launcher`
    runs it), then the total time it should take. It measures only what is not kept: each
    framework's reference, or with `probe` each cell's own probe."""
    started = time.monotonic()
    estimates = estimate(cells, results_path, resume, launcher, CELLS if probe else REFERENCES)
    lines = []
    for number, (cell, found) in enumerate(zip(cells, estimates), 1):
        what = (f"about {duration(found.seconds)} ({found.source})" if found.seconds is not None
                else f"no forecast: {found.source}" if found.status == "to run"
                else f"{found.status}: {found.source}")
        lines.append(f"[{number}/{len(cells)}] {cell.label}  [{cell.key}]  {what}")
    by = {status: [e for e in estimates if e.status == status]
          for status in ("done", "unsupported", "to run")}
    known = [e.seconds for e in by["to run"] if e.seconds is not None]
    total = f"about {duration(sum(known))} here" if known else "no estimate here"
    unknown_ones = len(by["to run"]) - len(known)
    measured = [e for e in by["to run"] if e.measured]
    lines.append(f"{len(cells)} cells: {len(by['done'])} done already, {len(by['unsupported'])} "
                 f"unsupported here, {len(by['to run'])} to run: {total}"
                 + (f" (and {unknown_ones} without an estimate)" if unknown_ones else "")
                 + f"; would append to {results_path}")
    if measured:
        lines.append(f"{len(measured)} forecast(s) rest on short cells measured now (this dry "
                     f"run took {duration(time.monotonic() - started)}), kept in "
                     f"{timings_path()} for the next dry run and the grid run")
    return lines
