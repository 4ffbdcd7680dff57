"""Where the suite's time goes, kept after every run: each test's setup, call and teardown, each
fixture's own setup (its dependencies' apart, as pytest sets them up first), and the total per
file, written to DURATIONS (FAST_LANE_DURATIONS for `make check`'s lane, so that it never
replaces what `make test` measured; both ignored by git) and printed at the end: the 25 slowest
items, the slowest fixtures and the files by total. HISTORY gets one line a run, to see the suite
grow."""
from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DURATIONS = REPO / ".test-durations" / "latest.json"
FAST_LANE_DURATIONS = REPO / ".test-durations" / "fast-lane.json"
HISTORY = REPO / ".test-durations" / "history.jsonl"
SHOWN = 25


class DurationRecorder:
    """A pytest plugin (registered by conftest.py in every process of a run) that times tests
    and fixtures. Where a fixture is set up (an xdist worker) its time rides on the report of
    the test phase that set it up, which reaches the process that writes (the controller)."""

    def __init__(self, writes: bool, kept: Path = DURATIONS) -> None:
        self.writes = writes
        self.kept = kept
        self.started = time.monotonic()
        self.phases: dict[str, dict[str, float]] = defaultdict(dict)  # nodeid -> phase -> s
        self.outcomes: dict[str, str] = {}
        self.fixtures: list[dict] = []  # one entry per fixture set up
        self.unreported: list[dict] = []  # set up since the last report was made

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        started = time.monotonic()
        try:
            return (yield)
        finally:
            self.unreported.append({"fixture": fixturedef.argname, "scope": fixturedef.scope,
                                    "where": fixture_home(fixturedef),
                                    "seconds": time.monotonic() - started})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        for fixture in self.unreported:
            report.user_properties.append(("fixture_setup", {**fixture,
                                                             "first_used_by": item.nodeid}))
        self.unreported = []
        return report

    def pytest_runtest_logreport(self, report) -> None:
        self.phases[report.nodeid][report.when] = report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome
        self.fixtures += [value for name, value in report.user_properties
                          if name == "fixture_setup" and value["where"].startswith("tests/")]

    def summary(self) -> dict:
        items = [{"test": nodeid, "outcome": self.outcomes.get(nodeid, "passed"),
                  "seconds": sum(phases.values()), **phases}
                 for nodeid, phases in self.phases.items()]
        per_file: dict[str, float] = defaultdict(float)
        for item in items:
            per_file[item["test"].split("::")[0]] += item["seconds"]
        return {"finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "wall_seconds": time.monotonic() - self.started, "tests": len(items),
                "per_file": dict(sorted(per_file.items(), key=lambda kv: -kv[1])),
                "fixtures": sorted(self.fixtures, key=lambda f: -f["seconds"]),
                "items": sorted(items, key=lambda i: -i["seconds"])}

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.writes or not self.phases:  # a worker, --collect-only, or nothing ran
            return
        found = self.summary()
        self.kept.parent.mkdir(exist_ok=True)
        self.kept.write_text(json.dumps(found, indent=1) + "\n")
        with open(HISTORY, "a") as history:
            history.write(json.dumps({"kept": self.kept.name, **{
                k: found[k] for k in ("finished_at", "wall_seconds", "tests", "per_file")}})
                + "\n")
        write = terminalreporter.write_line
        terminalreporter.section(f"where the time went (all of it: "
                                 f"{self.kept.relative_to(REPO)})")
        write(f"{SHOWN} slowest tests (setup + call + teardown; a shared fixture's setup is "
              f"charged to its first user):")
        for item in found["items"][:SHOWN]:
            write(f"{item['seconds']:8.1f} s  {item['test']}  (setup {item.get('setup', 0):.1f},"
                  f" call {item.get('call', 0):.1f})")
        write(f"{SHOWN} slowest setups of the suite's fixtures (each its own time, the fixtures "
              f"it asks for apart):")
        for fixture in found["fixtures"][:SHOWN]:
            write(f"{fixture['seconds']:8.1f} s  {fixture['fixture']} ({fixture['scope']}, "
                  f"{fixture['where']})")
        write("per file:")
        for path, seconds in found["per_file"].items():
            write(f"{seconds:8.1f} s  {path}")
        write(f"{sum(found['per_file'].values()):8.1f} s  in all, {found['tests']} tests; "
              f"{found['wall_seconds']:.0f} s of wall time")


def fixture_home(fixturedef) -> str:
    """The file that defines the fixture, relative to the repository ("" for pytest's own and
    a parametrization's)."""
    code = getattr(fixturedef.func, "__code__", None)
    path = Path(code.co_filename) if code else REPO.parent
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else ""
