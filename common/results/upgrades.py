"""One named upgrade per schema version (asv's `Results.update_to_N`): `update_to_N` reads a row
of version N-1 as the row of version N it would have been. Their list is the version history;
the schema's version is the last one's. A setting that version N first recorded is filled in
with what every row before it had implicitly (common.grids.settings: `since`, `implied`), so a
new setting's upgrade is one line.
"""
import re
from collections.abc import Callable
from typing import Any

from xbench.common.grids.settings import IN_ROW
from xbench.common.results.invariants import broken

Row = dict[str, Any]


def settings_added(version: int) -> Row:
    """The settings version `version` first recorded, as every row before it had them."""
    return {s.row_name: s.row_value(s.cell_default) for s in IN_ROW if s.since == version}


def update_to_3(row: Row) -> Row:
    """The training settings (rows before trained Adam at 1e-3, no scaling, no warm-up, with
    set_epoch) and batch sweeps (none)."""
    return {**settings_added(3), "batch_sweep": None, **row}


def update_to_4(row: Row) -> Row:
    """The input settings (the whole test set, no loader workers, pageable memory) and BatchNorm
    (none). On a GPU, PyTorch's loader pinned and copied without blocking then: such a row says
    so, in its cell key too, so it never shares a key with today's pageable cell."""
    row = {**settings_added(4), "batchnorm": None, **row}
    if row.get("framework") == "torch" and row.get("device_type") == "cuda":
        row["host_memory"] = "pinned-non-blocking"
        row["cell_key"] = f"{row['cell_key']}|pinned-non-blocking"
    return row


def update_to_5(row: Row) -> Row:
    """Faults injected on purpose (none) and the step attribution (none recorded)."""
    return {**settings_added(5), "attribution": None, **row}


def update_to_6(row: Row) -> Row:
    """The GPU math (each framework's default), which version 8 renamed precision."""
    return {**settings_added(6), **row}


def update_to_7(row: Row) -> Row:
    """Pinned ranks (none: contention was judged on all of rank 0's machine's cores, recorded as
    such) and gradient compression (none)."""
    return {**settings_added(7), **row}


def update_to_8(row: Row) -> Row:
    """Precision (versions 6 and 7 recorded its float32 part as gpu_math) and crashed attempts
    (none: cells were not run again then)."""
    row = {**row, "crashes": row.get("crashes", [])}
    if "gpu_math" in row:
        row["precision"] = row.pop("gpu_math")
    return {**settings_added(8), **row}


def update_to_9(row: Row) -> Row:
    """A target accuracy (none: every run trained its epochs)."""
    return {**settings_added(9), "time_to_target": None, **row}


def update_to_10(row: Row) -> Row:
    """FSDP's resharding (its default: no FSDP ran) and the model state per device (not
    counted then)."""
    return {**settings_added(10), "model_state_per_device": None, **row}


EPOCHS_PART = re.compile(r"\|e(\d+)(?=\||$)")


def update_to_11(row: Row) -> Row:
    """The epochs a run was given, which rows before kept only in their cell key (`|e2|`); a
    run to a target may stop before them."""
    found = EPOCHS_PART.search(str(row.get("cell_key", "")))
    given = int(found[1]) if found else len(row.get("epochs") or []) or None
    return {"epochs_given": given, **row}


def update_to_12(row: Row) -> Row:
    """The bucket size (each library's own) and the untraced part of a step, which rows before
    counted as host overhead: untraced 0 there, their host holds it. Their collectives were
    timed from the first gradient's hook to the end of the wait: no overlap was measured."""
    attribution = row.get("attribution")
    if isinstance(attribution, dict) and isinstance(attribution.get("epochs"), list):
        zero = {"seconds": 0.0, "median": 0.0, "p10": 0.0, "p90": 0.0}
        attribution = {**attribution, "epochs": [
            {**epoch, "ranks": [{**rank, "parts": {**rank["parts"], "untraced": dict(zero)}}
                                if isinstance(rank, dict) and isinstance(rank.get("parts"), dict)
                                else rank for rank in epoch.get("ranks", [])]}
            if isinstance(epoch, dict) else epoch for epoch in attribution["epochs"]]}
    return {**settings_added(12), **row, "attribution": attribution}


