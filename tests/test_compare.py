"""After a grid: `xbench compare` of a grid's run (recorded real rows, tests/data/repeats.jsonl)
against the same rows slowed and marked contended; a copy of a row is never a repeat; a gate that
compared nothing fails; export to a real MLflow store, each row once, and the targets and folders
it cannot use refused in one line."""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import REPO, refused, strict_json, xbench, xbench_here
from tests.report_fixtures import make_row, write_rows
from xbench.common.results.store import append_row, new_run_id, read_rows
from xbench.reports.numbers.stats import Ratio
from xbench.reports.rendering.compare import slower_than

RAN = REPO / "tests" / "data" / "repeats.jsonl"  # pt-single and pt-ddp, 3 repeats each
EPOCH_SECONDS = (1.0, 1.05, 0.95)  # per repeat: the rows compared carry these times, so that
SLOWED = 1.5  # how much slower NEW is, and so the verdicts, do not depend on this machine


def timed(row, run_id, factor, contended):
    """`row` with every epoch taking EPOCH_SECONDS[repeat] x `factor`, as if another load had
    used half the machine where `contended`."""
    seconds = EPOCH_SECONDS[row["repeat"]] * factor
    epochs = [{**e, "seconds": seconds, "rate": e["samples"] / seconds,
               "seconds_per_rank": [seconds] * len(e["seconds_per_rank"]),
               "contention": {**e["contention"], "contended": contended,
                              "other_cpu_share": 0.5 if contended else 0.0}}
              for e in row["epochs"]]
    return {**row, "run_id": run_id, "epochs": epochs, "contended": contended}


@pytest.fixture(scope="module")
def quiet_and_busy(tmp_path_factory):
    """One real grid's rows (3 repeats of 2 cells) with fixed epoch times (QUIET), and the same
    rows SLOWED times slower and marked contended (BUSY)."""
    folder = tmp_path_factory.mktemp("compare")
    rows = read_rows(RAN)[0]
    for name, factor, contended in (("quiet", 1.0, False), ("busy", SLOWED, True)):
        run_id = new_run_id()
        for row in rows:
            append_row(folder / f"{name}.jsonl", timed(row, run_id, factor, contended))
    return folder / "quiet.jsonl", folder / "busy.jsonl"


def test_compare_marks_the_slowed_cells_and_fails_above_a_threshold(quiet_and_busy):
    quiet, busy = quiet_and_busy
    done = xbench_here("compare", quiet, busy, "--json")
    assert done.returncode == 0, done.stderr
    cells = strict_json(done.stdout)["cells"]
    assert len(cells) == 2 and all(c["n_base"] == c["n_new"] == 3 for c in cells)
    assert all(c["verdict"] == "slower" and c["ratio_high"] < 1 for c in cells), cells
    assert all(c["contended"] for c in cells)
    table = xbench_here("compare", quiet, busy, "--format", "md")
    assert "| slower (contended) |" in table.stdout
    failing = xbench_here("compare", quiet, busy, "--fail-above", 10)
    assert failing.returncode == 4 and "significantly slower by more than 10.0%" in failing.stderr
    assert xbench_here("compare", quiet, quiet, "--fail-above", 10).returncode == 0
    assert all(c["verdict"] == "inconclusive" for c in
               strict_json(xbench_here("compare", quiet, quiet, "--json").stdout)["cells"])


def test_the_report_has_a_comparison_section(quiet_and_busy, tmp_path):
    quiet, busy = quiet_and_busy
    done = xbench_here("report", busy, "--baseline", quiet, "--out", tmp_path, "--format",
                       "html,md")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "index.html").read_text()
    assert "Compared with quiet.jsonl" in page and "slower (contended)" in page


