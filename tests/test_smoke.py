"""The smoke preset through the real command line: a row for every backend, one schema for all,
one training trajectory in every backend, evidence observed from the batches, equal thread
budgets."""
import pytest

from tests.helpers import SMOKE_SLICE
from xbench.common.backends.traits import TRAITS
from xbench.common.measuring.attribution import PARTS
from xbench.common.results.schema import FIELDS, row_problem

SPANNING = [b for b in TRAITS if TRAITS[b].spans_devices]
SINGLE = [b for b in TRAITS if not TRAITS[b].spans_devices]
GRID_CELLS = [(b, 1) for b in TRAITS] + [(b, 2) for b in SPANNING]
# Epoch losses of one cell in every backend and device count: TensorFlow against PyTorch, 1
# against 2 devices. Measured on the smoke slice (16 steps an epoch): at most 2.3e-6 relative
# (PyTorch 1.0849957 / TensorFlow 1.0849981 in epoch 1, 0.3863515 / 0.3863523 in epoch 2).
LOSS_TOLERANCE = 2e-5


def ok_rows(smoke):
    return {key: row for key, row in smoke.rows.items() if row["status"] == "ok"}


def test_smoke_grid_has_a_row_for_every_backend(smoke):
    assert not smoke.problems
    assert set(smoke.rows) == set(GRID_CELLS)
    for (backend, devices), row in smoke.rows.items():
        if (backend, devices) == ("pt-dp", 2):
            assert row["status"] == "unsupported"  # DataParallel needs GPUs for N > 1
        else:
            assert row["status"] == "ok", f"{backend} d{devices}: {row['error']}"


def test_the_printed_table_has_its_header_and_one_line_per_cell(smoke):
    """Each part of the shared grid printed a table of the rows it wrote."""
    for run in smoke.runs.values():
        ran = [r for r in smoke.all if r["backend"] in run.backends]
        lines = run.stdout.splitlines()
        end = lines.index(f"results: {smoke.results}")
        table = lines[end - len(ran):end]  # a line each at SMOKE_COLUMNS
        assert lines[end - len(ran) - 3] == ("every row: model small, mult 1, batch 128, "
                                             "nodes 1, rep 0")
        assert lines[end - len(ran) - 2].split()[:3] == ["backend", "dev", "status"]
        printed = sorted((line.split()[0], int(line.split()[1]), line.split()[2])
                         for line in table)
        assert printed == sorted((r["backend"], r["devices"], r["status"]) for r in ran)
    assert sorted(b for run in smoke.runs.values() for b in run.backends) == sorted(TRAITS)


