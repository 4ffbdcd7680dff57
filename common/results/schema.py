"""The result row: what a training loop measures (`Measurement`), the one function that makes a row
of it (`make_row`, called by the runner alone), and the one validator every reader uses
(`row_problem`: resume, export and the report).

The field list below is written once and used to write, to validate on read, and by the tests.
"""
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from xbench.common.grids.settings import IN_ROW
from xbench.common.json_shapes import (
    BOOL,
    NUMBER,
    POSITIVE,
    TEXT,
    WHOLE,
    Each,
    Maybe,
    Range,
    is_kind,
    shape_problem,
    shown,
)
from xbench.common.measuring.attribution import PARTS
from xbench.common.measuring.timing import FASTEST_STEP_SECONDS
from xbench.common.results.invariants import broken
from xbench.common.results.upgrades import CURRENT
from xbench.common.workload.model import Model

SCHEMA_VERSION = CURRENT  # the last of common.results.upgrades' named upgrades
# What rows of older versions lack; they are reported and left out, never mixed with these.
OLDER_VERSIONS = {1: "schema 1 rows come from an xbench whose 1-device cells of tf-mirrored ran no "
                    "MirroredStrategy, whose frameworks started from different initial weights, "
                    "and which recorded no contention; run the grid again"}
STATUSES = ("ok", "failed", "timeout", "oom", "unsupported")


@dataclass
class Measurement:
    """What every training loop returns on its reporting rank (rank 0): what ran, what it
    measured, and the evidence that it trained what it claims."""
    framework_version: str
    params: int                       # counted on the framework's built model
    dataset_source: str
    train_samples: int
    device_type: str                  # "cpu" or "cuda"
    device_name: str
    epochs: list[dict]                # common.measuring.timing.epoch_record, one per epoch
    startup_seconds: float
    step_time_p50: float | None
    step_time_p90: float | None
    test_accuracy: float
    peak_memory_per_device: list[int]
    model_state_per_device: list[int]  # parameters and optimizer state held between steps
    hosts: list[str]                  # the node each rank ran on, rank by rank
    threads: dict                     # per device (the budget) and per process (as set)
    contended: bool                   # another load used the machine in a timed epoch
    evidence: dict                    # digests of weights and of the samples each replica took
    backend_details: dict             # what the backend says of itself
    attribution: dict                 # each step split into its parts
                                      # (common.measuring.attribution)
    time_to_target: dict | None = None  # with a target (common.measuring.target)
    test_loss: float | None = None    # mean cross-entropy on the test set (nats; per token)
    # What starting cost beyond steady steps: epoch 1's seconds less its steps at the last
    # epoch's median step, plus a compile ahead of time in the set-up (JAX's): tracing,
    # compiling, autotuning, first allocations
    warmup_seconds: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Measurement":
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})


# name -> (JSON types a value may have, or None for null; when it must not be null)
IDENTITY = {
    "schema_version": (WHOLE, "always"), "run_id": (TEXT, "always"), "grid": (TEXT, "always"),
    "cell_key": (TEXT, "always"), "repeat": (WHOLE, "always"), "look": (WHOLE, "always"),
    "status": (TEXT, "always"),
    "error": (TEXT, "not ok"), "started_at": (TEXT, "always"), "finished_at": (TEXT, "always"),
}
KINDS = {int: WHOLE, float: NUMBER, str: TEXT, bool: BOOL}
# The cell's configuration: the settings a row records (common.grids.settings), and what the runner
# derives from the cell and its backend.
CONFIGURATION = {
    **{s.row_name: (KINDS[s.kind], "never" if s.zero_is_null else "always") for s in IN_ROW},
    "framework": (TEXT, "ok"), "params": (WHOLE, "always"), "flops_per_sample": (WHOLE, "always"),
    "global_batch": (WHOLE, "always"), "per_device_batch": (WHOLE, "always"),
    "world_size": (WHOLE, "always"), "threads_per_device": (WHOLE, "always"),
    "threads_pinned": (BOOL, "always"), "batch_sweep": (TEXT, "never"),
    "batchnorm": (TEXT, "never"),
}
MEASUREMENTS = {
    "framework_version": (TEXT, "ok"), "dataset_source": (TEXT, "ok"),
    "train_samples": (WHOLE, "ok"), "device_type": (TEXT, "ok"), "device_name": (TEXT, "ok"),
    "epochs": ((list,), "always"), "startup_seconds": (NUMBER, "ok"),
    "step_time_p50": (NUMBER, "ok"), "step_time_p90": (NUMBER, "ok"),
    "test_accuracy": (NUMBER, "ok"), "test_loss": (NUMBER, "never"),
    "peak_memory_bytes": (WHOLE, "ok"),
    "peak_memory_per_device": ((list,), "ok"), "model_state_per_device": ((list,), "never"),
    "hosts": ((list,), "ok"),
    "threads": ((dict,), "ok"),
    "contended": (BOOL, "ok"), "evidence": ((dict,), "ok"), "backend_details": ((dict,), "always"),
    "attribution": ((dict,), "never"), "time_to_target": ((dict,), "never"),
    "warmup_seconds": (NUMBER, "never"),
}
RUN = {"cell_seconds": (NUMBER, "always"), "log": (TEXT, "never"), "env": ((dict,), "always"),
       "crashes": ((list,), "always"),
       # where the cell ran, as its launcher's engine saw it (Ray: its version, the cell's nodes,
       # their resources and what the cell held of them); null on this machine and on Slurm
       "cluster": ((dict,), "never"),
       # the invariants its derived numbers break, by name (common.results.invariants)
       "invariants": ((list,), "always")}
