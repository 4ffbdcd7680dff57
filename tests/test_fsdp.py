"""pt-fsdp (FSDP2's fully_shard) against pt-ddp on 2 real gloo processes, the large model on a
slice of real MNIST: one trajectory, each rank holding half of the model state, the traffic of
each resharding choice, a run to a target evaluating the gathered model, and the report's memory
against devices."""
import pytest

from tests.helpers import write_grid, xbench
from xbench.common.results.store import read_rows
from xbench.common.workload.models import MODELS
from xbench.reports.page.build import build_report

# Epoch losses of pt-fsdp against pt-ddp (fp32, 2 ranks): equal to every printed digit here
# (2.2978962659835815, 1.9458975940942764 in both, 512 images); the smoke grid's cross-backend
# tolerance.
LOSS_TOLERANCE = 2e-5
SCALARS = 1024  # bytes of the optimizer's per-parameter step counters (never sharded)


@pytest.fixture(scope="module")
def fsdp(mnist_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp")
    grid = write_grid(folder, name="fsdp", backends=["pt-ddp", "pt-fsdp"], models=["large"],
                      devices=[2], reshard=["after-forward", "after-backward"],
                      max_train_samples=512, max_test_samples=512, target_accuracy=0.999,
                      evals_per_epoch=1, seeds=1)
    results = folder / "r.jsonl"
    run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", results)
    assert run.returncode == 0, run.stdout + run.stderr
    rows, problems = read_rows(results)
    assert not problems
    return results, {(r["backend"], r["reshard"]): r for r in rows}


def test_pt_ddp_has_nothing_to_reshard(fsdp):
    _, rows = fsdp
    row = rows["pt-ddp", "after-backward"]
    assert row["status"] == "unsupported" and "nothing to reshard" in row["error"]


@pytest.mark.parametrize("reshard", ["after-forward", "after-backward"])
def test_fsdp_follows_ddps_trajectory(fsdp, reshard):
    _, rows = fsdp
    ddp, sharded = rows["pt-ddp", "after-forward"], rows["pt-fsdp", reshard]
    assert ddp["status"] == sharded["status"] == "ok", sharded["error"]
    assert sharded["params"] == ddp["params"] == MODELS["large"].parameters()
    for mine, theirs in zip(sharded["epochs"], ddp["epochs"], strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=LOSS_TOLERANCE)
    assert sharded["test_accuracy"] == pytest.approx(ddp["test_accuracy"], abs=1e-3)
    # the whole weights gathered from the shards: the same on both ranks
    digests = sharded["evidence"]["replica_weight_digests"]
    assert len(digests) == 2 and len(set(digests)) == 1


def test_each_rank_holds_half_the_model_state(fsdp):
    _, rows = fsdp
    ddp, sharded = rows["pt-ddp", "after-forward"], rows["pt-fsdp", "after-forward"]
    parameters = MODELS["large"].parameters() * 4  # float32
    whole = ddp["model_state_per_device"]
    assert len(whole) == 2 and all(0 <= b - 3 * parameters < SCALARS for b in whole)  # Adam: 2
    halves = sharded["model_state_per_device"]
    assert len(halves) == 2 and all(0 <= b - 3 * parameters // 2 < SCALARS for b in halves)
    assert (len(sharded["peak_memory_per_device"]) == 2
            and min(sharded["peak_memory_per_device"]) > 0)


def test_the_traffic_of_each_resharding_choice(fsdp):
    _, rows = fsdp
    parameters = MODELS["large"].parameters() * 4  # every first dimension of it splits in 2
    reduced = {item["what"]: item["bytes"]
               for item in rows["pt-ddp", "after-forward"]["backend_details"]["traffic"]}
    assert reduced["gradients"] == 2 * parameters
    for reshard, gathers in (("after-forward", 2), ("after-backward", 1)):
        details = rows["pt-fsdp", reshard]["backend_details"]
        sent = {item["what"]: item["bytes"] for item in details["traffic"]}
        # gloo's reduce-scatter is an all-reduce of the whole, of which each rank keeps its half
        assert sent == {"parameters all-gathered": gathers * parameters,
                        "gradients reduce-scattered": 2 * parameters}
        assert details["reduction"] == "reduce-scatter" and reshard in details["parallelism"]
        key = rows["pt-fsdp", reshard]["cell_key"]
        assert ("|reshard-after-backward" in key) == (reshard == "after-backward")


def test_a_run_to_a_target_evaluates_the_gathered_model_on_every_point(fsdp):
    _, rows = fsdp
    for reshard in ("after-forward", "after-backward"):
        reached = rows["pt-fsdp", reshard]["time_to_target"]
        assert reached["converged"] is False and reached["seconds"] is None
        assert [(p["epoch"], p["step"]) for p in reached["curve"]] == [(1, 4), (2, 8)]
        ddp_curve = rows["pt-ddp", "after-forward"]["time_to_target"]["curve"]
        assert [p["accuracy"] for p in reached["curve"]] == pytest.approx(
            [p["accuracy"] for p in ddp_curve], abs=1e-3)


def test_the_report_lays_memory_against_devices_per_backend(fsdp, tmp_path):
    results, _ = fsdp
    build_report([results], tmp_path, formats=["md"], include_contended=True)
    page = (tmp_path / "summary.md").read_text()
    table = page.split("### Memory against devices, per backend")[1].split("\n## ")[0]
    lines = [line for line in table.splitlines() if "| pt-" in line]
    assert len(lines) == 3 and "2 device(s): peak / model state (MiB)" in table
    state = {(line.split("|")[2].strip(), "reshard after-backward" in line):
             float(line.split("|")[-2].split("/")[1]) for line in lines}
    assert set(state) == {("pt-ddp", False), ("pt-fsdp", False), ("pt-fsdp", True)}
    assert state["pt-fsdp", False] == state["pt-fsdp", True] < state["pt-ddp", False]


def test_fsdps_own_collectives_tell_the_clock_each_call_and_the_gradients_bytes():
    """FSDP2's all-gather and reduce-scatter, subclassed (pt_backend.fsdp_collectives), in a
    gloo group of one in this process: each call a collective from its launch to its return,
    blocking the rank (a CPU's), a gather's bytes not told (the parameters'), a reduce-scatter's
    input the unit's gradients, ready when it is called: their bytes, the step's."""
    import torch
    import torch.distributed as dist

    from xbench.common.measuring.collective_clock import CollectiveClock
    from xbench.pt_backend.fsdp_collectives import TimedAllGather, TimedReduceScatter
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        clock = CollectiveClock(stamp=iter([1.0, 2.0, 3.0, 3.5, 4.0, 5.0]).__next__)
        TimedAllGather(clock)(torch.empty(3), torch.ones(3), dist.group.WORLD)  # 1.0, 2.0
        output, gradients = torch.empty(4), torch.full((4,), 2.0)
        TimedReduceScatter(clock)(output, gradients, dist.group.WORLD,
                                  dist.ReduceOp.SUM)  # ready 3.0, 3.5 .. 4.0
        assert output.tolist() == [2.0] * 4
        clock.done()  # 5.0: backward returned
        assert clock.take() == (3.0, 5.0, [(1.0, 2.0, None, True), (3.5, 4.0, 16, True)], 16,
                                [(3.0, 16)], [])
    finally:
        dist.destroy_process_group()
