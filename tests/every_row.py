"""Every row the suite writes holds its invariants (common.results.invariants): at the end of a
run, the controller (the one process without xdist) reads every results file under the run's
temporary folder and fails the run, naming each row and what it broke, where a row written by
the runner (not one a test made by hand) breaks one. Read as the report reads rows: through
common.results.store, whose upgrade checks the invariants again."""
from __future__ import annotations

from pathlib import Path

import pytest

from xbench.common.errors import UserError
from xbench.common.results.store import read_rows


def written_by_the_runner(row: dict) -> bool:
    """A row a grid's runner wrote (its run started a process and kept a log), not one a test
    made by hand to check what the report does with given numbers."""
    return row["log"] is not None and not row["run_id"].startswith("hand")


def broken_rows(root: Path) -> tuple[int, list[str]]:
    """(rows checked, 'path: cell r<repeat>: broken, ...' of each row that breaks one)."""
    checked, found = 0, []
    for path in sorted(root.rglob("*.jsonl")):
        try:
            rows, _ = read_rows(path)
        except (OSError, ValueError, UserError):
            continue  # not a results file (a trace, a probe): read_rows names its lines
        for row in filter(written_by_the_runner, rows):
            checked += 1
            if row["invariants"]:
                found.append(f"{path.relative_to(root)}: {row['cell_key']} r{row['repeat']}: "
                             + "; ".join(row["invariants"]))
    return checked, found


class EveryRow:
    """The plugin: registered on the controller only (tests/conftest.py)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        root = self.config._tmp_path_factory.getbasetemp()
        checked, found = broken_rows(root)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", f"invariants: {checked} row(s) the runner wrote, "
                                    f"{len(found)} breaking one")
            for line in found:
                reporter.write_line(f"BROKEN: {line}")
        if found and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
