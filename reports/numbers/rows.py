"""Results files -> one pandas frame of rows, each tagged with the environment it was measured in.

Rows are read only through `common.results.store.read_rows`, which validates each against the
schema; a line that is not a valid row becomes a problem (reported, never fatal), so a damaged
file still gives a report of what it holds.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from xbench.common.errors import UserError
from xbench.common.grids.columns import training_label
from xbench.common.grids.setting import Role
from xbench.common.grids.settings import IN_ROW
from xbench.common.measuring.contention import taken_share
from xbench.common.results.invariants import broken
from xbench.common.results.probes import probe_path, read_probes
from xbench.common.results.store import flat_table, read_rows, results_files
from xbench.reports.numbers.query import select

# Rows agreeing on all of these come from the same machine and software: only they are averaged.
ENVIRONMENT_FIELDS = ("host", "cpu_count", "python", "packages")
NUMBERS = ("epoch1_rate", "epoch2_rate", "epoch1_seconds", "epoch2_seconds", "epoch1_samples",
           "epoch2_samples", "threads_per_device",
           "step_time_p50", "step_time_p90", "startup_seconds", "test_accuracy",
           "test_loss", "peak_memory_bytes", "warmup_seconds")
# Every row of the frame has each setting's column (a row of an older schema is upgraded on
# reading with what it had implicitly), and these of the configuration and measurement.
ALWAYS = ("error", "repeat", "look", "device_type", "device_name", "framework",
          "global_batch", "per_device_batch", "world_size", *NUMBERS)


def newest_results(folder):
    """The most recently modified *.jsonl in `folder` (the default of `xbench report`)."""
    files = sorted(results_files(folder), key=lambda p: p.stat().st_mtime)
    if not files:
        raise UserError(f"no results file (*.jsonl) in {folder}/; run a grid first "
                        f"(`xbench grid --preset smoke`) or name a results file")
    return files[-1]


def load(paths, where=None, include_contended=False):
    """(frame, problems): the valid rows of every file (filtered by `where`), and what was
    wrong with the others. A row's `usable` says whether its measurements enter the statistics:
    it ran ok and was not contended (unless `include_contended`). A row read before, in this
    file or another, is dropped and counted (common.results.store.read_rows)."""
    rows, problems, seen = [], [], set()
    for path in paths:
        try:
            file_rows, file_problems = read_rows(path, seen)
        except OSError as e:
            raise UserError(f"cannot read the results file {path}: {e.strerror}") from None
        problems += file_problems
        rows += [{**row, "source": Path(path).name} for row in file_rows]
    return select(rows_frame(rows, include_contended), where), problems


def rows_frame(rows, include_contended=False):
    """One record per row: the flat fields (every setting's among them, read as fields), plus
    the environment's and the series' labels, the training label, and the nested values the
    report reads."""
    frame = pd.DataFrame(flat_table(rows), columns=None if rows else ["status", "cell_key"])
    for column in (*(s.row_name for s in IN_ROW), *ALWAYS):
        if column not in frame:
            frame[column] = None
    for column in NUMBERS:
        frame[column] = numbers(frame[column])
    frame["batch"] = np.where(frame["batch_mode"] == "per_device", frame["per_device_batch"],
                              frame["global_batch"])
    add_epochs(frame, rows)
    add_environment(frame, rows)
    # A cell's devices in the report are all its devices, over its nodes (the rows say per node).
    frame["devices_per_node"] = frame["devices"]
    frame["devices"] = frame["world_size"]
    frame["series"] = [series_label(b, d, e, frame["env"].nunique(), n) for b, d, e, n in
                       zip(frame["backend"], frame["dataset"], frame["env"], frame["nodes"],
                           strict=True)]
    frame["contended"] = [bool(row.get("contended")) for row in rows]
    frame["taken_share"] = [most_taken(row) for row in rows]
    frame["usable"] = (frame["status"] == "ok") & (include_contended
                                                   | ~frame["contended"].astype(bool))
    frame["training"] = [training_label(row) for row in rows]
    frame["training_without_fault"] = [training_label(row, (Role.TRAINING,)) for row in rows]
    add_details(frame, rows)
    return frame


def most_taken(row) -> float:
    """The largest share of a rank's cores that other processes, interrupts, busy siblings,
    steal and throttling took in any of the row's timed epochs (0 where none was watched): with
    `--where "taken_share <= 0.05"` a reader holds a stricter limit than the grid's."""
    watched = [epoch.get("contention") or {} for epoch in row.get("epochs") or []
               if isinstance(epoch, dict)]
    return max((taken_share(rank) for epoch in watched  # before schema 7: the epoch's alone
                for rank in epoch.get("per_rank") or [epoch]), default=0.0)


def add_epochs(frame, rows):
    """The epochs' records, the last one's loss and accuracy, and the first epoch's extra time."""
    frame["epoch_list"] = [[e for e in row.get("epochs") or [] if isinstance(e, dict)]
                           for row in rows]
    last = [epochs[-1] if epochs else {} for epochs in frame["epoch_list"]]
    frame["last_epoch"] = [e.get("epoch") for e in last]
    frame["last_loss"] = numbers([e.get("loss") for e in last])
    frame["last_accuracy"] = numbers([e.get("accuracy") for e in last])
    frame["first_epoch_overhead"] = frame["epoch1_seconds"] - frame["epoch2_seconds"]
    frame["epoch_input_seconds"] = [[e.get("input_seconds") for e in epochs]
                                    for epochs in frame["epoch_list"]]


def add_environment(frame, rows):
    """Each row's environment, its key and its label (A, B, ...), and its cores."""
    frame["env_record"] = [row.get("env") or {} for row in rows]
    frame["env_key"] = [environment_key(env) for env in frame["env_record"]]
    labels = {key: environment_label(i) for i, key in enumerate(dict.fromkeys(frame["env_key"]))}
    frame["env"] = frame["env_key"].map(labels)
    frame["cores"] = [env.get("cpu_count") for env in frame["env_record"]]


def environment_label(number: int) -> str:
    """The label of the environment first seen `number`th (from 0): A ... Z, then E26, E27, ..."""
    return chr(ord("A") + number) if number < 26 else f"E{number}"


def environment_number(label: str) -> int:
    """Which environment a label names (environment_label's inverse): what keeps its line style
    the same in every figure, whichever environments a figure holds."""
    return ord(label) - ord("A") if len(label) == 1 else int(label[1:])


def add_details(frame, rows):
    """What the report reads of the nested values: the backend's details, the evidence, memory,
    crashes, the attribution and the time to a target."""
    details = [row.get("backend_details") or {} for row in rows]
    frame["reduction"] = [d.get("reduction") for d in details]
    frame["collective_library"] = [d.get("collective_library") for d in details]
    frame["traffic"] = [d.get("traffic") or [] for d in details]
    frame["math"] = [d.get("math") or {} for d in details]
    compiled = [d.get("compiled") or {} for d in details]  # schema 16 on
    frame["compiled"] = [c.get("compiled") for c in compiled]
    frame["compiled_how"] = [c.get("how") for c in compiled]
    evidence = [row.get("evidence") or {} for row in rows]
    frame["global_digests"] = [tuple(e.get("global_batches_digests") or ()) or None
                               for e in evidence]
    frame["sampler_digests"] = [tuple(e.get("distributed_sampler_digests") or ()) or None
                                for e in evidence]
    frame["shard_overlap"] = [max(e.get("shard_overlap") or [0]) for e in evidence]
    frame["replicas_agree"] = [len(set(e.get("replica_weight_digests") or [])) <= 1
                               for e in evidence]
    frame["batchnorm_difference"] = numbers([(e.get("batchnorm") or {}).get(
        "max_relative_difference") for e in evidence])
    for name in ("peak_memory_per_device", "model_state_per_device", "attribution",
                 "time_to_target", "batchnorm"):
        frame[name] = [row.get(name) for row in rows]
    frame["memory_per_device"] = frame["peak_memory_per_device"]
    # checked again as read, whatever the row says of itself (common.results.invariants)
    frame["broken"] = [tuple(broken(row)) for row in rows]
    frame["crashes"] = [len(row.get("crashes") or []) for row in rows]


def numbers(values):
    """Floats, NaN where a value is missing or not a number."""
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)