FIELDS = {**IDENTITY, **CONFIGURATION, **MEASUREMENTS, **RUN}
AT_LEAST_ONE = ("dataset_multiple", "global_batch", "per_device_batch", "nodes", "devices",
                "world_size", "params")


COUNT, SECONDS, SHARE = Range(WHOLE, 1), Range(NUMBER, 0), Range(NUMBER, 0, 1)
RATE = NATS = SECONDS  # samples/s, a cross-entropy: from 0 too
# what a row's numbers can be
RANGES = {"test_accuracy": SHARE, "test_loss": NATS, "train_samples": COUNT,
          "startup_seconds": SECONDS, "step_time_p50": SECONDS, "step_time_p90": SECONDS,
          "cell_seconds": SECONDS, "peak_memory_bytes": Range(WHOLE, 0)}
# The nested values readers use, by shape: a tuple of types, POSITIVE, an object {key: shape}
# (a key ending in '?' may be absent; other keys are allowed), [shape] a list of them, Maybe,
# Each. What a reader takes from a row is checked here, so a wrong value is a skipped line.
NEWER_SHARES = {f"{name}?": Maybe(NUMBER) for name in (  # absent from older rows
    "interrupt_share", "sibling_share", "throttled_share", "taken_share")}
RANK_CONTENTION = {"other_cpu_share?": Maybe(NUMBER), "steal_share?": Maybe(NUMBER), **NEWER_SHARES}
CONTENTION = {"contended": BOOL, "other_cpu_share": Maybe(NUMBER), "steal_share": Maybe(NUMBER),
              **NEWER_SHARES, "per_rank?": Maybe([RANK_CONTENTION])}
EPOCH = {"epoch": COUNT, "seconds": POSITIVE, "samples": COUNT, "rate?": Maybe(RATE),
         "loss": NUMBER, "accuracy": SHARE, "seconds_per_rank": [SECONDS],
         "contention": CONTENTION, "input_seconds?": Maybe(SECONDS),  # schema 2 had no input
         "evaluation_seconds?": SECONDS,  # only with a target accuracy
         "untimed_seconds": SECONDS}  # what ran between steps and is no training (a tracer)
RANK_ATTRIBUTION = {
    "parts": {part: {"seconds": NUMBER, "median": NUMBER, "p10": NUMBER, "p90": NUMBER}
              for part in PARTS},
    "steps": WHOLE, "residual_seconds": NUMBER, "adds_up": BOOL,
    "windows_seconds?": NUMBER,  # schema 18 on: the steps' windows in all
    "collective": {"busy_seconds": NUMBER, "moving_seconds": NUMBER, "moving_median": NUMBER,
                   "bytes_per_step": Maybe(WHOLE), "busy_median?": NUMBER,  # schema 12 on
                   "overlapped_seconds?": NUMBER, "overlapped_median?": NUMBER,
                   "overlap_share?": Maybe(NUMBER),
                   "collectives_per_step?": Maybe(NUMBER),  # schema 16 on
                   # schema 18 on: the steps that carry collectives, and on them alone the means
                   # a step (common.measuring.basis)
                   "basis_steps?": WHOLE, "exposed_mean?": NUMBER, "waiting_mean?": NUMBER,
                   "busy_mean?": NUMBER, "overlapped_mean?": NUMBER, "moving_mean?": NUMBER},
    # schema 15 on: the step as a timeline (common.measuring.timeline), seconds from backward's
    # start
    "timeline?": Maybe({"steps": WHOLE, "backward_seconds": NUMBER,
                        "gradients": [{"ready": NUMBER, "bytes": WHOLE}],
                        "collectives": [{"launch": NUMBER, "end": NUMBER, "bytes": Maybe(WHOLE)}],
                        "after_backward": Maybe({"steps": WHOLE, "bytes": Maybe(WHOLE),
                                                 "seconds": NUMBER, "all": BOOL})})}
