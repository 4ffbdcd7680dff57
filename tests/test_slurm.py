"""Cells beyond one machine, on a real two-node Slurm cluster started on this machine
(scripts/slurm_cluster.sh: Debian's slurm-wlm and munge, installed if absent; node1 and node2,
one CPU each): multi-node cells of every backend that spans nodes, Slurm's time limit, Ctrl-C,
a rank that crashes, and the bad input refused before anything is submitted."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, SLOW, XBENCH, refused, write_grid, xbench_here
from xbench.common.results.probes import read_probes
from xbench.common.results.store import read_rows

CLUSTER = REPO / "scripts" / "slurm_cluster.sh"
SLICE = 1024
SPANNING = ["pt-ddp", "tf-multiworker", "hvd-torch", "hvd-tf", "jax-multiprocess"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The cluster, up for this module; the environment that reaches it."""
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "XBENCH_SLURM_DIR": str(state)}
    started = subprocess.run([str(CLUSTER), "start"], env=env, capture_output=True, text=True,
                             timeout=SLOW)
    assert started.returncode == 0, started.stderr
    env["SLURM_CONF"] = str(state / "slurm.conf")
    yield env
    subprocess.run([str(CLUSTER), "stop"], env=env, capture_output=True, timeout=SLOW)


def grid(slurm, folder, mnist_dir, *options, **settings):
    results = folder / "results.jsonl"
    done = subprocess.run([*XBENCH, "grid", str(write_grid(folder, **settings)), "--data-dir",
                           str(mnist_dir), "--results", str(results), "--launcher", "slurm",
                           *map(str, options)],
                          cwd=REPO, env=slurm, capture_output=True, text=True, timeout=SLOW)
    return done, results


def jobs(slurm):
    return subprocess.run(["squeue", "-h"], env=slurm, capture_output=True, text=True,
                          timeout=60).stdout.strip()


@pytest.fixture(scope="module")
def two_nodes(slurm, mnist_dir, tmp_path_factory):
    """One grid on 2 nodes: every backend that spans nodes, and pt-dp, which cannot (a mixed
    grid): what it printed, and its rows by backend. Evaluated on a tenth of the test set (1,000
    images, by rank 0 on one CPU): no test reads a test accuracy."""
    done, results = grid(slurm, tmp_path_factory.mktemp("nodes"), mnist_dir,
                         backends=["pt-dp", *SPANNING], nodes=[2], devices=[1],
                         max_train_samples=SLICE, max_test_samples=1000)
    return done, {r["backend"]: r for r in read_rows(results)[0]}


def test_every_backend_that_spans_nodes_trains_one_model_on_two_nodes(slurm, two_nodes):
    done, rows = two_nodes
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {backend: row for backend, row in rows.items() if backend in SPANNING}
    assert set(rows) == set(SPANNING)
    losses = []
    for backend, row in rows.items():
        assert row["status"] == "ok", f"{backend}: {row['error']}"
        assert ((row["launcher"], row["nodes"], row["devices"], row["world_size"])
                == ("slurm", 2, 1, 2))
        # one rank on each node (which node gets rank 0 is the rendezvous' choice)
        assert sorted(row["hosts"]) == ["node1", "node2"], backend
        for epoch in row["epochs"]:  # each rank watched the cores of its own node
            assert [r["node"] for r in epoch["contention"]["per_rank"]] == row["hosts"], backend
        digests = row["evidence"]["replica_weight_digests"]
        assert len(digests) == 2 and len(set(digests)) == 1, backend
        assert row["evidence"]["shard_overlap"] == [0, 0]
        assert row["threads_per_device"] == 1  # each node has one CPU
        losses.append(row["epochs"][-1]["loss"])
    assert max(losses) - min(losses) < 1e-4 * max(losses)  # one trajectory on every backend
    assert rows["pt-ddp"]["backend_details"]["launcher"] == "torchrun (c10d rendezvous)"
    assert rows["hvd-torch"]["backend_details"]["launcher"] == "horovodrun --gloo, 2 host(s)"
    assert rows["jax-multiprocess"]["backend_details"]["collective_library"] == "jax gloo"
    assert jobs(slurm) == ""


def test_slurms_time_limit_makes_a_timeout_row(slurm, mnist_dir, tmp_path):
    """One minute of Slurm time for a cell that would train for long: Slurm ends it (within its
    ~30 s check interval), and the row says so. Each of its batches arrives a second late, so
    that its minutes wait rather than take the cores the suite's other tests need."""
    done, results = grid(slurm, tmp_path, mnist_dir, "--slurm-time", 1, backends=["pt-ddp"],
                         nodes=[2], devices=[1], epochs=1000, max_train_samples=SLICE,
                         inject=["input-delay=1000"], timeout=600)
    assert done.returncode == 3, done.stderr
    [row] = read_rows(results)[0]
    assert row["status"] == "timeout" and "Slurm's time limit ended the job" in row["error"]
    assert 55 < row["cell_seconds"] < 300
    assert jobs(slurm) == ""


