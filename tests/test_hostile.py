"""Tried as a hostile user would, again: a copy of a row is never a repeat, a gate that compared
nothing fails, every field a reader uses is checked, TensorFlow out of memory is `oom`, every
command fails in one line and before its work, signals and leftovers, special files, and no
framework noise on the terminal. Each case failed before its fix."""
import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, SLOW, XBENCH
from report_fixtures import make_row, write_rows

from xbench.common.results.store import read_rows

ONE_LINE = "one line, exit 2, no traceback"


def run(*args, cwd=REPO, env=None, timeout=SLOW, **options):
    return subprocess.run([*XBENCH, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, **options)


def refused(done, message, code=2):
    """One message naming the problem, the exit code, no traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and message in done.stderr, done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("error:")]) == 1


# --- 1. a copy of a row is never a repeat --------------------------------------------------------

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
    gate = run("compare", base2, new2, "--fail-above", 5)
    assert gate.returncode == 0, gate.stderr  # one run a side: no interval, no significant change
    assert "duplicate" in gate.stderr and "0.94x [0.94x, 0.94x]" not in gate.stdout
    report = run("report", base2, base2, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0, report.stderr
    assert "1 row (1 ok, 0 not ok)" in report.stdout and "duplicate" in report.stderr
    assert "faster" not in report.stdout.replace("fastest", "")


def test_mlflow_export_logs_each_row_once_even_twice_at_once(base_and_new, tmp_path):
    pytest.importorskip("mlflow")
    _, _, base2, _ = base_and_new
    store = tmp_path / "mlruns"
    with ThreadPoolExecutor(2) as pool:
        exports = list(pool.map(lambda _: run("export", base2, "--mlflow", store), range(2)))
    assert all(e.returncode == 0 for e in exports), [e.stderr for e in exports]
    from mlflow.tracking import MlflowClient
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(store.as_uri())
    [experiment] = [e for e in client.search_experiments() if e.name == "xbench"]
    assert len(client.search_runs([experiment.experiment_id])) == 1


# --- 3. a gate that compared nothing fails --------------------------------------------------------

@pytest.mark.parametrize("new_text", [
    "", "garbage\n", json.dumps({"schema_version": 1}) + "\n", "FAILED", "CONTENDED", "OTHER"])
def test_a_gate_that_compared_nothing_fails(base_and_new, tmp_path, new_text):
    base, _, _, _ = base_and_new
    new = tmp_path / "nothing.jsonl"
    extra = []
    if new_text == "FAILED":
        write_rows(new, [make_row(rates=(80, 94), status="failed", error="a crash")])
    elif new_text == "CONTENDED":
        write_rows(new, [make_row(rates=(80, 94), contended=True)])
        extra = ["--exclude-contended"]
    elif new_text == "OTHER":
        write_rows(new, [make_row(rates=(80, 94), batch=64)])
    else:
        new.write_text(new_text)
    gate = run("compare", base, new, "--fail-above", 5, *extra)
    assert gate.returncode == 5, (gate.returncode, gate.stdout, gate.stderr)
    assert "nothing was compared" in gate.stderr


def test_dev_null_is_nothing_to_compare(base_and_new):
    base, _, _, _ = base_and_new
    gate = run("compare", base, "/dev/null", "--fail-above", 5)
    assert gate.returncode in (2, 5) and "Traceback" not in gate.stderr


@pytest.mark.parametrize("threshold", ["nan", "inf", "-1", "100"])
def test_a_threshold_that_means_nothing_is_refused(base_and_new, threshold):
    base, new, _, _ = base_and_new
    refused(run("compare", base, new, "--fail-above", threshold), "--fail-above")


# --- 4. every field a reader uses is checked ------------------------------------------------------

def bad_rows():
    good = make_row(rates=(80, 100))
    epoch = good["epochs"][1]
    return {
        "schema_version 2.0": {**good, "schema_version": 2.0},
        "schema_version [4]": {**good, "schema_version": [4]},
        "schema_version {}": {**good, "schema_version": {}},
        "schema_version huge": {**good, "schema_version": "HUGE"},  # written as 5,000 digits
        "contention {}": {**good, "epochs": [good["epochs"][0], {**epoch, "contention": {}}]},
        "per-rank contention not a list": {**good, "epochs": [good["epochs"][0], {
            **epoch, "contention": {**epoch["contention"], "per_rank": {"0": 0.5}}}]},
        "a rank's share a text": {**good, "epochs": [good["epochs"][0], {
            **epoch, "contention": {**epoch["contention"],
                                    "per_rank": [{"interrupt_share": "0.5"}]}}]},
        "packages a list": {**good, "env": {**good["env"], "packages": ["torch"]}},
        "digests not text": {**good, "evidence": {**good["evidence"],
                                                  "replica_weight_digests": [[1]]}},
        "one epoch": {**good, "epochs": good["epochs"][:1]},
        "negative seconds": {**good, "epochs": [good["epochs"][0], {**epoch, "seconds": -1.0}]},
        "zero seconds": {**good, "epochs": [good["epochs"][0], {**epoch, "seconds": 0.0}]},
        "attribution of another shape": {**good, "attribution": {"epochs": [1]}},
        "math a text": {**good, "backend_details": {**good["backend_details"], "math": "tf32"}},
        # numbers out of their range: a rate of -569 or 5.6e14 samples/s, an accuracy of 500%
        "negative samples": {**good, "epochs": [good["epochs"][0], {**epoch, "samples": -1024}]},
        "more samples than the data": {**good, "epochs": [good["epochs"][0],
                                                          {**epoch, "samples": 10 ** 15}]},
        "test accuracy 5": {**good, "test_accuracy": 5.0},
        "epoch accuracy below 0": {**good, "epochs": [good["epochs"][0],
                                                      {**epoch, "accuracy": -0.1}]},
        "negative step time": {**good, "step_time_p50": -0.01},
    }


def test_a_row_of_the_wrong_shape_is_a_skipped_line_for_every_reader(tmp_path, mnist_dir):
    results = tmp_path / "r.jsonl"
    rows = bad_rows()
    with open(results, "w") as f:
        f.write(json.dumps(make_row(rates=(80, 100), batch=64)) + "\n")
        for row in rows.values():
            f.write(json.dumps(row).replace('"HUGE"', "1" + "0" * 5000) + "\n")
    valid, problems = read_rows(results)
    assert len(valid) == 1 and len(problems) == len(rows), problems
    report = run("report", results, "--out", tmp_path / "out", "--format", "md,csv")
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    dry = run("grid", "--preset", "smoke", "--results", results, "--dry-run")
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr
    assert run("compare", results, results).returncode == 0


def test_a_probe_record_of_the_wrong_shape_is_skipped_with_a_note(tmp_path):
    results = write_rows(tmp_path / "r.jsonl", [make_row(rates=(80, 100))])
    (tmp_path / "probe.jsonl").write_text(
        json.dumps({"probe_version": 1, "env": {}, "matmul": [{"gflops": 0}], "all_reduce": []})
        + "\n"
        + json.dumps({"probe_version": 1}) + "\n")
    report = run("report", results, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert report.stderr.count("probe.jsonl: line") == 2


# --- 5. TensorFlow out of memory is a result ------------------------------------------------------

def test_tensorflow_under_a_memory_limit_ends_oom_and_the_sweep_stops(tmp_path, mnist_dir):
    temporary = tmp_path / "tmp"  # the run's temporary folder, where TensorFlow's autograph
    temporary.mkdir()  # modules would be left behind but for each cell's folder of its own
    done = run("grid", "--preset", "smoke", "--backend", "tf-single", "--devices", "1",
               "--batch-sweep", "256x4", "--memory-limit-mb", "300", "--max-train-samples",
               "4096", "--data-dir", mnist_dir, "--results", tmp_path / "r.jsonl",
               env={**os.environ, "TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = [r["status"] for r in sorted(read_rows(tmp_path / "r.jsonl")[0],
                                            key=lambda r: r["global_batch"])]
    assert statuses[-1] == "oom" and "failed" not in statuses, statuses
    assert not list(temporary.iterdir())  # each cell's folder went with it, and all it held


# --- 6. one line, not a traceback -----------------------------------------------------------------

def test_an_unreachable_mlflow_server_fails_in_seconds_in_one_line(base_and_new):
    pytest.importorskip("mlflow")
    base, _, _, _ = base_and_new
    started = time.monotonic()
    done = run("export", base, "--mlflow", "http://127.0.0.1:9", timeout=120)
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
    refused(run("export", base, "--mlflow", target), message)


@pytest.mark.parametrize("where", ["missing/sub/out.csv", "/proc/out.csv"])
def test_an_export_into_a_folder_it_cannot_write_is_one_line(base_and_new, tmp_path, where):
    base, _, _, _ = base_and_new
    refused(run("export", base, tmp_path / where if not where.startswith("/") else where),
            "cannot write")


def test_a_report_into_a_folder_it_cannot_write_is_one_line(base_and_new, tmp_path):
    base, _, _, _ = base_and_new
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused(run("report", base, "--out", blocker / "out"), "cannot write the report")
    refused(run("report", base, "--out", "/proc/xbench-report"), "cannot write the report")


@pytest.mark.parametrize("command, target", [
    (["export", "{base}", "{out}/rows.csv"], "rows.csv"),
    (["export", "{base}", "{out}/rows.parquet"], "rows.parquet"),
    (["report", "{base}", "--out", "{out}", "--format", "md,csv,png"], "summary.md")])
def test_a_file_size_limit_midway_is_one_line_and_no_half_written_file(base_and_new, tmp_path,
                                                                        command, target):
    """`ulimit -f 1`: a write beyond 1 KiB fails (EFBIG), as on a full disk."""
    base, _, _, _ = base_and_new
    out = tmp_path / "out"
    out.mkdir()
    arguments = [a.format(base=base, out=out) for a in command]
    done = subprocess.run(["bash", "-c", 'ulimit -f 1; exec "$@"', "limited", *XBENCH,
                           *arguments], cwd=REPO, capture_output=True, text=True, timeout=SLOW)
    refused(done, "nothing half-written was left under its name")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    left = [p.name for p in out.iterdir()]
    assert target not in left and not [name for name in left if ".partial-" in name], left
    assert all(p.stat().st_size < 1024 for p in out.iterdir())  # what is there is whole


@pytest.mark.parametrize("query, message", [
    ("global_batch >= '128'", "compares global_batch, a number, with '128', text"),
    ("not " * 5000 + "devices > 1", "too deeply nested"),
])
def test_a_filter_that_cannot_be_evaluated_is_one_line(base_and_new, tmp_path, query, message):
    base, _, _, _ = base_and_new
    refused(run("report", base, "--out", tmp_path / "out", "--where", query), message)


def test_a_download_without_a_network_is_one_line(tmp_path):
    env = {**os.environ, "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
    refused(run("data", "download", "--to", tmp_path / "mnist", env=env, timeout=120),
            "could not download MNIST")


# --- 7. output locations are checked before the work -------------------------------------------

def test_a_profile_into_a_folder_it_cannot_make_fails_before_it_measures(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run("profile", "--model", "small", "--batch", "8", "--backend", "pt-single",
               "--out", blocker / "sub")
    refused(done, "cannot write the profile")
    assert "pt-single" not in done.stdout  # nothing was measured


# --- 8. signals, leftovers, and what a measurement that measured nothing says ---------------------

def leftovers():
    return {p.name for p in Path("/tmp").glob("xbench-*") if p.name.startswith(
        ("xbench-probe-", "xbench-profile-"))}


@pytest.mark.parametrize("command", [
    ["probe", "--backend", "pt-single,pt-ddp", "--devices", "2"],
    ["profile", "--model", "small", "--batch", "8", "--backend", "pt-single", "--steps", "500"]])
def test_sigterm_stops_probe_and_profile_cleanly(command, tmp_path):
    before = leftovers()
    extra = ["--results-dir", tmp_path] if command[0] == "probe" else ["--out", tmp_path / "p"]
    process = subprocess.Popen([*XBENCH, *map(str, command), *map(str, extra)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not leftovers() - before and time.monotonic() < deadline:  # it has started measuring
        time.sleep(0.2)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "resume" not in stderr
    assert leftovers() - before == set()
    assert not (tmp_path / "probe.jsonl").exists()


def test_a_probe_that_measured_nothing_exits_non_zero_and_appends_nothing(tmp_path):
    done = run("probe", "--backend", "pt-single", "--device", "cuda", "--results-dir", tmp_path)
    assert done.returncode == 3 and "measured nothing" in done.stderr, done.stderr
    assert not (tmp_path / "probe.jsonl").exists()


@pytest.mark.parametrize("options, message", [
    (["--seed", "-1"], "--seed must be from 0"), (["--steps", "100000"], "--steps"),
    (["--warmup", "100000"], "--warmup")])
def test_profile_bounds_its_numbers(options, message):
    refused(run("profile", "--model", "small", "--batch", "8", *options), message)


# --- 9. readers open only regular files -----------------------------------------------------------

def test_a_fifo_among_the_results_is_skipped_not_read(base_and_new, tmp_path):
    base, _, _, _ = base_and_new
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "ok.jsonl").write_text(base.read_text())
    os.mkfifo(folder / "zz-pipe.jsonl")
    os.utime(folder / "ok.jsonl", (1, 1))  # the pipe is the newest
    done = run("report", "--out", tmp_path / "out", "--format", "md", cwd=folder.parent,
               timeout=60)  # the newest *.jsonl of results/, which is the pipe
    assert done.returncode == 0, done.stderr
    dry = run("grid", "--preset", "smoke", "--results", folder / "new.jsonl", "--dry-run",
              timeout=120)
    assert dry.returncode == 0, dry.stderr
    refused(run("report", folder / "zz-pipe.jsonl", timeout=60), "not a regular file")


# --- 10. no framework noise on the terminal -------------------------------------------------------

NOISE = ("absl::InitializeLog", "oneDNN custom operations", "Warning:", "warnings.warn",
         "RuntimeWarning", "UserWarning")


def test_no_framework_or_library_noise_without_verbose(base_and_new, tmp_path):
    base, _, _, _ = base_and_new
    for done in (run("-q", "backends"), run("grid", "--preset", "smoke", "--dry-run",
                                            "--results", tmp_path / "r.jsonl"),
                 run("report", base, "--out", tmp_path / "out", "--format", "png,md")):
        assert done.returncode == 0, done.stderr
        assert not any(noise in done.stdout + done.stderr for noise in NOISE), done.stderr
