"""A grid survives anything one cell does and loses nothing, proven with real processes:
the real `xbench` command line, real torchrun ranks, real MNIST slices. Two grids on one results
file share it and its cells; special files are refused; a row the file cannot take is kept beside
it; a crash, a signal, a hung rank, a timeout, out of memory (PyTorch's and TensorFlow's, or a cell
too large to start) and a missing backend each end as a row that says so, and the exit code says
whether every cell finished.

Every process a test starts carries XBENCH_TEST_MARK=<a fresh id> in its environment (the runner
passes its environment on to every rank), which is how a test finds its ranks and checks that none
is left behind, on a machine where other grids may be running too.
"""
import fcntl
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import REPO, SLOW, XBENCH, refused, write_grid, xbench, xbench_here
from xbench.common.results.store import read_rows

# a 2-rank pt-ddp cell that would train for many minutes: the tests stop it long before
LONG_CELL = {"backends": ["pt-ddp"], "devices": [2], "max_train_samples": 1024, "epochs": 1000}
# No test here reads a test accuracy: the cells that finish evaluate on a tenth of the test set
# (1,000 images, not 10,000), and the grids that resume or force shared_results' cells take the
# same cap (it is part of a cell's key)
TEST_SLICE = {"max_test_samples": 1000}


# --- helpers -------------------------------------------------------------------------------------

def environment(mark, **extra):
    return {**os.environ, "XBENCH_TEST_MARK": mark, **extra}


def start_grid(grid, results, mnist_dir, mark, *options, env=None):
    return subprocess.Popen([*XBENCH, "grid", str(grid), "--data-dir", str(mnist_dir),
                             "--results", str(results), *map(str, options)],
                            cwd=REPO, env=env or environment(mark), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_grid(grid, results, mnist_dir, mark, *options, env=None):
    process = start_grid(grid, results, mnist_dir, mark, *options, env=env)
    stdout, stderr = process.communicate(timeout=SLOW)
    return process.returncode, stdout, stderr


def marked(mark, *needles):
    """PIDs of live processes whose environment has this test's mark and every `needle` entry."""
    wanted = {f"XBENCH_TEST_MARK={mark}".encode(), *(n.encode() for n in needles)}
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if wanted <= set((entry / "environ").read_bytes().split(b"\0")):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def wait_for(what, condition, timeout=SLOW):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout} s for {what}")


def training(driver, results, mark, *needles):
    """(PID, log line) of a worker of this test, with every `needle` in its environment, once its
    log line says it has loaded the data and started training; fails at once if the grid ends."""
    def find():
        assert driver.poll() is None, f"the grid ended first: {driver.communicate()}"
        logs = "".join(p.read_text(errors="replace")
                       for p in Path(f"{results}.logs").glob("*/*.log"))
        for pid in marked(mark, *needles):
            line = re.search(rf"xbench worker {pid}: .*", logs)
            if line:
                return pid, line.group(0)
    return wait_for("a worker to start training", find)


def training_rank(driver, results, mark, rank):
    """PID of rank `rank` of the running pt-ddp cell, a few seconds into its epochs."""
    pid, _ = training(driver, results, mark, f"RANK={rank}")
    time.sleep(3)  # model built, process group up: the epochs have begun
    return pid


def assert_none_left(mark, within=60):
    """Every process of the test ends (a hung rank and torchrun included)."""
    wait_for("every process of the cell to end", lambda: not marked(mark), timeout=within)


@pytest.fixture
def mark():
    """A fresh mark; whatever still carries it when the test ends is killed."""
    value = uuid.uuid4().hex
    yield value
    for pid in marked(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# A valid failed row (common.results.schema), made in a subprocess: hand_row(run id, repeat,
# error text).
HAND_ROW = """from xbench.common.grids.grid import expand
from xbench.common.results.schema import make_row, now
from xbench.common.workload.models import MODELS
def hand_row(run_id, repeat, error):
    cell = expand({"name": "hand", "backends": ["pt-dp"], "models": ["small"], "multiples": [1],
                   "batches": [128], "devices": [1], "repeats": repeat + 1})[repeat]
    return make_row(cell, run_id, now(), "failed", error, None, None, {}, None, 0.0, 1,
                    model=MODELS["small"])
"""


# --- two grids writing one results file at once --------------------------------------------------

@pytest.fixture(scope="module")
def shared_results(mnist_dir, tmp_path_factory):
    """Two real grids appending to one results file at the same time (in a folder that does not
    exist yet: the runner makes it). Their two ok rows seed the tests below."""
    folder = tmp_path_factory.mktemp("shared")
    results = folder / "new" / "folder" / "results.jsonl"
    grids = [write_grid(folder, batches=[64], **TEST_SLICE),
             write_grid(folder, batches=[128], **TEST_SLICE)]
    mark = uuid.uuid4().hex
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(lambda g: run_grid(g, results, mnist_dir, mark), grids))
    return results, outputs


