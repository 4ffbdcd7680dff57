"""hvd-torch and hvd-tf, from the smoke run: 2 processes launched by horovodrun over gloo."""
import subprocess
import sys

import pytest

from tests.helpers import REPO, xbench_here
from xbench.common.backends.start import horovod_described


@pytest.fixture(scope="module")
def rows(smoke):
    return {backend: row for (backend, devices), row in smoke.rows.items() if devices == 2}


@pytest.mark.parametrize("backend", ["hvd-torch", "hvd-tf"])
def test_every_rank_ends_with_the_same_weights(rows, backend):
    """The check that catches Keras 3's silent failure (replicas that never average)."""
    row = rows[backend]
    assert row["status"] == "ok", row["error"]
    details = row["backend_details"]
    assert details["hvd_size"] == 2 and details["controller"] == "gloo"
    assert details["horovod_version"] == "0.28.1" and details["reduction"] == "all-reduce"
    digests = row["evidence"]["replica_weight_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert row["evidence"]["shard_overlap"] == [0, 0]
    assert len(row["epochs"][1]["seconds_per_rank"]) == 2


@pytest.mark.parametrize("backend", ["hvd-torch", "hvd-tf"])
def test_size_one_says_horovod_skips_its_all_reduce(smoke, backend):
    details = smoke.rows[(backend, 1)]["backend_details"]
    assert details["hvd_size"] == 1 and details["reduction"] == "none"
    assert "skips its all-reduce at size 1" in details["reduction_detail"]


@pytest.mark.parametrize("horovod_backend, native",
                         [("hvd-torch", "pt-ddp"), ("hvd-tf", "tf-mirrored")])
def test_horovod_trains_what_the_native_backend_trains(rows, horovod_backend, native):
    """Same seed, same global batches, gradients averaged: the same losses as the framework's own
    data-parallel backend (a Horovod that did not average would drift away)."""
    for a, b in zip(rows[horovod_backend]["epochs"], rows[native]["epochs"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
    assert rows[horovod_backend]["test_accuracy"] == pytest.approx(rows[native]["test_accuracy"],
                                                                   abs=0.01)


def test_backends_command_reports_what_horovod_was_built_for():
    assert horovod_described().endswith("built for PyTorch, TensorFlow")
    result = xbench_here("backends", env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    blocks = " ".join(result.stdout.split()).split(" needs ")  # each backend's what it needs
    for name, extension in (("hvd-torch", "horovod.torch.mpi_lib_v2"),
                            ("hvd-tf", "horovod.tensorflow.mpi_lib")):
        (block,) = [b for b in blocks if b.startswith(f"torch, {extension}")
                    or b.startswith(f"tensorflow, {extension}")]
        assert "installed (horovod 0.28.1 built for PyTorch, TensorFlow)" in block, name


def test_the_probe_times_horovod_s_all_reduce_as_the_training_runs_it():
    """`xbench probe` times HorovodTorchCollectives.sum: in place on the kept buffer, as
    DistributedOptimizer reduces a gradient, and done when a look at its handle says so, as
    HandleWatch times the training's. hvd.allreduce's fresh output and copy on every call, and
    hvd.synchronize's 1 ms naps, made the probe read slower than the same all-reduce in
    training. Real Horovod, one process (its all-reduce still runs through its background
    thread)."""
    script = """
import horovod.torch as hvd, torch
from xbench.pt_backend.hvd import HorovodTorchCollectives
hvd.init()
done_when_synchronized = []
synchronize = hvd.synchronize
hvd.synchronize = lambda handle: (done_when_synchronized.append(hvd.poll(handle)),
                                  synchronize(handle))[1]
hvd.allreduce = None  # out of place: never
buffer = torch.full((1024,), 3.0)
summed = HorovodTorchCollectives(hvd).sum(buffer)
print(summed is buffer, summed.tolist() == [3.0] * 1024, done_when_synchronized)
"""
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "True True [True]"