def test_ctrl_c_cancels_the_cells_job(slurm, mnist_dir, tmp_path):
    results = tmp_path / "results.jsonl"
    driver = subprocess.Popen(
        [*XBENCH, "grid", str(write_grid(tmp_path, backends=["pt-ddp"], nodes=[2], devices=[1],
                                         epochs=1000, max_train_samples=SLICE)),
         "--data-dir", str(mnist_dir), "--results", str(results), "--launcher", "slurm"],
        cwd=REPO, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + SLOW
    while " R " not in f" {jobs(slurm)} " and time.monotonic() < deadline:
        assert driver.poll() is None, driver.communicate()
        time.sleep(1)
    time.sleep(3)
    driver.send_signal(signal.SIGINT)
    _, stderr = driver.communicate(timeout=SLOW)
    assert driver.returncode == 130 and "interrupted" in stderr, stderr
    assert jobs(slurm) == ""
    assert not results.exists()  # no row, no half row


# A model file (Keras, its own data) whose rank 1 aborts, as glibc does on a corrupted heap, the
# first time it runs as a task of a Slurm job; the second time it trains.
ABORTING = """import os, pathlib
import numpy as np

if os.environ.get("SLURM_PROCID") == "1" and "XBENCH_PLACEMENT" in os.environ:
    marker = pathlib.Path(__file__).with_name("aborted")
    if not marker.exists():
        marker.touch()
        os.abort()


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((640, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return {"train": (x[:512], y[:512]), "test": (x[512:], y[512:])}


def keras():
    import keras
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    return {"model": model, "inputs": ((8,), "float32"), "classes": 2}
"""


def test_a_rank_that_aborts_is_a_crash_and_its_cell_runs_again(slurm, mnist_dir, tmp_path):
    """Rank 1 of a tf-multiworker cell aborts (SIGABRT); srun then kills rank 0 and answers
    with that rank's signal, not the abort. Each task recorded its own end, so the job's code is
    the abort's: the run is a crash, as it is on one machine, the cell runs again (`retries`,
    1) and trains, and the row keeps the crash."""
    model = tmp_path / "aborting.py"
    model.write_text(ABORTING)
    done, results = grid(slurm, tmp_path, mnist_dir, backends=["tf-multiworker"],
                         models=[str(model)], data="model", nodes=[2], devices=[1], batches=[64])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "aborted").exists()
    [row] = read_rows(results)[0]
    assert row["status"] == "ok", row["error"]
    [crash] = row["crashes"]
    assert crash.startswith("crashed: exit code 134 (a process killed by signal 6, Abort"), crash
    assert "xbench slurm_job: task 1 on node" in crash and "ended first, killed by signal 6" \
        in crash, crash
    assert jobs(slurm) == ""


@pytest.mark.parametrize("options, settings, message", [
    (["--slurm-partition", "gpu"], {}, "Slurm has no partition 'gpu'; it has debug"),
    ([], {"backends": ["pt-ddp"], "nodes": [4]},
     "--nodes 4 is more than partition 'debug' has (2)"),
    ([], {"backends": ["pt-dp", "tf-mirrored"], "nodes": [2]},
     "pt-dp, tf-mirrored cannot span nodes"),
])
def test_bad_input_is_refused_before_anything_is_submitted(options, settings, message, slurm,
                                                           mnist_dir, tmp_path):
    results = tmp_path / "results.jsonl"
    done = xbench_here("grid", write_grid(tmp_path, **settings), "--data-dir", mnist_dir,
                       "--results", results, "--launcher", "slurm", *options, env=slurm)
    refused(done, message)
    assert jobs(slurm) == "" and not results.exists()


def test_the_slurm_launcher_without_slurm_is_one_clear_message(mnist_dir, tmp_path):
    """Slurm's commands hidden: only the Python interpreter's folder on PATH."""
    done = xbench_here("grid", write_grid(tmp_path), "--data-dir", mnist_dir, "--launcher",
                       "slurm", env={"PATH": str(Path(sys.executable).parent)})
    refused(done, "--launcher slurm needs Slurm's commands")


def test_a_mixed_grid_records_what_cannot_span_nodes_as_unsupported(two_nodes):
    done, rows = two_nodes
    assert done.returncode == 0, done.stderr  # unsupported is a result
    assert rows["pt-dp"]["status"] == "unsupported"
    assert "pt-dp runs on one machine: it cannot span 2 nodes" in rows["pt-dp"]["error"]
    assert rows["pt-ddp"]["status"] == "ok", rows["pt-ddp"]["error"]  # the rest of it ran


def test_the_probe_measures_an_all_reduce_across_two_nodes(slurm, tmp_path):
    """`xbench probe --launcher slurm` goes through the grid's Slurm settings (it once crashed
    on the sbatch command): one all-reduce probe over node1 and node2, appended to probe.jsonl."""
    done = subprocess.run([*XBENCH, "probe", "--backend", "pt-ddp", "--devices", "1", "--nodes",
                           "2", "--launcher", "slurm", "--results-dir", str(tmp_path)],
                          cwd=REPO, env=slurm, capture_output=True, text=True, timeout=SLOW)
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = read_probes(tmp_path / "probe.jsonl")[0]
    assert record["not_measured"] == []
    measured = record["all_reduce"]
    assert measured and all((a["nodes"], a["world_size"]) == (2, 2) for a in measured)
    assert all(a["busbw"] > 0 and a["repeats"] > 0 for a in measured)
    assert jobs(slurm) == ""