def test_two_grids_append_to_one_file_and_every_row_is_whole(shared_results):
    results, outputs = shared_results
    for returncode, _, stderr in outputs:
        assert returncode == 0, stderr
    rows, problems = read_rows(results)
    assert problems == []
    assert sorted(r["global_batch"] for r in rows) == [64, 128]
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    assert max(r["started_at"] for r in rows) <= min(r["finished_at"] for r in rows)  # at once


def test_concurrent_appends_never_interleave(tmp_path):
    """Four processes append 40 rows of 200 kB each at once: every line is one whole row."""
    results = tmp_path / "results.jsonl"
    code = (f"import sys; from xbench.common.results.store import append_row\n{HAND_ROW}\n"
            "for i in range(40):\n"
            "    append_row(sys.argv[1], hand_row(sys.argv[2], i, sys.argv[2] * 200_000))\n")
    writers = [subprocess.Popen([XBENCH[0], "-c", code, str(results), letter], cwd=REPO)
               for letter in "abcd"]
    assert [w.wait(timeout=SLOW) for w in writers] == [0] * 4
    rows, problems = read_rows(results)
    assert problems == []
    assert sorted((r["run_id"], r["repeat"]) for r in rows) == [
        (k, i) for k in "abcd" for i in range(40)]
    assert all(r["error"] == r["run_id"] * 200_000 for r in rows)


