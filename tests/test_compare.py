"""After a grid: `xbench compare` of a grid's run against the same rows slowed and marked
contended, the conventions a command-line tool keeps (--version, --json, NO_COLOR), and export to a
real MLflow store."""
import os
import subprocess

import pandas as pd
import pytest
from conftest import REPO, SLOW, XBENCH, strict_json, write_grid
from test_progress import run_in_terminal

from xbench.common.results.store import append_row, new_run_id, read_rows
from xbench.reports.compare import slower_than
from xbench.reports.stats import Ratio

SETTINGS = {"name": "same", "backends": ["pt-single"], "batches": [64, 128], "repeats": 3,
            "max_train_samples": 1024}
EPOCH_SECONDS = (1.0, 1.05, 0.95)  # per repeat: the rows compared carry these times, so that
SLOWED = 1.5  # how much slower NEW is, and so the verdicts, do not depend on this machine


def xbench(*args, env=None):
    return subprocess.run([*XBENCH, *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=SLOW, env=env)


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
def quiet_and_busy(mnist_dir, tmp_path_factory):
    """One real grid (3 repeats of 2 cells); its rows with fixed epoch times (BASE), and the same
    rows SLOWED times slower and marked contended (NEW)."""
    folder = tmp_path_factory.mktemp("compare")
    grid = write_grid(folder, **SETTINGS)
    ran = xbench("grid", grid, "--data-dir", mnist_dir, "--results", folder / "ran.jsonl")
    assert ran.returncode == 0, ran.stderr
    rows = read_rows(folder / "ran.jsonl")[0]
    for name, factor, contended in (("quiet", 1.0, False), ("busy", SLOWED, True)):
        run_id = new_run_id()
        for row in rows:
            append_row(folder / f"{name}.jsonl", timed(row, run_id, factor, contended))
    return folder / "quiet.jsonl", folder / "busy.jsonl"


def test_compare_marks_the_slowed_cells_and_fails_above_a_threshold(quiet_and_busy):
    quiet, busy = quiet_and_busy
    done = xbench("compare", quiet, busy, "--json")
    assert done.returncode == 0, done.stderr
    cells = strict_json(done.stdout)["cells"]
    assert len(cells) == 2 and all(c["n_base"] == c["n_new"] == 3 for c in cells)
    assert all(c["verdict"] == "slower" and c["ratio_high"] < 1 for c in cells), cells
    assert all(c["contended"] for c in cells)
    table = xbench("compare", quiet, busy)
    assert "| slower (contended) |" in table.stdout
    failing = xbench("compare", quiet, busy, "--fail-above", 10)
    assert failing.returncode == 4 and "significantly slower by more than 10.0%" in failing.stderr
    assert xbench("compare", quiet, quiet, "--fail-above", 10).returncode == 0
    assert all(c["verdict"] == "inconclusive" for c in
               strict_json(xbench("compare", quiet, quiet, "--json").stdout)["cells"])


def test_the_report_has_a_comparison_section(quiet_and_busy, tmp_path):
    quiet, busy = quiet_and_busy
    done = xbench("report", busy, "--baseline", quiet, "--out", tmp_path, "--format", "html,md")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "index.html").read_text()
    assert "Compared with quiet.jsonl" in page and "slower (contended)" in page


def test_version_json_and_no_color():
    version = xbench("--version")
    assert version.returncode == 0 and version.stdout.startswith("xbench, version ")
    backends = strict_json(xbench("backends", "--json").stdout)
    assert {"backend", "available", "reason", "spans_nodes"} <= set(backends[0])
    models = strict_json(xbench("models", "--json").stdout)
    assert {(m["model"], m["params"]) for m in models if m["source"] == "spec (common)"} == {
        ("small", 402_442), ("large", 4_104_202), ("resnet18", 11_173_962), ("vgg19", 20_040_522),
        ("gpt-tiny", 809_856), ("gpt-small", 10_770_816), ("gpt-medium", 85_892_352)}
    assert "TensorFlow" not in xbench("models").stderr  # framework log lines kept off
    bad = [*XBENCH, "grid", "--preset", "smoke", "--backend", "nope"]
    _, coloured = run_in_terminal(bad)
    _, plain = run_in_terminal(bad, env={**os.environ, "NO_COLOR": "1"})
    assert "\x1b[31m" in coloured and "unknown backend" in coloured
    assert "\x1b[" not in plain and "unknown backend 'nope'" in plain


def test_export_to_a_real_mlflow_store(quiet_and_busy, tmp_path):
    from mlflow.tracking import MlflowClient
    quiet, _ = quiet_and_busy
    store = tmp_path / "mlruns"
    done = xbench("export", quiet, "--mlflow", store)
    assert done.returncode == 0 and "6 rows -> MLflow runs" in done.stdout, done.stderr
    again = xbench("export", quiet, "--mlflow", store)
    assert "0 rows -> MLflow runs" in again.stdout and "6 already there" in again.stdout
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(store.as_uri())
    [experiment] = [e for e in client.search_experiments() if e.name == "xbench"]
    runs = client.search_runs([experiment.experiment_id])
    rows = {(r["cell_key"], r["repeat"]): r for r in read_rows(quiet)[0]}
    assert len(runs) == 6
    for run in runs:
        row = rows[(run.data.params["cell_key"], int(run.data.params["repeat"]))]
        assert run.data.params["backend"] == "pt-single"
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
