"""A cell whose process crashed (a fatal signal: heap corruption inside a framework) runs again,
up to its `retries`, and its row keeps every crash (common.running.runner)."""
import json

import pytest

from xbench.common.grids.cell import Cell
from xbench.common.results.schema import row_problem
from xbench.common.running import runner
from xbench.common.running.local import LocalLauncher
from xbench.common.running.processes import Ended


@pytest.mark.parametrize("code, crash", [(-11, True), (-6, True), (134, True), (139, True),
                                         (135, True), (1, False), (2, False), (-9, False),
                                         (137, False), (-15, False), (143, False), (0, False)])
def test_a_crash_is_a_fatal_signal_however_the_launcher_passes_it_on(code, crash):
    assert runner.crashed(code) is crash


def test_a_crash_names_its_signal_whatever_the_other_ranks_wrote(tmp_path):
    """The rank left behind fails too (UNAVAILABLE: its peer stopped sending heartbeats); the
    crash, not that, is why the cell failed."""
    (tmp_path / "error-1.json").write_text(json.dumps({"status": "failed",
                                                       "error": "UnavailableError: peer gone"}))
    log = tmp_path / "cell.log"
    log.write_text("munmap_chunk(): invalid pointer\n")
    ended = runner.outcome(tmp_path, Ended(134), log)
    assert ended["crashed"] and ended["status"] == "failed"
    assert ended["error"].startswith("crashed: exit code 134 (a process killed by signal 6, Abort")
    assert "munmap_chunk(): invalid pointer" in ended["error"]
    assert not runner.outcome(tmp_path, Ended(1), log).get("crashed")


def hand_cell(retries):
    return Cell(grid="hand", backend="pt-single", model="small", multiple=1, batch=128,
                devices=1, epochs=2, batch_mode="global", seed=0, max_train_samples=512,
                data="mnist", device="cpu", timeout=60, repeat=0, retries=retries)


@pytest.mark.parametrize("retries, launches", [(0, 1), (1, 2), (2, 3), (5, 3)])
def test_a_crashed_cell_runs_again_up_to_its_retries(monkeypatch, tmp_path, retries, launches):
    """Two crashes, then a plain failure: each attempt has its own log, the row the last
    attempt's error and log, and every crash before it."""
    outcomes = iter([{"status": "failed", "crashed": True, "error": "crashed: first"},
                     {"status": "failed", "crashed": True, "error": "crashed: second"},
                     {"status": "failed", "error": "a plain failure"}])
    logs = []

    def fake_launch(backend, cell, model, log_path, launcher, watch, load):
        logs.append(log_path.name)
        return next(outcomes)
    monkeypatch.setattr(runner, "launch", fake_launch)
    row = runner.run_cell(hand_cell(retries), "run", tmp_path / "007.log", LocalLauncher())
    assert logs == ["007.log", "007-2.log", "007-3.log"][:launches]
    assert row["crashes"] == ["crashed: first", "crashed: second"][:launches - 1]
    assert row["error"] == ["crashed: first", "crashed: second", "a plain failure"][launches - 1]
    assert row["log"] == str(tmp_path / logs[-1])
    assert row_problem(row) is None
