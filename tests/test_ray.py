"""Cells on a Ray cluster, as on Slurm: a real Ray cluster of two nodes started on this machine for
the module (tests/ray_cluster.py: each node a network namespace of its own, one CPU each), the real
`xbench grid --launcher ray`. Every backend that spans processes on two nodes (one trajectory,
one device's on one machine), hvd-* unsupported with the reason (horovodrun would ssh to the
other node); a killed rank, a lost Ray worker, a killed grid and a timeout each a row that says so
or nothing left, the killed rank's cell run again by the next grid; a capped link capping each
node's link; and nothing left on the cluster or the machine after any of them.

Every grid runs with XBENCH_TEST_MARK=<a fresh id> in its environment, which the runner passes on
to every rank (tests/test_faults.py), so a test finds its ranks and checks that none is left.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from importlib.metadata import version

import psutil
import pytest

from tests.helpers import REPO, SLOW, XBENCH, write_grid, xbench
from tests.ray_cluster import ENVIRONMENT, RAY, two_nodes
from tests.test_faults import marked, training, wait_for
from xbench.common.results.store import read_rows

SLICE = 1024  # 8 steps an epoch at batch 128
SPANNING = ["pt-ddp", "tf-multiworker", "hvd-torch", "hvd-tf", "jax-multiprocess"]
TRAINED = ["pt-ddp", "tf-multiworker", "jax-multiprocess"]
LINK = "link=40mbit"  # 5 MB/s: 0.3 s a step for the small model's 1.6 MB of gradients per node
TWO_NODES = {"nodes": [2], "devices": [1], "max_train_samples": SLICE, "max_test_samples": 1000}
# a pt-ddp cell on two nodes whose steps wait for their batches: minutes, unless stopped
WAITING = {**TWO_NODES, "backends": ["pt-ddp"], "epochs": 1000, "inject": ["input-delay=1000"]}


@pytest.fixture(scope="module")
def cluster():
    with two_nodes() as nodes:
        yield nodes


def grid_command(cluster, grid, results, mnist_dir, *options) -> list[str]:
    return [*XBENCH, "grid", str(grid), "--data-dir", str(mnist_dir), "--results", str(results),
            "--launcher", "ray", "--ray-address", cluster.address, *map(str, options)]


def environment(mark: str) -> dict:
    return {**ENVIRONMENT, "XBENCH_TEST_MARK": mark}


def run_grid(cluster, folder, mnist_dir, *options, mark="", **settings):
    results = folder / "results.jsonl"
    done = subprocess.run(grid_command(cluster, write_grid(folder, **settings), results,
                                       mnist_dir, *options),
                          cwd=REPO, env=environment(mark or uuid.uuid4().hex),
                          capture_output=True, text=True, timeout=SLOW)
    return done, results


def assert_nothing_left(cluster, mark: str = "") -> None:
    """No rank of the test's (`mark`), no agent of a cell and no bundle held on the cluster, once
    what ends them has had its time (Ray ends a dead grid's actors and groups on its own)."""
    def agents():
        return [p.pid for p in psutil.process_iter(["cmdline"])
                if (p.info["cmdline"] or [""])[0].startswith("ray::NodeAgent")]

    def status():
        return subprocess.run([RAY, "status", "--address", cluster.address], capture_output=True,
                              text=True, env=ENVIRONMENT, timeout=SLOW).stdout
    wait_for("every process of the cell to end", lambda: not (mark and marked(mark)), timeout=60)
    wait_for("every agent to end", lambda: not agents(), timeout=60)
    wait_for("the cluster's CPUs free", lambda: " 0.0/2.0 CPU" in status(), timeout=60)
    assert "(no resource demands)" in status()


@pytest.fixture(scope="module")
def spanning(cluster, mnist_dir, tmp_path_factory):
    """One grid on 2 Ray nodes of every backend that spans nodes, and pt-dp, which cannot: what
    it printed, and its rows by backend."""
    done, results = run_grid(cluster, tmp_path_factory.mktemp("spanning"), mnist_dir,
                             backends=["pt-dp", *SPANNING], **TWO_NODES)
    return done, {row["backend"]: row for row in read_rows(results)[0]}


@pytest.fixture(scope="module")
def on_one_machine(mnist_dir, tmp_path_factory):
    """The same cell's reference here, without Ray: PyTorch on one device, one process."""
    folder = tmp_path_factory.mktemp("one")
    done = xbench("grid", write_grid(folder, backends=["pt-single"], **{**TWO_NODES, "nodes": [1]}),
                  "--data-dir", mnist_dir, "--results", folder / "results.jsonl")
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = read_rows(folder / "results.jsonl")[0]
    return row


def test_every_backend_that_spans_nodes_trains_one_model_on_two_ray_nodes(cluster, spanning,
                                                                          on_one_machine):
    """On two Ray nodes, the trajectory of one device on one machine: the same losses."""
    done, rows = spanning
    assert done.returncode == 0, done.stdout + done.stderr
    losses = []
    for backend in TRAINED:
        row = rows[backend]
        assert row["status"] == "ok", f"{backend}: {row['error']}"
        assert ((row["launcher"], row["nodes"], row["devices"], row["world_size"])
                == ("ray", 2, 1, 2))
        assert sorted(row["hosts"]) == list(cluster.nodes), backend  # a rank on each node
        for epoch in row["epochs"]:  # each rank watched the cores of its own node
            assert [r["node"] for r in epoch["contention"]["per_rank"]] == row["hosts"], backend
        digests = row["evidence"]["replica_weight_digests"]
        assert len(digests) == 2 and len(set(digests)) == 1, backend
        assert row["threads_per_device"] == 1  # each node has one CPU
        losses.append(row["epochs"][-1]["loss"])
        # where it ran: Ray's version, each node, its resources and the bundle the cell held
        assert (row["cluster"]["launcher"], row["cluster"]["version"]) == ("ray", version("ray"))
        assert row["env"]["packages"]["ray"] == version("ray")
        nodes = row["cluster"]["nodes"]
        assert sorted(node["address"] for node in nodes) == list(cluster.nodes)
        assert all(node["resources"]["CPU"] == 1 and node["bundle"] == {"CPU": 1}
                   for node in nodes)
    losses.append(on_one_machine["epochs"][-1]["loss"])
    assert max(losses) - min(losses) < 1e-4 * max(losses)  # one trajectory, on 1 node or 2
    assert rows["pt-ddp"]["backend_details"]["launcher"] == "torchrun (c10d rendezvous)"
    assert rows["jax-multiprocess"]["backend_details"]["collective_library"] == "jax gloo"
    assert rows["pt-dp"]["status"] == "unsupported"
    assert "pt-dp runs on one machine: it cannot span 2 nodes" in rows["pt-dp"]["error"]
    assert_nothing_left(cluster)


@pytest.mark.parametrize("backend", ["hvd-torch", "hvd-tf"])
def test_horovod_where_horovodrun_cannot_reach_the_other_node_is_unsupported(spanning, backend):
    row = spanning[1][backend]
    assert row["status"] == "unsupported", row["error"]
    assert ("horovodrun starts the ranks of another node over ssh, and the Ray node at"
            in row["error"] and "cannot ssh to" in row["error"])
    assert len(row["cluster"]["nodes"]) == 2  # it was placed: the nodes it would have run on


def test_the_launcher_sees_each_node_as_ray_does(cluster):
    """Its nodes, their cores (Ray's CPUs, not the machine's), and the load look on each node
    (the machine's cores there)."""
    code = ("import json\n"
            "from xbench.common.running.ray_cluster import RayLauncher\n"
            f"launcher = RayLauncher({cluster.address!r})\n"
            "look = launcher.load()\n"
            "print(json.dumps([sorted(n.name for n in launcher.connect()), launcher.cores, "
            "look.where, look.cores]))\n"
            "launcher.close()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=ENVIRONMENT, cwd=REPO, timeout=SLOW)
    assert done.returncode == 0, done.stderr
    names, cores, where, machine_cores = json.loads(done.stdout.splitlines()[-1])
    assert names == list(cluster.nodes) and cores == 1
    assert where.startswith("Ray node ") and where.endswith(", the busiest of 2"), where
    assert machine_cores == psutil.cpu_count()


def test_a_killed_rank_fails_its_cell_and_the_next_grid_runs_it_again(cluster, mnist_dir,
                                                                       tmp_path):
    mark = uuid.uuid4().hex
    grid = write_grid(tmp_path, **{**WAITING, "epochs": 2, "inject": ["input-delay=300"]})
    results = tmp_path / "results.jsonl"
    command = grid_command(cluster, grid, results, mnist_dir)
    driver = subprocess.Popen(command, cwd=REPO, env=environment(mark), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rank, _ = training(driver, results, mark, "RANK=1")
    os.kill(rank, signal.SIGKILL)
    driver.communicate(timeout=SLOW)
    assert driver.returncode == 3  # a cell failed
    assert_nothing_left(cluster, mark)
    [failed] = read_rows(results)[0]
    assert failed["status"] == "failed" and "Last lines of" in failed["error"], failed["error"]
    assert failed["cluster"]["launcher"] == "ray"

    again = subprocess.run(command, cwd=REPO, env=environment(mark), capture_output=True,
                           text=True, timeout=SLOW)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [row["status"] for row in read_rows(results)[0]] == ["failed", "ok"]
    assert_nothing_left(cluster, mark)


def test_a_lost_ray_worker_fails_its_cell_with_the_reason(cluster, mnist_dir, tmp_path):
    """SIGKILL the Ray worker (a node's agent) whose torchrun started a rank: the row says Ray
    lost it, and every process of the cell ends, on both nodes."""
    mark = uuid.uuid4().hex
    results = tmp_path / "results.jsonl"
    driver = subprocess.Popen(grid_command(cluster, write_grid(tmp_path, **WAITING), results,
                                           mnist_dir), cwd=REPO, env=environment(mark),
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rank, _ = training(driver, results, mark, "RANK=1")
    agent = next(p for p in psutil.Process(rank).parents()
                 if p.cmdline()[0].startswith("ray::NodeAgent"))
    agent.send_signal(signal.SIGKILL)
    driver.communicate(timeout=SLOW)
    assert driver.returncode == 3
    assert_nothing_left(cluster, mark)
    [row] = read_rows(results)[0]
    assert row["status"] == "failed", row["error"]
    assert row["error"].startswith("Ray lost the worker that ran the cell's processes on node")


def test_a_grid_killed_mid_cell_leaves_nothing_on_the_cluster(cluster, mnist_dir, tmp_path):
    """SIGKILL the grid itself: Ray ends its agents and its placement group, and each node's
    reaper ends the ranks its lost agent started (torchrun's among them)."""
    mark = uuid.uuid4().hex
    results = tmp_path / "results.jsonl"
    driver = subprocess.Popen(grid_command(cluster, write_grid(tmp_path, **WAITING), results,
                                           mnist_dir), cwd=REPO, env=environment(mark),
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    training(driver, results, mark, "RANK=1")
    driver.kill()
    driver.communicate(timeout=SLOW)
    assert_nothing_left(cluster, mark)
    assert not results.exists()


def test_a_cell_past_its_timeout_is_a_timeout_row_and_ends_on_every_node(cluster, mnist_dir,
                                                                         tmp_path):
    mark = uuid.uuid4().hex
    done, results = run_grid(cluster, tmp_path, mnist_dir, mark=mark, timeout=10, **WAITING)
    assert done.returncode == 3, done.stdout + done.stderr
    assert_nothing_left(cluster, mark)
    [row] = read_rows(results)[0]
    assert row["status"] == "timeout" and "timeout of 10 s" in row["error"], row["error"]
    assert row["cell_seconds"] >= 10


def test_a_capped_link_caps_what_each_node_sends(cluster, spanning, mnist_dir, tmp_path):
    """Each node's interface capped (tc's token bucket, in its namespace): a ring of 2 ranks
    sends half its step's traffic from each node, so the step's collectives last that over the
    rate; the same cell uncapped (the spanning grid's) is several times faster; the caps are
    lifted after."""
    done, results = run_grid(cluster, tmp_path, mnist_dir, backends=["pt-ddp"], inject=[LINK],
                             contention_limit=1.0, **TWO_NODES)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = read_rows(results)[0]
    traffic = sum(item["bytes"] for item in row["backend_details"]["traffic"])
    predicted = traffic / 2 / 5e6

    def counted(row):
        return max(rank["collective"]["moving_median"]
                   for rank in row["attribution"]["epochs"][-1]["ranks"])
    assert 0.7 * predicted <= counted(row) <= 2.5 * predicted, (counted(row), predicted)
    assert counted(row) > 3 * counted(spanning[1]["pt-ddp"])  # the cap, not the machine
    for namespace in cluster.namespaces:
        queues = subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "show"],
                                capture_output=True, text=True).stdout
        assert "tbf" not in queues, queues
    assert_nothing_left(cluster)


def test_bad_input_is_refused_before_anything_runs(cluster, mnist_dir, tmp_path):
    done = xbench("grid", write_grid(tmp_path, backends=["pt-ddp"], nodes=[4], devices=[1]),
                  "--data-dir", mnist_dir, "--launcher", "ray", "--ray-address", cluster.address,
                  "--results", tmp_path / "results.jsonl", env=ENVIRONMENT)
    assert done.returncode == 2, done.stderr
    assert f"--nodes 4 is more than the Ray cluster at {cluster.address} has (2 node(s)" in \
        done.stderr
    done = xbench("grid", write_grid(tmp_path), "--data-dir", mnist_dir, "--launcher", "ray",
                  "--ray-address", "127.0.0.1:9", "--results", tmp_path / "results.jsonl",
                  env=ENVIRONMENT)
    assert done.returncode == 2 and "cannot reach the Ray cluster at 127.0.0.1:9" in done.stderr
    assert not (tmp_path / "results.jsonl").exists()


def test_without_an_address_the_grid_starts_a_ray_of_its_own_and_ends_it(mnist_dir, tmp_path):
    """A dry run: a Ray of one node here, asked what runs (a capped link on one node does not:
    it crosses no node's link), then ended with the grid; the module's cluster's stay."""
    def raylets():
        return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "raylet"}
    before = raylets()
    with tempfile.TemporaryDirectory(prefix="xbray-", dir="/tmp") as ray_folder:  # short paths
        done = xbench("grid", write_grid(tmp_path, backends=["pt-ddp"], devices=[2],
                                         inject=["none", LINK]),
                      "--data-dir", mnist_dir, "--launcher", "ray", "--dry-run",
                      env={**ENVIRONMENT, "RAY_TMPDIR": ray_folder})
    assert done.returncode == 0, done.stderr
    assert "unsupported: inject link: on Ray the cap is each node's link" in done.stdout
    assert "1 unsupported here, 1 to run" in done.stdout
    wait_for("the grid's own Ray to end", lambda: raylets() <= before, timeout=60)