NESTED = {
    "epochs": [EPOCH], "crashes": [TEXT],
    "env": {"host?": Maybe(TEXT), "cpu_count?": Maybe(WHOLE), "python?": Maybe(TEXT),
            "packages?": Maybe(Each(Maybe(TEXT))), "git_commit?": Maybe(TEXT),
            "imported_without?": Maybe([TEXT])},
    "evidence": Maybe({"replica_weight_digests?": Maybe([TEXT]),
                       "global_batches_digests?": Maybe([TEXT]),
                       "distributed_sampler_digests?": Maybe([TEXT]),
                       "shard_overlap?": Maybe([NUMBER]),
                       "batchnorm?": Maybe({"max_relative_difference": Maybe(NUMBER)})}),
    "backend_details": {"reduction?": Maybe(TEXT), "collective_library?": Maybe(TEXT),
                        "math?": Maybe({"matmul?": Maybe(TEXT), "convolution?": Maybe(TEXT),
                                        "precision?": Maybe(TEXT), "lower?": Maybe(TEXT),
                                        "loss_scale?": Maybe([NUMBER])}),
                        "traffic?": Maybe([{"what": TEXT, "bytes": NUMBER, "how": TEXT,
                                            "basis": TEXT}])},
    "hosts": Maybe([TEXT]), "peak_memory_per_device": Maybe([WHOLE]),
    "model_state_per_device": Maybe([WHOLE]),
    "time_to_target": Maybe({
        "target": NUMBER, "evals_per_epoch": WHOLE, "converged": BOOL, "seconds": Maybe(NUMBER),
        "training_seconds": Maybe(NUMBER), "samples": Maybe(WHOLE), "epochs": Maybe(NUMBER),
        "curve": [{"epoch": WHOLE, "step": WHOLE, "samples": WHOLE, "epochs": NUMBER,
                   "accuracy": NUMBER, "seconds": NUMBER, "training_seconds": NUMBER}]}),
    "attribution": Maybe({"how": Each(TEXT), "epochs": [
        {"ranks": [RANK_ATTRIBUTION], "slowest_rank": Maybe(WHOLE)}],
        # schema 18 on: the step's collectives replayed alone (common.measuring.alone)
        "alone?": Maybe({"seconds": NUMBER, "low": NUMBER, "high": NUMBER, "repeats": WHOLE,
                         "messages": WHOLE, "bytes": WHOLE, "source": TEXT})}),
    "invariants": [TEXT],
    "cluster": Maybe({"launcher": TEXT, "version": TEXT, "nodes": [
        {"name": TEXT, "address": TEXT, "resources": Each(NUMBER), "bundle": Each(NUMBER)}]}),
}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def make_row(cell, run_id: str, started_at: str, status: str, error: str | None,
             framework: str | None, measurement: Measurement | None, env: dict,
             log: str | None, cell_seconds: float, threads_per_device: int,
             batchnorm: str | None = None, crashes: list[str] = (), *, model: Model,
             cluster: dict | None = None) -> dict:
    """The result row of one run of `cell` (a common.grids.grid.Cell): identity, the cell's
    configuration (with the compute threads per device it ran with, and what its backend does
    with BatchNorm's statistics across replicas where the model has BatchNorm), the measurement
    when the run was ok, and how the run went (`crashes`: the errors of the attempts before it
    whose processes crashed). `model`: the cell's, as the runner resolved it for the cell;
    `cluster`: where it ran, as its launcher's engine saw it (Ray's launcher alone says)."""
    measured = measurement.to_dict() if measurement else {}
    memory = measured.get("peak_memory_per_device")
    row = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "grid": cell.grid,
        "cell_key": cell.key, "repeat": cell.repeat, "look": cell.look, "status": status,
        "error": error,
        "started_at": started_at, "finished_at": now(),
        **{s.row_name: s.row_value(getattr(cell, s.field_name)) for s in IN_ROW},
        "framework": framework, "params": measured.get("params", model.parameters()),
        "flops_per_sample": model.flops_per_sample(framework),
        "global_batch": cell.global_batch,
        "per_device_batch": cell.per_device_batch, "world_size": cell.world,
        "threads_per_device": threads_per_device, "threads_pinned": bool(cell.threads),
        "batch_sweep": cell.sweep or None, "batchnorm": batchnorm,
        **{name: measured.get(name) for name in MEASUREMENTS},
        "epochs": measured.get("epochs", []),
        "peak_memory_bytes": max(memory) if memory else None,
        "backend_details": measured.get("backend_details", {}),
        "cell_seconds": cell_seconds, "log": log, "env": env, "crashes": list(crashes),
        "cluster": cluster,
    }
    row["invariants"] = broken(row)
    assert row.keys() == FIELDS.keys(), set(row) ^ set(FIELDS)
    return row