def test_an_append_waits_for_another_writers_lock(tmp_path):
    """While another process holds the results file's lock, an append blocks on it (the kernel
    lists it as a waiter in /proc/locks) and writes only once the lock is released."""
    results = tmp_path / "results.jsonl"
    results.write_text("")
    code = (f"import sys; from xbench.common.results.store import append_row\n{HAND_ROW}\n"
            "append_row(sys.argv[1], hand_row('k', 0, 'held'))\n")
    with open(results, "a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        writer = subprocess.Popen([XBENCH[0], "-c", code, str(results)], cwd=REPO)

        def waiting():
            assert writer.poll() is None, "the append went ahead without the lock"
            return re.search(rf"->\s+FLOCK\s+ADVISORY\s+WRITE\s+{writer.pid}\s",
                             Path("/proc/locks").read_text())
        wait_for("the append to wait for the lock", waiting)
        assert results.read_text() == ""
    assert writer.wait(timeout=SLOW) == 0
    assert [r["run_id"] for r in read_rows(results)[0]] == ["k"]


def test_two_grids_on_one_results_file_share_the_cells(mnist_dir, tmp_path):
    """Started together on the same two cells: each cell runs once, in one grid or the other."""
    results = tmp_path / "shared.jsonl"
    spec = {"backends": ["pt-single"], "batches": [64, 128], "max_train_samples": 512,
            **TEST_SLICE}
    grids = [write_grid(tmp_path, **spec), write_grid(tmp_path, **spec)]
    outputs = [None, None]

    def start(i):
        outputs[i] = xbench("grid", grids[i], "--data-dir", mnist_dir, "--results", results)
    threads = [threading.Thread(target=start, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    rows = read_rows(results)[0]
    assert sorted(r["global_batch"] for r in rows) == [64, 128]
    skipped = "".join(o.stdout for o in outputs)
    assert skipped.count("being run by another grid") + skipped.count("done in") == 2


# --- the results file: kinds refused, rows never lost or torn ---------------------------------

@pytest.mark.parametrize("target, message", [
    ("/dev/full", "/dev/full exists and is not a regular file"),
    ("{tmp}/fifo", "fifo exists and is not a regular file"),
    ("{tmp}/link", "link is a symbolic link"),
    ("{tmp}/dangling", "dangling is a symbolic link"),
])
def test_special_files_and_links_are_refused_up_front(target, message, mnist_dir, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "real.jsonl").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "real.jsonl")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere.jsonl")
    done = xbench_here("grid", write_grid(tmp_path), "--data-dir", mnist_dir, "--results",
                       target.format(tmp=tmp_path))
    refused(done, message)
    assert not Path("/dev/full.logs").exists() and not (tmp_path / "nowhere.jsonl").exists()
    assert (tmp_path / "real.jsonl").read_text() == ""


def test_a_row_the_file_cannot_take_is_kept_beside_it_and_no_half_row_stays(mnist_dir, tmp_path):
    """A file size limit (as a full disk would) cuts the append short: the half line is cut off
    again, the row is kept in <results>.unsaved.jsonl, and the grid says so and stops (exit 2)."""
    from xbench.common.grids.grid import expand
    from xbench.common.results.schema import make_row, now
    from xbench.common.workload.models import MODELS
    cell = expand({"name": "hand", "backends": ["pt-single"], "models": ["small"],
                   "multiples": [1], "batches": [128], "devices": [1]})[0]
    earlier = make_row(cell, "earlier", now(), "failed", "x" * 50_000, None, None, {}, None, 0.0,
                       1, model=MODELS["small"])  # larger than any file the cell itself writes
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({**earlier, "cell_key": "earlier"}) + "\n")
    before = results.read_bytes()
    limit = len(before) + 2000
    grid = write_grid(tmp_path, backends=["pt-single"], **TEST_SLICE)

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    done = subprocess.run([*XBENCH, "grid", str(grid), "--data-dir", str(mnist_dir), "--results",
                           str(results)], cwd=REPO, capture_output=True, text=True, timeout=SLOW,
                          preexec_fn=small_files)
    refused(done, "cannot append to the results file")
    side = Path(f"{results}.unsaved.jsonl")
    assert f"the row was kept in {side}" in done.stderr
    assert results.read_bytes() == before
    [kept] = read_rows(side)[0]
    assert kept["status"] == "ok" and kept["backend"] == "pt-single"


# --- a damaged results file ----------------------------------------------------------------------

def test_a_damaged_results_file_keeps_every_other_row_and_takes_new_ones(shared_results, mnist_dir,
                                                                         tmp_path, mark):
    results = tmp_path / "results.jsonl"
    first, last = Path(shared_results[0]).read_text().splitlines()
    # a garbage line, then the last row torn in half as a crash mid-write would leave it
    results.write_text(f"{first}\n\x00garbage }}{{ not json\n{last[:len(last) // 2]}")
    torn = json.loads(last)["global_batch"]

    export = subprocess.run([*XBENCH, "export", str(results), str(tmp_path / "rows.csv")],
                            cwd=REPO, capture_output=True, text=True, timeout=SLOW)
    assert export.returncode == 0, export.stderr
    assert "line 2: not valid JSON" in export.stderr and "line 3: not valid JSON" in export.stderr
    assert "1 rows" in export.stdout

    # appending still works: resume reruns only the cell whose row was torn
    returncode, stdout, stderr = run_grid(write_grid(tmp_path, batches=[64, 128], **TEST_SLICE),
                                          results, mnist_dir, mark)
    assert returncode == 0, stderr
    assert "line 3: not valid JSON" in stdout  # the runner says what it skipped
    assert stdout.count("done in") == 1
    rows, problems = read_rows(results)
    assert [p.split(": ")[1] for p in problems] == ["line 2", "line 3"]
    assert [(r["global_batch"], r["status"]) for r in rows] == [
        (json.loads(first)["global_batch"], "ok"), (torn, "ok")]


# --- Ctrl-C / SIGTERM of the grid, resume and --force --------------------------------------------

def interrupt(driver, results, mark, sig):
    """Send `sig` to the grid while a cell trains: exit 130, no process left, no row written.
    Returns the interrupted worker's log line."""
    before = results.read_bytes()
    _, line = training(driver, results, mark)
    driver.send_signal(sig)
    stdout, stderr = driver.communicate(timeout=SLOW)
    assert driver.returncode == 130, stderr
    assert "interrupted: what was running was stopped" in stderr and "Traceback" not in stderr
    assert_none_left(mark, within=30)
    assert results.read_bytes() == before  # no row, no half row
    return line


def test_ctrl_c_and_sigterm_stop_the_cell_resume_runs_the_rest_force_reruns(
        shared_results, mnist_dir, tmp_path, mark):
    results = tmp_path / "results.jsonl"
    shutil.copy(shared_results[0], results)  # ok rows for batches 64 and 128
    grid = write_grid(tmp_path, batches=[32, 64, 128], **TEST_SLICE)

    line = interrupt(start_grid(grid, results, mnist_dir, mark), results, mark, signal.SIGINT)
    assert "b32" in line

    returncode, stdout, stderr = run_grid(grid, results, mnist_dir, mark)  # --resume is the default
    assert returncode == 0, stderr
    assert stdout.count("(use --force to run it again)") == 2
    rows, problems = read_rows(results)
    assert problems == [] and sorted(r["global_batch"] for r in rows) == [32, 64, 128]
    assert all(r["status"] == "ok" for r in rows)

    # --force starts a cell that has an ok row; SIGTERM stops it like Ctrl-C does
    forced = start_grid(grid, results, mnist_dir, mark, "--force", "--batch", "64")
    assert "b64" in interrupt(forced, results, mark, signal.SIGTERM)


# A model file that starts processes at import (each carries the test's mark): one in its own
# process group, one in a session of its own (beyond the group's reach), one in a session of its
# own with an environment of the mark alone (beyond the reach of a cell's token too); and, in the
# process PHASE names (its describer, or the worker of the dry run's probe cell), says so in
# READY and sleeps.
SPAWNING = """import os, pathlib, subprocess, sys, time
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
subprocess.Popen(SLEEP)
subprocess.Popen(SLEEP, start_new_session=True)
subprocess.Popen(SLEEP, start_new_session=True,
                 env={"XBENCH_TEST_MARK": os.environ.get("XBENCH_TEST_MARK", "")})
if "PHASE" in sys.argv[0]:
    pathlib.Path("READY").touch()
    time.sleep(600)


def pytorch():
    from torch import nn
    return {"model": nn.Linear(8, 3), "inputs": ((8,), "float32"), "classes": 3}
"""


def dry_run_of(model, tmp_path):
    return ["grid", "--preset", "smoke", "--model", model, "--data", "synthetic", "--backend",
            "pt-ddp", "--devices", "1", "--results", tmp_path / "r.jsonl", "--dry-run", "--probe"]


@pytest.mark.processes(
    "a model file is described, and its dry run measured, in processes of its own")
def test_a_model_files_processes_end_with_its_describers_and_probe(tmp_path, mark):
    """Each describer, and the dry run's probe cell, is ended with what it started: what the
    file started at import is gone when the dry run has its answer, also in a session of its
    own (it once outlived xbench, under init)."""
    path = tmp_path / "model.py"
    path.write_text(SPAWNING.replace("PHASE", "no such process"))
    done = xbench_here(*dry_run_of(path, tmp_path),
                       env={"XBENCH_TEST_MARK": mark, "XBENCH_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0 and "1 to run" in done.stdout, done.stderr
    assert_none_left(mark, within=30)


@pytest.mark.parametrize("phase", ["user_model", "worker"])
def test_sigterm_while_a_model_file_is_described_or_probed_is_ctrl_c(phase, tmp_path, mark):
    """SIGTERM while PyTorch's describer imports the file (or the dry run's probe does): exit
    130 with the interrupted line, as Ctrl-C, and no process of the command is left."""
    ready = tmp_path / "ready"
    path = tmp_path / "model.py"
    path.write_text(SPAWNING.replace("PHASE", phase).replace("READY", str(ready)))
    driver = subprocess.Popen([*XBENCH, *map(str, dry_run_of(path, tmp_path))], cwd=REPO,
                              env=environment(mark, XBENCH_CACHE=str(tmp_path / "cache")),
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(f"the {phase} process to import the file", ready.exists)
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=SLOW)
    assert driver.returncode == 130, stderr
    assert "interrupted: what was running was stopped" in stderr and "Traceback" not in stderr
    assert_none_left(mark, within=30)


# --- a rank killed, a runner killed, a rank hung ------------------------------------------------

def test_a_killed_rank_fails_its_cell_and_a_killed_runner_leaves_nothing(shared_results, mnist_dir,
                                                                          tmp_path, mark):
    """SIGKILL rank 1 of a 2-process pt-ddp cell mid-training: that cell is 'failed' with the last
    lines of its log and the next cell starts. SIGKILL the runner during that next cell: its
    processes end too (they die with the runner), every row written before is intact, and the
    next grid removes the scratch folder (TMPDIR) the killed one left."""
    results = tmp_path / "results.jsonl"
    shutil.copy(shared_results[0], results)
    before = results.read_text()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    driver = start_grid(write_grid(tmp_path, batches=[128, 64], **LONG_CELL), results,
                        mnist_dir, mark, env=environment(mark, TMPDIR=str(temporary)))

    os.kill(training_rank(driver, results, mark, rank=1), signal.SIGKILL)
    wait_for("the failed row", lambda: len(results.read_text().splitlines()) == 3)
    training_rank(driver, results, mark, rank=1)  # the grid went on: the next cell trains
    driver.kill()
    driver.communicate(timeout=SLOW)
    assert_none_left(mark)

    assert results.read_text().startswith(before)
    rows, problems = read_rows(results)
    assert problems == [] and len(rows) == 3
    failed = rows[-1]
    assert (failed["status"], failed["global_batch"], failed["devices"]) == ("failed", 128, 2)
    assert "Last lines of" in failed["error"] and "SIGKILL" in failed["error"]
    assert failed["cell_seconds"] < SLOW  # ended well within its timeout, by itself

    left = list(temporary.glob("xbench-cell-*"))
    assert len(left) == 1  # the killed cell's
    code, stdout, _ = run_grid(write_grid(tmp_path, batches=[64], **TEST_SLICE), results,
                               mnist_dir, mark, env=environment(mark, TMPDIR=str(temporary)))
    assert code == 0 and "done in" in stdout  # nothing trained: its cell had a row already
    assert f"removed {left[0]}: the scratch folder of a cell whose grid was killed" in stdout
    assert not list(temporary.glob("xbench-cell-*"))


def test_a_hung_rank_is_a_timeout_and_its_whole_group_is_killed(mnist_dir, tmp_path, mark):
    """SIGSTOP rank 1 (it stops taking part in all-reduce): rank 0 waits in the collective until
    the cell's timeout (30 s: room for the ranks to start on a busy machine), then every process
    of the cell is killed."""
    results = tmp_path / "results.jsonl"
    driver = start_grid(write_grid(tmp_path, timeout=30, **LONG_CELL), results, mnist_dir, mark)
    os.kill(training_rank(driver, results, mark, rank=1), signal.SIGSTOP)
    stdout, stderr = driver.communicate(timeout=SLOW)
    assert driver.returncode == 3, stderr  # a cell timed out
    assert_none_left(mark, within=10)
    [row] = read_rows(results)[0]
    assert row["status"] == "timeout", row["error"]
    assert "timeout of 30 s" in row["error"] and row["cell_seconds"] >= 30


# --- out of memory -------------------------------------------------------------------------------

def test_out_of_memory_is_a_clean_result_and_the_sweep_goes_on(mnist_dir, tmp_path, mark):
    """With 700 MB for training per worker, a global batch of 8192 on 2 ranks cannot fit (its
    first convolution's output and that output's ReLU are 400 MB each per rank): the cell is 'oom'
    with its batch and devices; the next, smaller batch runs fine (it needs about 400 MB)."""
    results = tmp_path / "results.jsonl"
    grid = write_grid(tmp_path, backends=["pt-ddp"], devices=[2], batches=[8192, 128],
                      max_train_samples=8192, memory_limit_mb=700, **TEST_SLICE)
    returncode, stdout, stderr = run_grid(grid, results, mnist_dir, mark)
    assert returncode == 0, stderr
    oom, ok = read_rows(results)[0]
    assert oom["status"] == "oom", oom["error"]
    assert "can't allocate memory" in oom["error"]
    assert (oom["global_batch"], oom["per_device_batch"], oom["devices"]) == (8192, 4096, 2)
    assert oom["memory_limit_mb"] == 700
    assert ok["status"] == "ok", ok["error"]
    assert "OOM: RuntimeError" in stdout


def test_tensorflow_under_a_memory_limit_ends_oom_and_the_sweep_stops(tmp_path, mnist_dir):
    temporary = tmp_path / "tmp"  # the run's temporary folder, where TensorFlow's autograph
    temporary.mkdir()  # modules would be left behind but for each cell's folder of its own
    done = xbench("grid", "--preset", "smoke", "--backend", "tf-single", "--devices", "1",
                  "--batch-sweep", "256x4", "--memory-limit-mb", "300", "--max-train-samples",
                  "4096", "--data-dir", mnist_dir, "--results", tmp_path / "r.jsonl",
                  env={**os.environ, "TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = [r["status"] for r in sorted(read_rows(tmp_path / "r.jsonl")[0],
                                            key=lambda r: r["global_batch"])]
    assert statuses[-1] == "oom" and "failed" not in statuses, statuses
    assert not list(temporary.iterdir())  # each cell's folder went with it, and all it held


def test_a_cell_too_large_for_the_machine_is_an_oom_row_that_never_started(mnist_dir, tmp_path):
    """The large model at a global batch of 60,000 on one device: about 250 GiB of activations."""
    done = xbench("grid", write_grid(tmp_path, backends=["pt-single"], models=["large"],
                                     batches=[60000], max_train_samples=0),
                  "--data-dir", mnist_dir, "--results", tmp_path / "r.jsonl")
    assert done.returncode == 0, done.stderr  # oom is a result
    [row] = read_rows(tmp_path / "r.jsonl")[0]
    assert row["status"] == "oom" and row["error"].startswith("not started: this cell needs about")
    assert row["log"] is None and row["cell_seconds"] < 5


# --- the exit code says whether every cell finished ---------------------------------------------

def test_a_grid_whose_cells_time_out_exits_non_zero(mnist_dir, tmp_path):
    done = xbench("grid", write_grid(tmp_path, backends=["pt-single"], timeout=1), "--data-dir",
                  mnist_dir, "--results", tmp_path / "r.jsonl")
    assert done.returncode == 3, done.stderr
    assert "1 cell(s) failed or timeout" in done.stderr
    assert [r["status"] for r in read_rows(tmp_path / "r.jsonl")[0]] == ["timeout"]


# --- a backend that is not installed -------------------------------------------------------------

HIDE_PACKAGES = '''"""Test helper: TensorFlow and Horovod look uninstalled to this interpreter and
its children (None in sys.modules: find_spec says absent, import raises ModuleNotFoundError)."""
import sys

sys.modules.update(dict.fromkeys(["tensorflow", "horovod"]))
'''


def test_a_missing_backend_makes_unsupported_rows_and_the_rest_runs(mnist_dir, tmp_path, mark):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_PACKAGES)
    results = tmp_path / "results.jsonl"
    grid = write_grid(tmp_path, backends=["tf-mirrored", "hvd-torch", "hvd-tf", "pt-dp"],
                      **TEST_SLICE)
    returncode, stdout, stderr = run_grid(grid, results, mnist_dir, mark,
                                          env=environment(mark, PYTHONPATH=str(hide)))
    assert returncode == 0, stderr
    rows = {r["backend"]: r for r in read_rows(results)[0]}
    for name, module in (("tf-mirrored", "tensorflow"), ("hvd-torch", "horovod"),
                         ("hvd-tf", "horovod")):
        assert rows[name]["status"] == "unsupported", rows[name]["error"]
        assert module in rows[name]["error"] and "install" in rows[name]["error"]
    assert rows["pt-dp"]["status"] == "ok", rows["pt-dp"]["error"]


def test_more_gpus_than_the_machine_has_are_unsupported_rows(mnist_dir, tmp_path, mark):
    """16 CUDA devices: no CI machine has them (a CPU one has none)."""
    results = tmp_path / "results.jsonl"
    returncode, stdout, stderr = run_grid(write_grid(tmp_path, devices=[16], device="cuda"),
                                          results, mnist_dir, mark)
    assert returncode == 0, stderr
    [row] = read_rows(results)[0]
    assert row["status"] == "unsupported" and "CUDA" in row["error"], row["error"]