@pytest.mark.processes("importing MLflow runs `git version` (GitPython)")
def test_export_to_a_real_mlflow_store(quiet_and_busy, tmp_path):
    from mlflow.tracking import MlflowClient
    quiet, _ = quiet_and_busy
    store = tmp_path / "mlruns"
    done = xbench_here("export", quiet, "--mlflow", store)
    assert done.returncode == 0 and "6 rows -> MLflow runs" in done.stdout, done.stderr
    again = xbench_here("export", quiet, "--mlflow", store)
    assert "0 rows -> MLflow runs" in again.stdout and "6 already there" in again.stdout
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(store.as_uri())
    [experiment] = [e for e in client.search_experiments() if e.name == "xbench"]
    runs = client.search_runs([experiment.experiment_id])
    rows = {(r["cell_key"], r["repeat"]): r for r in read_rows(quiet)[0]}
    assert len(runs) == 6
    for run in runs:
        row = rows[(run.data.params["cell_key"], int(run.data.params["repeat"]))]
        assert run.data.params["backend"] == row["backend"]
        assert run.data.tags["status"] == "ok" and run.data.tags["package.torch"].startswith("2.13")
        history = client.get_metric_history(run.info.run_id, "rate")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
            (e["epoch"], pytest.approx(e["rate"])) for e in row["epochs"]]
        assert run.data.metrics["test_accuracy"] == pytest.approx(row["test_accuracy"])


def test_the_gate_fails_only_where_the_interval_shows_the_slowdown():
    """--fail-above 5: 0.94 [0.90, 0.99] does not show a 5% slowdown (it may be 1%); 0.90
    [0.86, 0.93] does."""
    cells = pd.DataFrame({"cell_key": ["maybe", "shown"],
                          "ratio": [Ratio(0.94, 0.90, 0.99, (3, 3)),
                                    Ratio(0.90, 0.86, 0.93, (3, 3))]})
    assert list(slower_than(cells, 5)["cell_key"]) == ["shown"]
    assert list(slower_than(cells, 10)["cell_key"]) == []


# --- a copy of a row is never a repeat ------------------------------------------------------------

@pytest.fixture
def base_and_new(tmp_path):
    """One run of one cell in BASE (100 samples/s) and one in NEW (94), and each file doubled."""
    base = write_rows(tmp_path / "base.jsonl", [make_row(rates=(80, 100))])
    new = write_rows(tmp_path / "new.jsonl", [make_row(rates=(80, 94))])
    doubled = {}
    for path in (base, new):
        doubled[path.stem] = tmp_path / f"{path.stem}2.jsonl"
        doubled[path.stem].write_text(path.read_text() * 2)
    return base, new, doubled["base"], doubled["new"]