def row_problem(row: Any) -> str | None:
    """Why `row` is not a result row of this schema (None if it is one). Unknown extra fields
    are allowed; a missing field, a value of the wrong type or shape (nested ones included),
    or a version this xbench does not read are not."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if "schema_version" not in row:
        return "no 'schema_version' field"
    version = row["schema_version"]
    if type(version) is not int:
        return f"'schema_version' is {type(version).__name__}, not a whole number"
    if version in OLDER_VERSIONS:
        return OLDER_VERSIONS[version]
    if version != SCHEMA_VERSION:
        given = version if abs(version) < 10 ** 9 else "(a very large number)"
        return (f"schema_version {given} is not {SCHEMA_VERSION}, the version this xbench "
                f"reads; report it with the xbench that wrote it")
    status = row.get("status")
    if status not in STATUSES:
        return f"status {shown(status)} is not one of {', '.join(STATUSES)}"
    for name, (kinds, required) in FIELDS.items():
        if name not in row:
            return f"no '{name}' field"
        value = row[name]
        if value is None:
            if not _may_be_null(required, status):
                return f"'{name}' is null in a row with status {status!r}"
            continue
        if not is_kind(value, kinds):
            return (f"'{name}' is {shown(value)}, not "
                    f"{' or '.join(k.__name__ for k in kinds)}")
        problem = shape_problem(value, NESTED[name], name) if name in NESTED else None
        if problem:
            return problem
    small = [name for name in AT_LEAST_ONE if row[name] < 1]
    if small:
        return f"{', '.join(small)} below 1"
    problem = next(filter(None, (RANGES[name].problem(row[name], name) for name in RANGES
                                 if row[name] is not None)), None)
    if problem:
        return problem
    beyond = [e for e in row["epochs"]
              if row["train_samples"] is not None and e["samples"] > row["train_samples"]]
    if beyond:
        return (f"epoch {beyond[0]['epoch']} trained {beyond[0]['samples']:,} samples, more "
                f"than the {row['train_samples']:,} of its training set")
    too_fast = next((e for e in row["epochs"]
                     if e["seconds"] < _steps(e, row) * FASTEST_STEP_SECONDS), None)
    if too_fast:
        return (f"epoch {too_fast['epoch']} took {too_fast['seconds']:.3g} s for "
                f"{_steps(too_fast, row):,} step(s), under {FASTEST_STEP_SECONDS * 1e6:g} µs a "
                f"step: faster than any device trains, so not a measurement")
    if row["repeat"] < 0 or row["look"] < 0:
        return f"'{'repeat' if row['repeat'] < 0 else 'look'}' is negative"
    if status == "ok" and len(row["epochs"]) < 2:
        return (f"an ok row with {len(row['epochs'])} epoch(s); every ok row has at least 2 "
                f"(the first is warm-up)")
    if not _valid_text(row):
        return "a text in it is not valid Unicode (a lone surrogate)"
    return None


def _steps(epoch: dict, row: dict) -> int:
    """The optimizer steps an epoch of the row took: its samples in global batches."""
    return -(-epoch["samples"] // row["global_batch"])


def _valid_text(value) -> bool:
    """True if every string (and key) in `value` can be written as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_valid_text(k) and _valid_text(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_valid_text(v) for v in value)
    return True


def _may_be_null(required: str, status: str) -> bool:
    return (required == "never" or (required == "ok" and status != "ok")
            or (required == "not ok" and status == "ok"))