def load_probes(paths, frame):
    """({env label: {"matmul": [...], "all_reduce": [...]}}, problems): the records of the probe
    files beside the results files (common.measuring.peaks), each given to the environment of
    the rows it was measured in; where several measured the same thing, the newest counts."""
    labels = dict(zip(frame["env_key"], frame["env"], strict=True)) if len(frame) else {}
    found, problems = {}, []
    for path in dict.fromkeys(probe_path(p) for p in paths):
        records, file_problems = read_probes(path)
        problems += file_problems
        for record in sorted(records, key=lambda r: r.get("measured_at", "")):
            label = labels.get(environment_key(record.get("env") or {}))
            if label is None:
                continue
            merged = found.setdefault(label, {"matmul": [], "all_reduce": []})
            merged["matmul"] += record.get("matmul", [])
            merged["all_reduce"] += record.get("all_reduce", [])
    return found, problems


def environment_key(env):
    return json.dumps([env.get(field) for field in ENVIRONMENT_FIELDS], sort_keys=True, default=str)


def series_label(backend, dataset, env, environments, nodes=1):
    """What a line in a figure is: the backend, marked when its cells span nodes, are synthetic,
    or come from one of several environments."""
    label = str(backend) + (f" ({nodes} nodes)" if nodes > 1 else "")
    if dataset == "synthetic":
        label += " (synthetic)"
    if environments > 1:
        label += f" [env {env}]"
    return label
