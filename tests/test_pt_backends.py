"""pt-dp, pt-ddp and pt-replicate, from the smoke run (real processes on real MNIST)."""
import pytest

from xbench.common.workload.models import MODELS


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


def test_replicate_all_reduces_each_unit_once_its_backward_is_done(rows):
    """pt-replicate's 2 ranks: one all-reduce per unit FSDP2's machinery wraps, in backward's
    order (the last layer's first), each timed and counted in its unit's bytes; and pt-ddp's
    trajectory: the same losses, test accuracy and test loss."""
    from xbench.pt_backend.fsdp import units
    from xbench.pt_backend.models import build_model

    row, ddp = rows[("pt-replicate", 2)], rows[("pt-ddp", 2)]
    assert row["status"] == "ok", row["error"]
    details = row["backend_details"]
    assert details["world_size"] == 2 and details["process_group"] == "gloo"
    assert details["parallelism"] == "replicate (composable, on FSDP2)"
    assert details["reduction"] == "all-reduce"
    unit_bytes = [4 * sum(p.numel() for p in unit.parameters())
                  for unit in reversed(units(build_model(MODELS["small"])))]
    for rank in row["attribution"]["epochs"][-1]["ranks"]:
        assert rank["collective"]["bytes_per_step"] == MODELS["small"].gradient_bytes()
        assert rank["collective"]["collectives_per_step"] == len(unit_bytes)
        timeline = rank["timeline"]
        assert [c["bytes"] for c in timeline["collectives"]] == unit_bytes
        assert [g["bytes"] for g in timeline["gradients"]] == unit_bytes
        assert all(c["end"] > c["launch"] for c in timeline["collectives"])
    for mine, theirs in zip(row["epochs"], ddp["epochs"], strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-6)
    assert row["test_accuracy"] == ddp["test_accuracy"]
    assert row["test_loss"] == pytest.approx(ddp["test_loss"], rel=1e-6)
