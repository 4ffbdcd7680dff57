"""One named upgrade per schema version (common.results.upgrades), each tested on a row of its
version: a row of today's schema, less what every later version added, reads back as today's row
with what the older one had implicitly."""
import pytest

from xbench.common.grids.cell import Cell
from xbench.common.results.schema import SCHEMA_VERSION, make_row, now, row_problem
from xbench.common.results.upgrades import UPGRADES, VERSIONS, upgrade

# What each version first recorded, by hand: the test's own account of the history.
ADDED_IN = {
    3: ["optimizer", "lr", "momentum", "weight_decay", "lr_scaling", "reference_batch",
        "warmup_epochs", "set_epoch", "batch_sweep"],
    4: ["max_test_samples", "host_memory", "loader_workers", "batchnorm"],
    5: ["inject", "attribution"],
    6: [],  # gpu_math, which version 8 renamed precision
    7: ["pin_ranks", "compression", "powersgd_rank"],
    8: ["crashes"],
    9: ["target_accuracy", "evals_per_epoch", "time_to_target"],
    10: ["reshard", "model_state_per_device"],
    11: ["epochs_given"],
    12: ["bucket_mb"],
    13: ["look"],
    14: ["target_loss", "test_loss"],
}


def todays_row(**fields) -> dict:
    cell = Cell(grid="hand", backend="pt-ddp", model="small", multiple=1, batch=128, devices=2,
                epochs=3, batch_mode="global", seed=0, max_train_samples=512, data="mnist",
                device="cpu", timeout=60)
    return {**make_row(cell, "hand", now(), "failed", "hand-made", None, None, {}, None, 0.0, 1),
            **fields}


def as_of(row: dict, version: int) -> dict:
    """`row` as version `version` wrote it."""
    old = {k: v for k, v in row.items()
           if not any(k in ADDED_IN[later] for later in ADDED_IN if later > version)}
    if version in (6, 7):
        old["gpu_math"] = old.pop("precision")
    elif version < 6:
        old.pop("precision")
    return {**old, "schema_version": version}


def test_the_history_is_the_list_of_named_upgrades():
    assert [f.__name__ for f in UPGRADES] == [f"update_to_{v}" for v in VERSIONS]
    assert VERSIONS == list(range(3, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 14
    assert set(ADDED_IN) == set(VERSIONS)


@pytest.mark.parametrize("version", range(2, SCHEMA_VERSION))
def test_a_row_of_each_older_version_reads_as_todays(version):
    """Every field a later version added comes back as the older row had it implicitly: the
    defaults today's row was made with, each version's upgrade applied in turn."""
    today = todays_row()
    upgraded = upgrade(as_of(today, version))
    assert row_problem(upgraded) is None
    assert upgraded == today


def test_version_3_gpu_rows_of_pytorch_keep_their_pinned_copies_apart():
    """Before schema 4, PyTorch's loader pinned and copied non-blocking on a GPU; tf.data never
    pinned: an old pinned row must not share a key with today's pageable cell."""
    for framework, memory in (("torch", "pinned-non-blocking"), ("tensorflow", "pageable")):
        row = todays_row(framework=framework, device_type="cuda")
        upgraded = upgrade(as_of(row, 3))
        assert upgraded["host_memory"] == memory
        assert (upgraded["cell_key"] == row["cell_key"]) == (memory == "pageable")


def test_version_6_and_7_gpu_math_is_the_precision():
    for version in (6, 7):
        old = as_of(todays_row(), version) | {"gpu_math": "tf32"}
        upgraded = upgrade(old)
        assert upgraded["precision"] == "tf32" and "gpu_math" not in upgraded


def test_version_10_rows_take_their_epochs_from_their_key():
    row = todays_row()
    assert "|e3|" in row["cell_key"] and row["epochs_given"] == 3
    assert upgrade(as_of(row, 10))["epochs_given"] == 3


def test_version_11_rows_count_no_untraced_time():
    """Rows before 12 folded what no mark covered into host: their untraced part is 0."""
    rank = {"parts": {part: {"seconds": 1.0, "median": 0.1, "p10": 0.1, "p90": 0.1}
                      for part in ("input", "forward", "backward", "optimizer", "waiting",
                                   "communication", "host")},
            "steps": 10, "residual_seconds": 0.0, "adds_up": True,
            "collective": {"busy_seconds": 0.0, "moving_seconds": 0.0, "moving_median": 0.0,
                           "bytes_per_step": None}}
    old = as_of(todays_row(status="ok"), 11) | {"attribution": {
        "how": {}, "epochs": [{"ranks": [rank], "slowest_rank": None}]}}
    upgraded = upgrade(old)
    parts = upgraded["attribution"]["epochs"][0]["ranks"][0]["parts"]
    assert parts["untraced"]["seconds"] == 0.0 and parts["host"]["seconds"] == 1.0
    assert upgraded["bucket_mb"] == 0.0 and upgraded["schema_version"] == SCHEMA_VERSION


def test_version_12_epochs_without_untimed_seconds_read_as_none_untimed():
    """The xbench that first wrote schema 12 recorded an epoch's untimed seconds only where not
    0: such an epoch reads as 0, and an epoch that has them keeps them."""
    row = todays_row()
    epochs = [{"epoch": 1, "seconds": 1.0}, {"epoch": 2, "seconds": 1.0, "untimed_seconds": 0.2}]
    upgraded = upgrade({**as_of(row, 12), "epochs": epochs})
    assert [e["untimed_seconds"] for e in upgraded["epochs"]] == [0.0, 0.2]


def test_rows_of_versions_it_does_not_read_are_left_for_the_validator():
    assert upgrade({"schema_version": 1}) == {"schema_version": 1}
    assert row_problem(upgrade([1])) == "not a JSON object"
    future = todays_row(schema_version=SCHEMA_VERSION + 1)
    assert upgrade(future) is future and f"is not {SCHEMA_VERSION}" in row_problem(future)
