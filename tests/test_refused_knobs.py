"""Knobs that cannot act on a cell are never recorded as applied (issue 63, item 5). A capped
link (`--inject link=RATE`) slows the loopback between a cell's processes: a cell of one process
(a single-device reference, DataParallel, MirroredStrategy, jax.jit over local devices, Keras on
JAX, any backend on 1 device) crosses none, and is `unsupported` with the reason in the dry run
and in its row. `--omp-wait` sets how OpenMP's threads wait: TensorFlow's and JAX's threads are
not OpenMP's, so their cells are one configuration whatever it says (one cell, one key, one row
that says the policy had nothing to act on). No cell here trains."""
import pytest

from tests.helpers import write_grid, xbench_here
from xbench.common.backends.frameworks import FRAMEWORKS, TORCH
from xbench.common.backends.start import Start
from xbench.common.backends.traits import TRAITS
from xbench.common.grids.cell import Cell
from xbench.common.grids.grid import EXPERIMENTS, expand, read_grid_file
from xbench.common.results.store import read_rows
from xbench.common.running.busy_machine import Load, omp_environment, omp_wait
from xbench.common.running.timings import reference_cell
from xbench.common.workload import faults
from xbench.common.workload.resolve import resolve_model

LINK = "link=400mbit"
BUSY = Load(share=0.5, cores=2, busiest=(("python3", 4242, 0.99),))
# What the audit found a capped link on, and the references: one process each.
ONE_PROCESS = ["jax-dp", "keras-jax", "tf-mirrored", "pt-dp", "pt-single", "tf-single",
               "jax-single"]


def capped(backend: str, devices: int) -> Cell:
    return Cell(grid="refused", backend=backend, model="small", multiple=1, batch=128,
                devices=devices, inject=LINK)


def device_counts(backend: str) -> list[int]:
    """The device counts a grid makes cells of for `backend`."""
    return [1, 2] if TRAITS[backend].spans_devices else [1]


def test_a_capped_link_is_refused_where_no_gradient_crosses_between_processes():
    """Allowed exactly on 2 devices of a backend whose ranks talk through a collective library
    between processes (its traits' `library`); refused, saying why, everywhere else."""
    small = resolve_model("small")
    refused = {}
    for backend in TRAITS:
        for devices in device_counts(backend):
            why = Start.of(backend).cannot_launch(capped(backend, devices), small)
            if devices == 2 and TRAITS[backend].library:
                assert why is None, backend
            else:
                assert why is not None and why.startswith(f"inject {LINK}: {backend}"), why
                refused[(backend, devices)] = why
    for backend in ONE_PROCESS:
        assert "never over the loopback" in refused.get((backend, 2), "never over the loopback")
        assert "the loopback the link caps carries none" in refused[(backend, 1)]


def test_the_dry_run_says_a_capped_link_on_one_process_is_unsupported(mnist_dir, tmp_path):
    grid = write_grid(tmp_path, backends=["jax-dp", "keras-jax", "tf-mirrored"], devices=[2],
                      inject=[LINK])
    run = xbench_here("grid", grid, "--data-dir", mnist_dir, "--results",
                      tmp_path / "r.jsonl", "--dry-run")
    assert run.returncode == 0, run.stderr
    assert "3 cells: 0 done already, 3 unsupported here, 0 to run" in run.stdout, run.stdout
    for backend in ("jax-dp", "keras-jax", "tf-mirrored"):
        line = next(line for line in run.stdout.splitlines() if f"[{backend}|" in line)
        assert (f"unsupported: inject {LINK}: {backend}'s 2 replicas share one process: its "
                f"gradients cross between them in memory") in line


