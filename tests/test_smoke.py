"""The smoke preset through the real command line: a row for every backend, one schema for all."""
import pytest
from conftest import SMOKE_SLICE

from common.backend import BACKENDS
from common.schema import FIELDS, row_problem
from common.table import format_rows


def test_smoke_grid_has_a_row_for_every_backend(smoke):
    assert not smoke.problems
    assert set(smoke.rows) == {(b, d) for b in BACKENDS for d in (1, 2)}
    for (backend, devices), row in smoke.rows.items():
        if (backend, devices) == ("pt-dp", 2):
            assert row["status"] == "unsupported"  # DataParallel needs GPUs for N > 1
        else:
            assert row["status"] == "ok", f"{backend} d{devices}: {row['error']}"


def test_the_printed_table_has_its_header_and_one_line_per_cell(smoke):
    lines = smoke.run.stdout.splitlines()
    start = lines.index(format_rows([]))  # the header alone
    table = lines[start + 1:start + 1 + len(smoke.rows)]
    assert lines[start + 1 + len(smoke.rows)] == f"results: {smoke.results}"
    printed = {(line.split()[0], int(line.split()[4])): line.split()[6] for line in table}
    assert printed == {key: row["status"] for key, row in smoke.rows.items()}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("devices", [1, 2])
def test_every_ok_row_is_complete_and_consistent(smoke, backend, devices):
    row = smoke.rows[(backend, devices)]
    if row["status"] == "unsupported":
        assert (backend, devices) == ("pt-dp", 2) and row["epochs"] == []
        return
    assert row_problem(row) is None and list(row) == list(FIELDS)
    assert [f for f in FIELDS if row[f] is None] == ["error", "memory_limit_mb"]
    assert row["train_samples"] == SMOKE_SLICE and row["dataset"] == "mnist"
    assert row["params"] == 402_442 and row["device_type"] == "cpu"
    assert row["global_batch"] == 128 and row["per_device_batch"] == 128 // devices
    assert [e["epoch"] for e in row["epochs"]] == [1, 2]
    for epoch in row["epochs"]:
        assert epoch["samples"] == SMOKE_SLICE // 128 * 128
        assert epoch["rate"] == pytest.approx(epoch["samples"] / epoch["seconds"])
        assert epoch["seconds"] == max(epoch["seconds_per_rank"])
    assert 0 < row["step_time_p50"] <= row["step_time_p90"]
    assert row["startup_seconds"] > 0 and row["peak_memory_bytes"] > 10 * 2**20
    assert row["test_accuracy"] > 0.8  # learning real digits, not noise
    details = row["backend_details"]
    assert row["env"]["threads"] == details["threads_per_process"]
    assert details["learning_rate_scaled"] is False
    assert len(details["replica_weight_digests"]) == devices
    assert len(set(details["replica_weight_digests"])) == 1  # every replica ended identical
    assert details["shard_overlap_epoch1"] == 0
