"""`xbench probe`: what runs to measure this machine's limits (common.measuring.peaks), each
measurement a short "cell" launched exactly as a grid's cells are (common.running.runner.launch),
so it runs with the
same processes, launcher, threads and collectives as the cells whose numbers it judges.

- matmul: each framework's single-device backend (pt-single, tf-single), once per thread count a
  CPU node's processes can have together (a framework sizes its pools once per process), once on
  a GPU;
- all-reduce: each backend whose gradients are all-reduced, through its own collectives (pt-ddp:
  gloo or nccl; hvd-torch: Horovod, which hvd-tf shares; tf-multiworker: TensorFlow's collective
  ops), at every device count asked for and at the byte size of each model's gradients.
"""
import tempfile
from collections.abc import Callable
from pathlib import Path

from xbench.common.backends.traits import one_per_library, references
from xbench.common.grids.cell import Cell
from xbench.common.results.probes import PROBE_VERSION
from xbench.common.results.schema import now
from xbench.common.running import env
from xbench.common.running.runner import check_devices, measure, stop_on_signals
from xbench.common.workload.models import MODELS

# The matmul through each framework's single-device reference, the all-reduce through one backend
# of each collective library (common.backends.traits).
MATMUL_BACKENDS = tuple(references().values())
ALL_REDUCE_BACKENDS = tuple(one_per_library())
TIMEOUT = 300  # seconds one probe's processes may take


def thread_counts(cores: int) -> list[int]:
    """The compute threads a CPU node's processes of one cell can have together: 1, 2, 4, ... and
    all the cores."""
    counts, threads = [], 1
    while threads < cores:
        counts.append(threads)
        threads *= 2
    return [*counts, cores]


def probe_cell(backend: str, devices: int, nodes: int, threads: int, device: str,
               launcher_name: str) -> Cell:
    """The cell a probe's processes are launched as (its model and data are never loaded)."""
    return Cell(grid="probe", backend=backend, model="small", multiple=1, batch=devices * nodes,
                devices=devices, epochs=2, batch_mode="global", seed=0, max_train_samples=0,
                data="synthetic", device=device, timeout=TIMEOUT, threads=threads, nodes=nodes,
                launcher=launcher_name)


def plan(backends: list[str], devices: list[int], nodes: list[int], device: str,
         cores: int, launcher_name: str) -> list[tuple[Cell, dict]]:
    """(cell, request) of every probe to run: the matmuls first, then the all-reduces."""
    sizes = sorted({model.gradient_bytes() for model in MODELS.values()})
    steps = []
    for name in backends:
        if name in MATMUL_BACKENDS:
            counts = [0] if device == "cuda" else thread_counts(cores)
            steps += [(probe_cell(name, 1, 1, threads, device, "local"), {"matmul": {}})
                      for threads in counts]
        if name in ALL_REDUCE_BACKENDS:
            steps += [(probe_cell(name, count, node_count, 0, device, launcher_name),
                       {"all_reduce": {"sizes": sizes}})
                      for node_count in nodes for count in devices if node_count * count > 1]
    return steps


def run_probe(backends: list[str], devices: list[int], nodes: list[int], device: str,
              launcher, echo: Callable[[str], None] = print) -> dict:
    """Run every probe of `plan` with `launcher` (common.running.launch); the probe record to
    keep."""
    steps = plan(backends, devices, nodes, device, launcher.cores, launcher.name)
    check_devices([cell for cell, _ in steps], launcher.cores)
    record = {"probe_version": PROBE_VERSION, "measured_at": now(), "env": env.capture(),
              "cores": launcher.cores, "matmul": [], "all_reduce": [], "not_measured": []}
    with stop_on_signals(), tempfile.TemporaryDirectory(prefix="xbench-probe-") as logs:
        for number, (cell, request) in enumerate(steps, 1):
            what = describe(cell, request)
            found, why = measure(cell, "probe", request, Path(logs) / f"{number:02d}.log",
                                 launcher)
            if why:
                record["not_measured"].append({"what": what, "why": why})
                echo(f"[{number}/{len(steps)}] {what}: not measured: {why.splitlines()[0]}")
                continue
            if "matmul" in found:
                record["matmul"] += [{**{k: v for k, v in found.items() if k != "matmul"}, **m}
                                     for m in found["matmul"]]
            else:
                record["all_reduce"] += [
                    {**{k: v for k, v in found.items() if k != "all_reduce"},
                     "nodes": cell.nodes, **a} for a in found["all_reduce"]]
            echo(f"[{number}/{len(steps)}] {what}: done")
    return record


def describe(cell: Cell, request: dict) -> str:
    if "matmul" in request:
        threads = f", {cell.threads} thread(s)" if cell.threads else ""
        return f"matmul with {cell.backend}'s framework on {cell.device}{threads}"
    nodes = f" on {cell.nodes} nodes" if cell.nodes > 1 else ""
    return f"all-reduce of {cell.backend}, {cell.world} processes{nodes}"