@pytest.mark.parametrize("backend, devices", GRID_CELLS)
def test_every_ok_row_is_complete_and_consistent(smoke, backend, devices):
    row = smoke.rows[(backend, devices)]
    if row["status"] == "unsupported":
        assert (backend, devices) == ("pt-dp", 2) and row["epochs"] == []
        return
    assert row_problem(row) is None and list(row) == list(FIELDS)
    # no target accuracy in the smoke grid: no target and no time to one
    assert [f for f in FIELDS if row[f] is None] == ["error", "target_accuracy", "target_loss",
                                                     "memory_limit_mb", "batch_sweep", "batchnorm",
                                                     "time_to_target", "cluster"]
    assert row["train_samples"] == SMOKE_SLICE and row["dataset"] == "mnist"
    assert row["params"] == 402_442 and row["device_type"] == "cpu"
    assert row["global_batch"] == 128 and row["per_device_batch"] == 128 // devices
    assert [e["epoch"] for e in row["epochs"]] == [1, 2]
    for epoch in row["epochs"]:
        assert epoch["samples"] == SMOKE_SLICE // 128 * 128
        assert epoch["rate"] == pytest.approx(epoch["samples"] / epoch["seconds"])
        assert epoch["seconds"] == max(epoch["seconds_per_rank"])
        assert len(epoch["contention"]["cpu_per_wall_per_rank"]) == len(epoch["seconds_per_rank"])
    assert 0 < row["step_time_p50"] <= row["step_time_p90"]
    assert row["startup_seconds"] > 0 and row["peak_memory_bytes"] > 10 * 2**20
    # Adam: the parameters and their two moments, float32, whole on every device but pt-fsdp's
    # (its shards), counted alike in both frameworks; the step counters are scalars
    shards = devices if backend == "pt-fsdp" else 1
    state = row["model_state_per_device"]
    assert len(state) == devices
    assert all(0 <= b - 3 * 4 * row["params"] // shards < 1024 for b in state), state
    assert row["test_accuracy"] > 0.8  # learning real digits, not noise
    evidence = row["evidence"]
    assert len(evidence["replica_weight_digests"]) == devices
    assert len(set(evidence["replica_weight_digests"])) == 1  # every replica ended identical
    assert len(evidence["replica_sample_digests"]) == devices
    assert evidence["shard_overlap"] == [0, 0]
    assert evidence["samples_trained"] == [SMOKE_SLICE // 128 * 128] * 2
    assert row["backend_details"]["reduction"] in ("none", "all-reduce", "reduce-to-one",
                                                   "reduce-scatter")


def test_every_backend_follows_one_trajectory(smoke):
    """The initial weights are drawn once (common.workload.models) and every backend trains the same
    global batches: PyTorch and TensorFlow, 1 and 2 devices, give the same epoch losses and
    accuracies, and the same test accuracy within 0.002."""
    rows = ok_rows(smoke)
    reference = rows[("pt-single", 1)]
    for key, row in rows.items():
        for mine, theirs in zip(row["epochs"], reference["epochs"], strict=True):
            assert mine["loss"] == pytest.approx(theirs["loss"], rel=LOSS_TOLERANCE), key
            assert mine["accuracy"] == pytest.approx(theirs["accuracy"], abs=2 / SMOKE_SLICE), key
        assert abs(row["test_accuracy"] - reference["test_accuracy"]) < 0.002, key


def test_every_backend_trained_the_same_samples_in_the_same_global_batches(smoke):
    """The digests come from the indices each replica read from its batches."""
    digests = {key: tuple(row["evidence"]["global_batches_digests"])
               for key, row in ok_rows(smoke).items()}
    assert len(set(digests.values())) == 1, digests
    one, two = smoke.rows[("pt-ddp", 1)], smoke.rows[("pt-ddp", 2)]
    assert (one["evidence"]["replica_sample_digests"][0]
            != two["evidence"]["replica_sample_digests"][0])


def test_every_backend_has_the_same_thread_budget_per_device(smoke):
    """Compute threads: the cores shared out over the devices; one inter-op and one input
    pipeline thread per device; a process with k devices (tf-mirrored, jax-dp, keras-jax) has k
    times each,
    but for JAX's input, which the loop's own thread places (XLA's CPU pool: the process's
    cores)."""
    for (backend, devices), row in ok_rows(smoke).items():
        budget = row["threads"]["per_device"]
        assert budget == {"compute": row["threads_per_device"], "inter_op": 1, "input_pipeline": 1}
        per_process = devices if backend in ("tf-mirrored", "jax-dp", "keras-jax") else 1
        jax = TRAITS[backend].framework.name == "jax"
        assert row["threads"]["per_process"] == {
            "intra_op": budget["compute"] * per_process, "inter_op": per_process,
            "input_pipeline": 1 if jax else per_process}, backend
    assert len({r["threads_per_device"] for (_, d), r in ok_rows(smoke).items() if d == 2}) == 1


@pytest.mark.parametrize("backend", SPANNING)
def test_one_device_runs_the_backends_own_machinery(smoke, backend):
    """The 1-device cell of every spanning backend is its own parallel machinery; the
    single-device references run without any."""
    details = smoke.rows[(backend, 1)]["backend_details"]
    expected = {"pt-dp": "torch.nn.DataParallel", "pt-ddp": "DistributedDataParallel",
                "pt-fsdp": "FSDP2 fully_shard (reshard after-forward)",
                "pt-replicate": "replicate (composable, on FSDP2)",
                "tf-mirrored": "tf.distribute.MirroredStrategy",
                "tf-multiworker": "tf.distribute.MultiWorkerMirroredStrategy",
                "hvd-torch": "hvd.DistributedOptimizer", "hvd-tf": "hvd.allreduce of each gradient",
                "jax-dp": "jax.jit with shardings (a one-axis mesh, the batch sharded)",
                "jax-multiprocess": "jax.jit with shardings over every process's device "
                                    "(jax.distributed)",
                "keras-jax": "keras.distribution.DataParallel (Keras 3 on JAX)"}
    assert details["parallelism"] == expected[backend]
    for single in SINGLE:
        assert smoke.rows[(single, 1)]["backend_details"]["parallelism"].startswith("none")


def test_every_ok_row_attributes_its_steps_and_they_add_up(smoke):
    """Every ok row of the smoke grid splits every step of every rank into its parts, in every
    epoch; the parts cover the epoch but for a residual under 5%; collectives are counted where
    gradients cross between ranks."""
    for (backend, devices), row in smoke.rows.items():
        if row["status"] != "ok":
            continue
        attribution = row["attribution"]
        assert set(attribution["how"]) == set(PARTS), backend
        assert len(attribution["epochs"]) == len(row["epochs"])
        for epoch, timed in zip(attribution["epochs"], row["epochs"]):
            assert len(epoch["ranks"]) == len(row["hosts"])  # one per process
            for rank, seconds in zip(epoch["ranks"], timed["seconds_per_rank"]):
                covered = sum(part["seconds"] for part in rank["parts"].values())
                assert rank["adds_up"] and abs(seconds - covered) <= 0.05 * seconds, backend
                assert rank["steps"] == timed["samples"] // row["global_batch"]
        moving = [r["collective"]["moving_median"] for r in attribution["epochs"][-1]["ranks"]]
        if (devices > 1 and row["backend_details"]["reduction"] in ("all-reduce", "reduce-scatter")
                and TRAITS[backend].collectives_counted):
            assert min(moving) > 0, backend
        elif backend not in ("pt-ddp", "pt-replicate", "tf-multiworker"):  # a group of one
            assert max(moving) == 0, (backend, devices, moving)