def update_to_13(row: Row) -> Row:
    """Which look of --until-conclusive added a run: rows before were tested as if none had
    (0), as the xbench that wrote them tested them. And what ran untimed between an epoch's
    steps (a tracer), in every epoch: rows before wrote it only where it was not 0."""
    epochs = row.get("epochs")
    if isinstance(epochs, list):
        epochs = [{"untimed_seconds": 0.0, **epoch} if isinstance(epoch, dict) else epoch
                  for epoch in epochs]
    return {**settings_added(13), "look": 0, **row, "epochs": epochs}


def update_to_14(row: Row) -> Row:
    """A target loss (none) and the test loss (not measured then: rows before recorded the
    test accuracy alone)."""
    return {**settings_added(14), "test_loss": None, **row}


def update_to_15(row: Row) -> Row:
    """Each rank's step as a timeline (when each gradient was ready, when each collective ran):
    not recorded then (None)."""
    attribution = row.get("attribution")
    if not (isinstance(attribution, dict) and isinstance(attribution.get("epochs"), list)):
        return row
    epochs = [{**epoch, "ranks": [{"timeline": None, **rank} if isinstance(rank, dict) else rank
                                  for rank in epoch["ranks"]]}
              if isinstance(epoch, dict) and isinstance(epoch.get("ranks"), list) else epoch
              for epoch in attribution["epochs"]]
    return {**row, "attribution": {**attribution, "epochs": epochs}}


def update_to_16(row: Row) -> Row:
    """Gradient accumulation (none: one micro-batch, synced once) and compiling (off: each
    framework's default), and the warm-up seconds (not measured then)."""
    return {**settings_added(16), "warmup_seconds": None, **row}


def update_to_17(row: Row) -> Row:
    """The OpenMP wait policy: rows before ran with what their environment gave, the runtime's
    own unless OMP_WAIT_POLICY was set (not recorded)."""
    return {**settings_added(17), "omp_wait": "runtime", **row}


def update_to_18(row: Row) -> Row:
    """The invariants the row's derived numbers break (common.results.invariants), checked as it
    is read: rows before recorded their collectives on no one basis, so no why rests on them."""
    try:
        found = broken(row)
    except (KeyError, TypeError, ValueError, AttributeError):
        found = []  # a row the validator will name as malformed
    return {**row, "invariants": found}


def update_to_19(row: Row) -> Row:
    """Where a cell ran, as its launcher's engine saw it: rows before ran on this machine or on
    Slurm, which record no cluster (a Slurm cell's nodes are its rows' hosts)."""
    return {"cluster": None, **row}


UPGRADES: list[Callable[[Row], Row]] = [
    update_to_3, update_to_4, update_to_5, update_to_6, update_to_7, update_to_8, update_to_9,
    update_to_10, update_to_11, update_to_12, update_to_13, update_to_14, update_to_15,
    update_to_16, update_to_17, update_to_18, update_to_19]
OLDEST_READ = 2  # the oldest version whose rows are read (schema 1's are not: OLDER_VERSIONS)
VERSIONS = list(range(OLDEST_READ + 1, OLDEST_READ + 1 + len(UPGRADES)))
assert [int(f.__name__.removeprefix("update_to_")) for f in UPGRADES] == VERSIONS, \
    "one upgrade per version, in order"
assert all(s.since <= VERSIONS[-1] for s in IN_ROW), "a setting of a version with no upgrade"
CURRENT = VERSIONS[-1]


def upgrade(row: Any) -> Any:
    """A row of an older version this xbench reads, as a row of the current one (anything else
    as it is: the validator says what is wrong with it)."""
    if not (isinstance(row, dict) and type(row.get("schema_version")) is int
            and OLDEST_READ <= row["schema_version"] < CURRENT):
        return row
    for version, update in zip(VERSIONS, UPGRADES):
        if row["schema_version"] < version:
            row = {**update(row), "schema_version": version}
    return row