@pytest.mark.processes("the row records the repository's git commit (git rev-parse)")
def test_a_capped_link_on_one_process_is_an_unsupported_row_with_the_reason(mnist_dir,
                                                                             tmp_path):
    """Through the grid in this process, as the audit's jax-dp cell ran: its row is refused
    before any process starts, and so is pt-ddp's 1-device cell."""
    grid = write_grid(tmp_path, backends=["jax-dp", "pt-ddp"], devices=[1, 2], inject=[LINK])
    run = xbench_here("grid", grid, "--backend", "jax-dp", "--data-dir", mnist_dir,
                      "--results", tmp_path / "r.jsonl")
    assert run.returncode == 0, run.stderr
    one = xbench_here("grid", grid, "--backend", "pt-ddp", "--devices", "1", "--data-dir",
                      mnist_dir, "--results", tmp_path / "r.jsonl")
    assert one.returncode == 0, one.stderr
    rows = {(r["backend"], r["devices"]): r for r in read_rows(tmp_path / "r.jsonl")[0]}
    assert set(rows) == {("jax-dp", 1), ("jax-dp", 2), ("pt-ddp", 1)}
    small = resolve_model("small")
    for (backend, devices), row in rows.items():
        assert row["status"] == "unsupported" and row["epochs"] == [], row
        assert row["error"] == Start.of(backend).cannot_launch(capped(backend, devices), small)


def test_every_preset_caps_a_link_only_where_gradients_cross_it():
    """A preset's capped cells (the knobs preset's accumulation part, the phantoms' capped
    all-reduces) all run: none is refused for a link it could not take."""
    capped_cells = [cell for path in sorted(EXPERIMENTS.glob("*.toml"))
                    if "link=" in path.read_text()
                    for cell in expand(read_grid_file(path))
                    if faults.parse(cell.inject).link]
    assert {cell.grid for cell in capped_cells} == {"knobs", "phantoms"}
    for cell in capped_cells:
        assert Start.of(cell.backend).cannot_launch(cell, resolve_model(cell.model)) is None, \
            cell.key


def test_omp_wait_on_a_framework_without_openmp_threads_is_one_cell(tmp_path):
    """`--omp-wait runtime,passive` makes two PyTorch cells and one of each other framework's
    reference, with the setting's default (its key has no omp part); the dry run lists the
    grid's cells, so it lists the same."""
    grid = write_grid(tmp_path, backends=["pt-single", "tf-single", "jax-single"],
                      omp_wait=["runtime", "passive"])
    cells = expand(read_grid_file(grid))
    made = {(c.backend, c.omp_wait): c.key for c in cells}
    assert set(made) == {("pt-single", "runtime"), ("pt-single", "passive"),
                         ("tf-single", "auto"), ("jax-single", "auto")}
    assert made[("pt-single", "passive")].endswith("|omp-passive")
    assert "|omp-" not in made[("tf-single", "auto")] + made[("jax-single", "auto")]
    assert not TORCH.no_omp_wait
    assert all(f.no_omp_wait for f in FRAMEWORKS if f is not TORCH)


def test_a_cell_without_openmp_threads_records_that_the_policy_did_nothing():
    """What the runner gives such a cell's processes (common.running.runner.launch): policy
    none, why, and the environment as it was, whatever the grid asked and the look saw; and
    the dry run's short reference cell of it keeps the default too, and no capped link."""
    tensorflow = TRAITS["tf-single"].framework
    for asked in ("auto", "passive", "active"):
        chosen = omp_wait(asked, BUSY, tensorflow.no_omp_wait)
        assert chosen == {"policy": "none",
                          "by": f"--omp-wait has nothing to act on: {tensorflow.no_omp_wait}"}
        assert omp_environment({"OMP_WAIT_POLICY": "ACTIVE", "A": "1"}, chosen) == {
            "OMP_WAIT_POLICY": "ACTIVE", "A": "1"}
    multiworker = reference_cell(capped("tf-multiworker", 2))
    assert (multiworker.backend, multiworker.omp_wait, multiworker.inject) == (
        "tf-single", "auto", "none")
    ddp = reference_cell(Cell(grid="refused", backend="pt-ddp", model="small", multiple=1,
                              batch=128, devices=2, inject=f"input-delay=20+{LINK}"))
    assert (ddp.backend, ddp.omp_wait, ddp.inject) == ("pt-single", "passive", "input-delay=20")
