"""tf-mirrored, from the smoke run (1 and 2 logical CPU devices on real MNIST), next to the pt-ddp
row of the same cell; and the tf.data pipeline against PyTorch's loader, batch by batch."""
import numpy as np
import pytest
import torch

from tests.helpers import SMOKE_SLICE as SLICE
from xbench.common.workload.samples import Images
from xbench.pt_backend import data as pt_data
from xbench.pt_backend import train as pt_train
from xbench.tf_backend import pipeline as tf_pipeline
from xbench.tf_backend.collectives import OneTensorFlowProcess

# What may differ between a tf-mirrored and a pt-ddp row of one cell: backend fields and
# measurements.
BACKEND_FIELDS = {"run_id", "cell_key", "started_at", "finished_at", "backend", "framework",
                  "framework_version", "log", "cell_seconds", "backend_details", "env", "threads",
                  "attribution"}
# model_state_per_device: counted on each framework's own optimizer state
MEASUREMENTS = {"epochs", "startup_seconds", "step_time_p50", "step_time_p90", "test_accuracy",
                "test_loss", "peak_memory_bytes", "peak_memory_per_device", "contended", "evidence",
                "hosts", "model_state_per_device", "warmup_seconds"}


@pytest.fixture(scope="module")
def rows(smoke):
    return smoke.rows


def test_two_logical_devices_train_one_mirrored_model(rows):
    row = rows[("tf-mirrored", 2)]
    assert row["status"] == "ok", row["error"]
    details = row["backend_details"]
    assert details["num_replicas_in_sync"] == 2 and details["world_size"] == 1
    assert details["replica_devices"] == ["/job:localhost/replica:0/task:0/device:CPU:0",
                                          "/job:localhost/replica:0/task:0/device:CPU:1"]
    assert details["cross_device_ops"] == "ReductionToOneDevice"
    assert details["reduction"] == "reduce-to-one"  # not a ring: no ring bus bandwidth for it
    digests = row["evidence"]["replica_weight_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]  # the mirrored copies ended identical
    assert row["evidence"]["shard_overlap"] == [0, 0]
    # both replicas of the one process recorded what they consumed, and they differ
    assert len(set(row["evidence"]["replica_sample_digests"][0]) |
               set(row["evidence"]["replica_sample_digests"][1])) == 4
    assert row["per_device_batch"] == 64 and row["global_batch"] == 128


def test_one_device_is_a_one_device_mirrored_strategy(rows):
    row = rows[("tf-mirrored", 1)]
    assert row["status"] == "ok", row["error"]
    details = row["backend_details"]
    assert details["parallelism"] == "tf.distribute.MirroredStrategy"
    assert details["num_replicas_in_sync"] == 1 and details["reduction"] == "none"
    assert details["replica_devices"] == ["/job:localhost/replica:0/task:0/device:CPU:0"]
    assert len(row["evidence"]["replica_weight_digests"]) == 1
    plain = rows[("tf-single", 1)]["backend_details"]
    assert plain["parallelism"].startswith("none") and "cross_device_ops" not in plain


def test_tensorflow_version_is_recorded(rows):
    row = rows[("tf-mirrored", 2)]
    assert row["framework"] == "tensorflow"
    packages = row["env"]["packages"]
    assert row["framework_version"] == packages.get("tensorflow", packages.get("tensorflow-cpu"))


def test_same_cell_learns_the_same_on_one_and_two_devices(rows):
    """Same seed, same global batches, gradients of the global batch's mean: one trajectory."""
    one, two = rows[("tf-mirrored", 1)], rows[("tf-mirrored", 2)]
    for a, b in zip(one["epochs"], two["epochs"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=2 / SLICE)
    assert one["epochs"][1]["loss"] < one["epochs"][0]["loss"]
    assert one["test_accuracy"] > 0.8  # learning on real digits, not noise
    assert abs(one["test_accuracy"] - two["test_accuracy"]) < 0.01


def test_tf_and_torch_rows_of_one_cell_differ_only_in_backend_fields_and_measurements(rows):
    tf_row, torch_row = rows[("tf-mirrored", 2)], rows[("pt-ddp", 2)]
    assert torch_row["status"] == "ok", torch_row["error"]
    assert tf_row.keys() == torch_row.keys()
    differing = {k for k in tf_row if tf_row[k] != torch_row[k]}
    assert differing <= BACKEND_FIELDS | MEASUREMENTS
    assert tf_row["env"].keys() == torch_row["env"].keys()
    assert [e.keys() for e in tf_row["epochs"]] == [e.keys() for e in torch_row["epochs"]]
    assert [e["samples"] for e in tf_row["epochs"]] == [e["samples"] for e in torch_row["epochs"]]


def test_tf_data_yields_pytorchs_global_batches(mnist):
    """Epoch e's global batch k is the same samples, normalised the same, in both frameworks
    (multiple 2), and both pipelines hand the loop the same sample indices."""
    data = Images(mnist.train_images[:300], mnist.train_labels[:300], mnist.test_images,
                  mnist.test_labels, mnist.dataset, mnist.source, mnist.layout)
    dataset = pt_data.TrainSet(data.train_images, data.train_labels, multiple=2)
    sampler = pt_data.EpochShardSampler(dataset, global_batch=128, seed=7, rank=0, world=1,
                                         replicas=1)
    sampler.set_epoch(2)
    torch_batches = list(torch.utils.data.DataLoader(dataset, batch_size=128, sampler=sampler,
                                                     drop_last=True, collate_fn=lambda b: b))
    pipeline = tf_pipeline.TrainPipeline(data, multiple=2, global_batch=128, seed=7,
                                         comm=OneTensorFlowProcess(), threads=1, replicas=1)
    tf_batches = list(pipeline.dataset(epochs=2).as_numpy_iterator())[pipeline.steps_per_epoch:]
    assert len(tf_batches) == len(torch_batches) == 600 // 128 == pipeline.steps_per_epoch
    for (tf_images, tf_labels, tf_indices), (torch_images, torch_labels, torch_indices) in zip(
            tf_batches, torch_batches):
        assert np.array_equal(tf_indices, torch_indices.numpy())  # the evidence both record
        assert np.array_equal(tf_labels, torch_labels.numpy())
        torch_nhwc = pt_train.normalise(torch_images, data.mean, data.std).numpy()
        torch_nhwc = torch_nhwc.transpose(0, 2, 3, 1)
        assert np.abs(tf_images - torch_nhwc).max() < 1e-6
