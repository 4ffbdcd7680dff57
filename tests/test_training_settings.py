"""Training settings identical in every backend: SGD with momentum and weight decay, the learning
rate scaled with the batch and warmed up, one trajectory in both frameworks; --no-set-epoch shows
what DistributedSampler does without set_epoch; bad settings are refused with exit 2. (Older
rows read as what they were: tests/test_schema.py.)"""

import pytest

from tests.helpers import SMOKE_SLICE, SMOKE_TEST_SLICE, write_grid, xbench, xbench_here
from xbench.common.grids.cell import Cell
from xbench.common.results.store import read_rows

SGD = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.0005",
       "--lr-scaling", "linear", "--reference-batch", "64", "--warmup-epochs", "1"]


def test_sgd_warmed_up_and_scaled_follows_one_trajectory_in_every_framework(mnist_dir, tmp_path):
    """Each framework's one process and its 2 ranks: pt-ddp and tf-multiworker set the learning
    rate as pt-single and tf-single do, and the global batch (so the scaled rate) is the same on
    any number of devices; their loops on 1 rank are the smoke grid's (at its defaults)."""
    # the losses are the trajectory: the test accuracy (on a tenth of the test set) is not
    for backends, devices in ((["pt-single", "tf-single"], 1), (["pt-ddp", "tf-multiworker"], 2)):
        grid = write_grid(tmp_path, name="sgd", epochs=3, max_train_samples=1024,
                          max_test_samples=1000, backends=backends, devices=[devices])
        run = xbench("grid", grid, *SGD, "--data-dir", mnist_dir, "--results",
                     tmp_path / "r.jsonl")
        assert run.returncode == 0, run.stderr
    rows, _ = read_rows(tmp_path / "r.jsonl")
    assert {(r["backend"], r["devices"]) for r in rows} == {
        ("pt-single", 1), ("tf-single", 1), ("pt-ddp", 2), ("tf-multiworker", 2)}
    for row in rows:
        assert row["status"] == "ok", row["error"]
        assert (row["optimizer"], row["lr"], row["momentum"], row["weight_decay"],
                row["lr_scaling"], row["reference_batch"], row["warmup_epochs"]) == (
            "sgd", 0.05, 0.9, 0.0005, "linear", 64, 1)
        assert row["cell_key"].endswith("|sgd-lr0.05-m0.9-wd0.0005|lr-linear64|warm1")
    for epoch in range(3):
        losses = [r["epochs"][epoch]["loss"] for r in rows]
        assert max(losses) - min(losses) < 2e-4, (epoch, losses)
    assert rows[0]["epochs"][2]["loss"] < rows[0]["epochs"][0]["loss"]


def test_the_schedule_ramps_from_lr_to_the_scaled_lr():
    cell = Cell(grid="g", backend="pt-ddp", model="small", multiple=1, batch=256, devices=1,
                epochs=5, batch_mode="global", seed=0, max_train_samples=0, data="mnist",
                device="cpu", timeout=60, optimizer="sgd", lr=0.1, lr_scaling="linear",
                reference_batch=128, warmup_epochs=2)
    assert [cell.learning_rate(step, 10) for step in (0, 10, 20, 49)] == pytest.approx(
        [0.1, 0.15, 0.2, 0.2])
    root = Cell(**{**cell.to_dict(), "lr_scaling": "sqrt", "warmup_epochs": 0})
    assert root.learning_rate(0, 10) == pytest.approx(0.1 * 2 ** 0.5)


def test_without_set_epoch_every_epoch_trains_epoch_0s_order(smoke, mnist_dir, tmp_path):
    """pt-ddp without set_epoch deals epoch 0's order each epoch, and torch's own
    DistributedSampler, given the same calls, does the same; pt-single draws with a plain
    shuffling loader, which reshuffles by itself (the same orders as pt-ddp with set_epoch), so
    it has no set_epoch to leave out, nor has TensorFlow. With set_epoch: the shared grid's rows
    (its settings, set_epoch the default); without it: the same cells run here."""
    results = tmp_path / "no-set-epoch.jsonl"
    shared = ("--preset", "smoke", "--no-set-epoch", "--max-train-samples", SMOKE_SLICE,
              "--max-test-samples", SMOKE_TEST_SLICE, "--data-dir", mnist_dir, "--results",
              results)
    run = xbench("grid", *shared, "--backend", "pt-ddp", "--devices", "2")
    assert run.returncode == 0, run.stderr
    # theirs are refused before anything runs: no process of their own to start
    refused = xbench_here("grid", *shared, "--backend", "pt-single,tf-single", "--devices", "1")
    assert refused.returncode == 0, refused.stderr
    with_it = {backend: smoke.rows[(backend, devices)]
               for backend, devices in (("pt-ddp", 2), ("pt-single", 1))}
    without = {r["backend"]: r for r in read_rows(results)[0]}
    assert with_it["pt-ddp"]["set_epoch"] is True and len(without) == 3
    epochs = len(with_it["pt-ddp"]["epochs"])
    assert epochs >= 2 and len(without["pt-ddp"]["epochs"]) == epochs
    ddp, alone = with_it["pt-ddp"]["evidence"], with_it["pt-single"]["evidence"]
    assert len(set(ddp["global_batches_digests"])) == epochs  # a new order every epoch
    assert ddp["global_batches_digests"] == alone["global_batches_digests"]  # one trajectory
    assert len(set(ddp["distributed_sampler_digests"])) == epochs
    assert "distributed_sampler_digests" not in alone
    stuck = without["pt-ddp"]["evidence"]
    assert len(set(stuck["global_batches_digests"])) == 1
    assert len(set(stuck["distributed_sampler_digests"])) == 1
    assert stuck["distributed_sampler_digests"][0] not in ddp["distributed_sampler_digests"]  # 0
    assert without["pt-ddp"]["set_epoch"] is False
    assert without["pt-ddp"]["cell_key"].endswith("|no-set-epoch")
    assert without["pt-ddp"]["cell_key"].replace("|no-set-epoch", "") == with_it["pt-ddp"][
        "cell_key"]  # the same cell but for set_epoch
    for backend, reason in (("pt-single", "plain shuffling loader"),
                            ("tf-single", "DistributedSampler")):
        assert without[backend]["status"] == "unsupported" and reason in without[backend]["error"]


@pytest.mark.parametrize("options, message", [
    (["--optimizer", "lamb"], "Invalid value for '--optimizer'"),
    (["--lr-scaling", "cubic"], "'lr_scaling' must be one of none, linear, sqrt, got 'cubic'"),
    (["--lr", "-0.1"], "'lr' must be a number from 0 to 100"),
    (["--warmup-epochs", "2"], "warm-up of 2 epoch(s) is not shorter than the run of 2"),
    (["--warmup-epochs", "1", "--epochs", "3"], "with lr_scaling none there is nothing to ramp to"),
    (["--momentum", "0.9"], "momentum is SGD's setting"),
    (["--optimizer", "sgd", "--momentum", "1.5"], "'momentum' must be a number from 0 to 0.999"),
])
def test_bad_training_settings_are_refused_with_exit_2(options, message, tmp_path):
    run = xbench_here("grid", "--preset", "smoke", *options, "--dry-run", "--results",
                      tmp_path / "r.jsonl")
    assert run.returncode == 2 and message in run.stderr, run.stderr
