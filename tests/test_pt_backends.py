"""Real runs of pt-dp and pt-ddp through the runner, on a slice of real MNIST."""
import pytest

from common.grid import expand
from common.results import REQUIRED_FIELDS, read_rows
from common.runner import run_grid

SLICE = 2048


def grid(mnist_dir, backends, devices, **settings):
    return expand({"name": "test", "backends": backends, "models": ["small"], "multiples": [1],
                   "batches": [128], "devices": devices, "max_train_samples": SLICE,
                   "timeout": 600, **settings}, data_dir=mnist_dir)


@pytest.fixture(scope="module")
def rows(mnist_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("results") / "pt.jsonl"
    cells = grid(mnist_dir, ["pt-dp", "pt-ddp"], [1, 2])
    run_grid(cells, path, echo=print)
    written, problems = read_rows(path)
    assert not problems
    return {(r["backend"], r["devices"]): r for r in written}


def test_ddp_two_processes_train_one_model(rows):
    row = rows[("pt-ddp", 2)]
    assert row["status"] == "ok", row["error"]
    details = row["backend_details"]
    assert details["world_size"] == 2 and details["process_group"] == "gloo"
    digests = details["replica_weight_digests"]
    assert len(digests) == 2 and digests[0] == digests[1]  # both ranks end with identical weights
    assert details["shard_overlap_epoch1"] == 0            # ranks saw disjoint shards
    assert row["per_device_batch"] == 64 and row["global_batch"] == 128
    assert len(row["epochs"][0]["seconds_per_rank"]) == 2
    assert row["epochs"][0]["seconds"] == max(row["epochs"][0]["seconds_per_rank"])


def test_rows_have_every_schema_field(rows):
    for key in [("pt-dp", 1), ("pt-ddp", 1), ("pt-ddp", 2)]:
        row = rows[key]
        assert row["status"] == "ok", row["error"]
        missing = [f for f in REQUIRED_FIELDS if f not in row]
        assert not missing
        nulls = [f for f in REQUIRED_FIELDS if row[f] is None and f != "error"]
        assert not nulls, f"{key}: {nulls}"
        assert row["train_samples"] == SLICE and row["dataset"] == "mnist"
        assert row["params"] == 402_442 and row["device_type"] == "cpu"
        assert [e["epoch"] for e in row["epochs"]] == [1, 2]
        for epoch in row["epochs"]:
            assert epoch["samples"] == SLICE // 128 * 128
            assert epoch["rate"] == pytest.approx(epoch["samples"] / epoch["seconds"])
        assert 0 < row["step_time_p50"] <= row["step_time_p90"]
        assert row["startup_seconds"] > 0 and row["peak_memory_bytes"] > 10 * 2**20
        assert row["env"]["packages"]["torch"].startswith("2.13")
        assert row["env"]["threads"] == row["backend_details"]["threads_per_process"]
    assert rows[("pt-ddp", 2)]["env"]["threads"] == max(1, rows[("pt-ddp", 1)]["env"]["threads"] // 2)


def test_same_cell_learns_the_same_on_one_and_two_devices(rows):
    """Same seed, same global batches: DP on 1 device and DDP on 2 must follow one trajectory."""
    one, two = rows[("pt-dp", 1)], rows[("pt-ddp", 2)]
    for a, b in zip(one["epochs"], two["epochs"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
    assert one["epochs"][1]["loss"] < one["epochs"][0]["loss"]
    assert one["test_accuracy"] > 0.8  # learning on real digits, not noise
    assert abs(one["test_accuracy"] - two["test_accuracy"]) < 0.01


def test_dp_with_two_devices_on_cpu_is_unsupported(rows):
    row = rows[("pt-dp", 2)]
    assert row["status"] == "unsupported"
    assert "needs 2 CUDA GPUs" in row["error"] and row["epochs"] == []