def test_duplicated_rows_are_dropped_and_said_so_by_every_reader(base_and_new, tmp_path):
    base, new, base2, new2 = base_and_new
    rows, problems = read_rows(base2)
    assert len(rows) == 1 and any("1 duplicate row" in p for p in problems), problems
    gate = xbench_here("compare", base2, new2, "--fail-above", 5)
    assert gate.returncode == 0, gate.stderr  # one run a side: no interval, no significant change
    assert "duplicate" in gate.stderr and "0.94x [0.94x, 0.94x]" not in gate.stdout
    report = xbench_here("report", base2, base2, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0, report.stderr
    assert "1 row (1 ok, 0 not ok)" in report.stdout and "duplicate" in report.stderr
    assert "faster" not in report.stdout.replace("fastest", "")


def test_mlflow_export_logs_each_row_once_even_twice_at_once(base_and_new, tmp_path):
    """Two exports at once, each a process of its own."""
    from mlflow.tracking import MlflowClient
    _, _, base2, _ = base_and_new
    store = tmp_path / "mlruns"
    with ThreadPoolExecutor(2) as pool:
        exports = list(pool.map(lambda _: xbench("export", base2, "--mlflow", store), range(2)))
    assert all(e.returncode == 0 for e in exports), [e.stderr for e in exports]
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(store.as_uri())
    [experiment] = [e for e in client.search_experiments() if e.name == "xbench"]
    assert len(client.search_runs([experiment.experiment_id])) == 1


# --- a gate that compared nothing fails -----------------------------------------------------------

@pytest.mark.parametrize("new_text", ["FAILED", "CONTENDED"])
def test_a_gate_that_compared_nothing_fails(base_and_new, tmp_path, new_text):
    """The same cell in both files, but no usable run of it in NEW."""
    base, _, _, _ = base_and_new
    new = tmp_path / "nothing.jsonl"
    extra = []
    if new_text == "FAILED":
        write_rows(new, [make_row(rates=(80, 94), status="failed", error="a crash")])
    else:
        write_rows(new, [make_row(rates=(80, 94), contended=True)])
        extra = ["--exclude-contended"]
    gate = xbench_here("compare", base, new, "--fail-above", 5, *extra)
    assert gate.returncode == 5, (gate.returncode, gate.stdout, gate.stderr)
    assert "nothing was compared" in gate.stderr


@pytest.mark.parametrize("new_text, has", [
    ("", "has no cell"), ("garbage\n", "has no cell (1 problem(s) reading it)"),
    (json.dumps({"schema_version": 1}) + "\n", "has no cell (1 problem(s) reading it)"),
    ("OTHER", "has 1 cell(s): pt-ddp|small|x1|global-b64|")])
@pytest.mark.parametrize("gate", [[], ["--fail-above", "5"], ["--json"]])
def test_files_that_share_no_cell_are_refused_saying_what_each_has(base_and_new, tmp_path,
                                                                   new_text, has, gate):
    """Two files with no cell in common are not a comparison: one line saying what each holds,
    exit 2, with or without a gate."""
    base, _, _, _ = base_and_new
    new = tmp_path / "other.jsonl"
    if new_text == "OTHER":
        write_rows(new, [make_row(rates=(80, 94), batch=64)])
    else:
        new.write_text(new_text)
    done = xbench_here("compare", base, new, *gate)
    refused(done, f"no cell is in both files, nothing to compare: {base} has 1 cell(s): "
                  f"pt-ddp|small|x1|global-b128|")
    assert f"; {new} {has}" in done.stderr and done.stdout == "", done.stderr


def test_files_judged_under_other_contention_limits_say_so_and_are_compared(base_and_new,
                                                                            tmp_path):
    base, _, _, _ = base_and_new
    new = write_rows(tmp_path / "strict.jsonl",
                     [{**make_row(rates=(80, 94)), "contention_limit": 0.25}])
    done = xbench_here("compare", base, new, "--format", "md")
    assert done.returncode == 0, done.stderr
    said = (f"contention limits differ: {base} judged its runs contended above 10% of a rank's "
            f"cores, {new} above 25%")
    assert said in done.stderr and "| no interval (n = 1 on a side) |" in done.stdout
    notes = strict_json(xbench_here("compare", base, new, "--json").stdout)["notes"]
    assert any(note.startswith(said) for note in notes), notes
    assert "contention limits" not in xbench_here("compare", base, base).stderr


def test_dev_null_is_nothing_to_compare(base_and_new):
    base, _, _, _ = base_and_new
    gate = xbench_here("compare", base, "/dev/null", "--fail-above", 5)
    assert gate.returncode in (2, 5) and "Traceback" not in gate.stderr


@pytest.mark.parametrize("threshold", ["nan", "inf", "-1", "100"])
def test_a_threshold_that_means_nothing_is_refused(base_and_new, threshold):
    base, new, _, _ = base_and_new
    refused(xbench_here("compare", base, new, "--fail-above", threshold), "--fail-above")


# --- what export cannot use, in one line ----------------------------------------------------------

def test_an_unreachable_mlflow_server_fails_in_seconds_in_one_line(base_and_new):
    base, _, _, _ = base_and_new
    started = time.monotonic()
    done = xbench("export", base, "--mlflow", "http://127.0.0.1:9", timeout=120)
    refused(done, "MLflow at http://127.0.0.1:9 did not answer")
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("target, message", [
    ("FILE", "is a file"), ("READONLY", "cannot write"), ("sqlite:///x.db", "sqlite"),
    ("ftp://example.org/x", "ftp"), ("http://localhost:99999", "the port is not a number"),
])
def test_an_mlflow_target_it_cannot_use_is_one_line(base_and_new, tmp_path, target, message):
    base, _, _, _ = base_and_new
    if target == "FILE":
        target = tmp_path / "a-file"
        target.write_text("")
    elif target == "READONLY":
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o500)
        if os.geteuid() == 0:
            target = Path("/proc/xbench-mlruns")  # root writes anywhere a mode allows
    refused(xbench_here("export", base, "--mlflow", target), message)


@pytest.mark.parametrize("where", ["missing/sub/out.csv", "/proc/out.csv"])
def test_an_export_into_a_folder_it_cannot_write_is_one_line(base_and_new, tmp_path, where):
    base, _, _, _ = base_and_new
    refused(xbench_here("export", base, tmp_path / where if not where.startswith("/") else where),
            "cannot write")
