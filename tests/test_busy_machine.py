"""A busy machine handled: a grid started beside a busy loop says so before its first cell (what
runs, and the choices), PyTorch's OpenMP threads wait passively there unless asked otherwise and
every row records how they waited; a report or predict that leaves contended runs out ends with
the exact command that keeps them, and its empty sections say that is why. Real pt-single cells
on real MNIST beside a real busy loop."""
import dataclasses
import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.helpers import write_grid, xbench
from xbench.cli.grid import warn_if_busy
from xbench.common.grids.cell import Cell
from xbench.common.results.store import read_rows
from xbench.common.running.busy_machine import (
    AUTO_PASSIVE_ABOVE,
    WAITING,
    Load,
    look_at_load,
    omp_environment,
    omp_wait,
)

BUSY_LOOP = [sys.executable, "-c", "while True: pass"]
BUSY = Load(share=0.5, cores=2, busiest=(("python3", 4242, 0.99),))
QUIET = Load(share=0.02, cores=2, busiest=())


@pytest.fixture(scope="module")
def beside_a_busy_loop(mnist_dir, tmp_path_factory):
    """One grid beside one busy loop of equal priority, its OpenMP variables unset: pt-single
    with the wait policy auto (xbench's choice) and active (asked). (results, the grid's
    stderr, the loop's PID)."""
    folder = tmp_path_factory.mktemp("busy")
    results = folder / "r.jsonl"
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    loop = subprocess.Popen(BUSY_LOOP)
    try:
        run = xbench("grid", write_grid(folder, backends=["pt-single"], max_test_samples=1000),
                     "--omp-wait", "auto,active", "--data-dir", mnist_dir, "--results", results,
                     env=environment)
    finally:
        loop.kill()
        loop.wait()
    assert run.returncode == 0, run.stderr
    return results, run.stderr, loop.pid


def test_the_grid_warns_before_its_first_cell_naming_what_runs_and_the_choices(
        beside_a_busy_loop):
    _, stderr, loop = beside_a_busy_loop
    warning = next(line for line in stderr.splitlines() if line.startswith("warning: this "
                                                                          "machine is busy"))
    assert f"(PID {loop}, " in warning and "above the cells' contention limit of 10%" in warning
    assert all(choice in warning for choice in ("wait until it is quiet", "--pin-ranks",
                                                "--contention-limit "))


def test_pytorch_waits_passively_beside_the_loop_and_each_row_says_how_and_why(
        beside_a_busy_loop):
    results, _, loop = beside_a_busy_loop
    rows = {row["omp_wait"]: row for row in read_rows(results)[0]}
    chosen, asked = rows["auto"]["threads"]["omp_wait"], rows["active"]["threads"]["omp_wait"]
    assert chosen["policy"] == "passive" and f"(PID {loop}, " in chosen["by"]
    assert chosen["environment"] == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}
    assert asked == {"policy": "active", "by": "asked (--omp-wait)",
                     "environment": {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None}}
    assert rows["auto"]["cell_key"] + "|omp-active" == rows["active"]["cell_key"]
    assert all(row["status"] == "ok" and row["contended"] for row in rows.values())


@pytest.mark.parametrize("command", [["report", "--format", "md"], ["predict"]])
def test_what_leaves_the_contended_runs_out_ends_with_the_command_that_keeps_them(
        beside_a_busy_loop, command, tmp_path):
    results = beside_a_busy_loop[0]
    out = ["--out", tmp_path / "out"] if command[0] == "report" else []
    left = xbench(*command, results, *out)
    assert left.returncode == 0, left.stderr
    last = left.stderr.strip().splitlines()[-1]
    assert last.startswith("2 run(s) marked contended") and last.endswith(
        f"to use them: xbench {' '.join(map(str, [*command, results, *out]))} "
        f"--include-contended")
    if command[0] == "report":  # every empty table says why, not its own guess
        summary = (tmp_path / "out" / "summary.md").read_text()
        assert "all 2 run(s) that ended ok were marked contended" in summary
        assert "before schema 5" not in summary
    kept = xbench(*command, results, *out, "--include-contended")
    assert kept.returncode == 0 and "marked contended" not in kept.stderr, kept.stderr


