"""pt-dp and pt-ddp, from the smoke run (real processes on real MNIST)."""
import pytest


@pytest.fixture(scope="module")
def rows(smoke):
    return smoke.rows


def test_ddp_two_processes_train_one_model_over_gloo(rows):
    row = rows[("pt-ddp", 2)]
    assert row["status"] == "ok", row["error"]
    details = row["backend_details"]
    assert details["world_size"] == 2 and details["process_group"] == "gloo"
    assert details["launcher"] == "torchrun --standalone" and details["reduction"] == "all-reduce"
    digests = row["evidence"]["replica_weight_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]  # both ranks end with identical weights
    assert row["evidence"]["shard_overlap"] == [0, 0]      # ranks saw disjoint shards
    assert len(row["epochs"][0]["seconds_per_rank"]) == 2  # the slowest rank's time is the epoch's
    assert row["threads_per_device"] == max(1, rows[("pt-ddp", 1)]["threads_per_device"] // 2)
    assert row["env"]["packages"]["torch"].startswith("2.13")


def test_same_cell_learns_the_same_on_one_and_two_devices(rows):
    """Same seed, same global batches: DP on 1 device and DDP on 2 must follow one trajectory."""
    one, two = rows[("pt-dp", 1)], rows[("pt-ddp", 2)]
    for a, b in zip(one["epochs"], two["epochs"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
    assert one["epochs"][1]["loss"] < one["epochs"][0]["loss"]
    assert abs(one["test_accuracy"] - two["test_accuracy"]) < 0.01


def test_dp_with_two_devices_on_cpu_is_unsupported(rows):
    row = rows[("pt-dp", 2)]
    assert row["status"] == "unsupported"
    assert "needs 2 CUDA GPUs" in row["error"] and row["epochs"] == []