def test_auto_follows_the_environment_then_the_look_and_a_choice_sets_the_variables(
        monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert omp_wait("auto", BUSY)["policy"] == "passive"
    assert omp_wait("auto", QUIET)["policy"] == "runtime"
    assert omp_wait("auto", None)["by"] == "auto: no look at the machine's load"
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    given = omp_wait("auto", BUSY)
    assert given["policy"] == "environment" and given["GOMP_SPINCOUNT"] == "10000"
    assert omp_environment({"GOMP_SPINCOUNT": "10000", "A": "1"}, given) == {
        "GOMP_SPINCOUNT": "10000", "A": "1"}
    assert omp_environment({"GOMP_SPINCOUNT": "10000", "A": "1"},
                           omp_wait("runtime", BUSY)) == {"A": "1"}
    assert omp_environment({"OMP_WAIT_POLICY": "ACTIVE"}, omp_wait("passive", QUIET)) == {
        "OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize("share, policy", [(0.0, "runtime"), (0.02, "runtime"),
                                           (AUTO_PASSIVE_ABOVE, "runtime"),
                                           (AUTO_PASSIVE_ABOVE + 0.01, "passive"),
                                           (0.5, "passive"), (1.0, "passive")])
def test_auto_decides_against_its_own_threshold(share, policy, monkeypatch):
    """Passive above AUTO_PASSIVE_ABOVE of the cores taken by others, the runtime's own at or
    below it, and the row's reason says which side of it the look fell and what it saw; no
    contention limit enters the choice, so none can make a busy machine's threads spin."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    look = Load(share=share, cores=2, busiest=())
    chosen = omp_wait("auto", look)
    assert chosen["policy"] == policy
    assert chosen["by"] == (f"auto: when the grid started, {look.words()}: "
                            f"{'above' if policy == 'passive' else 'not above'} --omp-wait "
                            f"auto's threshold of 10% of the cores, whatever the contention "
                            f"limit")
    assert "quiet" not in chosen["by"]


@pytest.mark.parametrize("share, limit", [(0.5, 0.10), (0.07, 0.05), (0.5, 0.45)])
def test_the_busy_warning_says_what_the_rows_of_auto_record(share, limit, monkeypatch,
                                                           capsys):
    """The warning fires above the cells' contention limit; what it says PyTorch's threads of
    --omp-wait auto will do is the choice their rows record (the same look, the same
    function), and so is the choice after its own advice, a higher --contention-limit. A grid of
    TensorFlow only has no OpenMP threads to speak of."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    look = Load(share=share, cores=2, busiest=(("python3", 4242, 2 * share),))
    cells = [Cell(grid="busy", backend=backend, model="small", multiple=1, batch=128, devices=1,
                  contention_limit=limit) for backend in ("pt-single", "tf-single")]
    warn_if_busy(look, cells)
    warning = " ".join(capsys.readouterr().err.split())
    chosen = omp_wait("auto", look)
    assert chosen["policy"] == ("passive" if share > AUTO_PASSIVE_ABOVE else "runtime")
    advice = float(warning.split("--contention-limit ")[1].split()[0])
    advised = [dataclasses.replace(cell, contention_limit=advice) for cell in cells]
    warn_if_busy(look, advised)  # following the advice: no warning, the rows' choice as it was
    assert capsys.readouterr().err == ""
    assert (f"The OpenMP threads of PyTorch's CPU cells (--omp-wait auto) "
            f"{WAITING[chosen['policy']]}: the load is "
            f"{'above' if chosen['policy'] == 'passive' else 'not above'} --omp-wait auto's "
            f"threshold of 10%") in warning
    warn_if_busy(look, cells[1:])
    assert "OpenMP" not in capsys.readouterr().err


def test_the_look_does_not_count_its_own_processes():
    """A busy child of the looking process is its own work (a grid's cell), not another
    load: it is neither named nor counted (what else runs here is, so only the child's absence
    is asserted)."""
    child = subprocess.Popen(BUSY_LOOP)
    try:
        psutil.Process(child.pid).cpu_times()  # started
        seen = look_at_load(0.5)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.pid not in [pid for _, pid, _ in seen.busiest]
    assert 0.0 <= seen.share <= 1.0 and seen.cores == psutil.cpu_count()
