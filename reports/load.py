"""Results files -> one pandas frame of rows, each tagged with the environment it was measured in.

Rows are read only through `common.results.store.read_rows`, which validates each against the schema; a
line that is not a valid row becomes a problem (reported, never fatal), so a damaged file still
gives a report of what it holds.
"""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from xbench.common.errors import UserError
from xbench.common.results.probes import probe_path, read_probes
from xbench.common.results.store import flat_table, read_rows, results_files
from xbench.common.workload.compression import label as compression_label
from xbench.reports.query import select

CONFIG_FIELDS = ("backend", "model", "dataset", "dataset_multiple", "batch_mode", "global_batch",
                 "per_device_batch", "devices")
# Rows agreeing on all of these come from the same machine and software: only they are averaged.
ENVIRONMENT_FIELDS = ("host", "cpu_count", "python", "packages")
NUMBERS = ("epoch1_rate", "epoch2_rate", "epoch1_seconds", "epoch2_seconds", "epoch1_samples",
           "epoch2_samples", "threads_per_device",
           "step_time_p50", "step_time_p90", "startup_seconds", "test_accuracy",
           "peak_memory_bytes")


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
    """One record per row: the flat fields, plus env label, series label, batch and epoch extras."""
    frame = pd.DataFrame(flat_table(rows), columns=None if rows else ["status", "cell_key"])
    for column in (*CONFIG_FIELDS, "error", "repeat", "device_type", "device_name",
                   "threads_pinned", "framework", "seed", "max_train_samples", *NUMBERS):
        if column not in frame:
            frame[column] = None
    for column in NUMBERS:
        frame[column] = numbers(frame[column])
    frame["memory_per_device"] = [row.get("peak_memory_per_device") for row in rows]
    frame["model_state_per_device"] = [row.get("model_state_per_device") for row in rows]
    frame["epoch_list"] = [[e for e in row.get("epochs") or [] if isinstance(e, dict)]
                           for row in rows]
    last = [epochs[-1] if epochs else {} for epochs in frame["epoch_list"]]
    frame["last_epoch"] = [e.get("epoch") for e in last]
    # the epochs a run was given (its key's e<N>): a run to a target may stop before them
    frame["epochs_given"] = [int(m[1]) if (m := EPOCHS_PART.search(str(key))) else None
                             for key in frame["cell_key"]]
    frame["last_loss"] = numbers([e.get("loss") for e in last])
    frame["last_accuracy"] = numbers([e.get("accuracy") for e in last])
    frame["first_epoch_overhead"] = frame["epoch1_seconds"] - frame["epoch2_seconds"]
    frame["batch"] = np.where(frame["batch_mode"] == "per_device", frame["per_device_batch"],
                              frame["global_batch"])
    frame["env_key"] = [environment_key(row.get("env") or {}) for row in rows]
    labels = {key: chr(ord("A") + i) if i < 26 else f"E{i}"
              for i, key in enumerate(dict.fromkeys(frame["env_key"]))}
    frame["env"] = frame["env_key"].map(labels)
    frame["env_record"] = [row.get("env") or {} for row in rows]
    # A cell's devices in the report are all its devices, over its nodes (the rows say per node).
    frame["nodes"] = [row.get("nodes", 1) for row in rows]
    frame["devices_per_node"] = frame["devices"]
    frame["devices"] = [row.get("world_size", row.get("devices")) for row in rows]
    frame["series"] = [series_label(b, d, e, len(labels), n) for b, d, e, n in
                       zip(frame["backend"], frame["dataset"], frame["env"], frame["nodes"])]
    frame["contended"] = [bool(row.get("contended")) for row in rows]
    frame["usable"] = (frame["status"] == "ok") & (include_contended
                                                   | ~frame["contended"].astype(bool))
    details = [row.get("backend_details") or {} for row in rows]
    frame["reduction"] = [d.get("reduction") for d in details]
    frame["collective_library"] = [d.get("collective_library") for d in details]
    frame["traffic"] = [d.get("traffic") or [] for d in details]
    frame["math"] = [d.get("math") or {} for d in details]
    frame["cores"] = [(row.get("env") or {}).get("cpu_count") for row in rows]
    frame["training"] = [training_label(row) for row in rows]
    # the same without an injected fault: what a capped cell's uncapped twin trains with
    frame["training_without_fault"] = [training_label({**row, "inject": "none"}) for row in rows]
    frame["epoch_input_seconds"] = [[e.get("input_seconds") for e in epochs]
                                    for epochs in frame["epoch_list"]]
    evidence = [row.get("evidence") or {} for row in rows]
    frame["global_digests"] = [tuple(e.get("global_batches_digests") or ()) or None
                               for e in evidence]
    frame["sampler_digests"] = [tuple(e.get("distributed_sampler_digests") or ()) or None
                                for e in evidence]
    frame["shard_overlap"] = [max(e.get("shard_overlap") or [0]) for e in evidence]
    frame["replicas_agree"] = [len(set(e.get("replica_weight_digests") or [])) <= 1
                               for e in evidence]
    frame["batchnorm"] = [row.get("batchnorm") for row in rows]
    frame["crashes"] = [len(row.get("crashes") or []) for row in rows]
    frame["inject"] = [row.get("inject", "none") for row in rows]
    frame["compression"] = [row.get("compression", "none") for row in rows]
    frame["precision"] = [row.get("precision", "framework-default") for row in rows]
    frame["powersgd_rank"] = [row.get("powersgd_rank", 1) for row in rows]
    frame["attribution"] = [row.get("attribution") for row in rows]
    frame["target_accuracy"] = [row.get("target_accuracy") for row in rows]
    frame["evals_per_epoch"] = [row.get("evals_per_epoch") for row in rows]
    frame["time_to_target"] = [row.get("time_to_target") for row in rows]
    frame["batchnorm_difference"] = numbers([(e.get("batchnorm") or {}).get(
        "max_relative_difference") for e in evidence])
    return frame


EPOCHS_PART = re.compile(r"\|e(\d+)\|")


def numbers(values):
    """Floats, NaN where a value is missing or not a number."""
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)


def load_probes(paths, frame):
    """({env label: {"matmul": [...], "all_reduce": [...]}}, problems): the records of the probe
    files beside the results files (common.measuring.limits), each given to the environment of the rows it
    was measured in; where several measured the same thing, the newest counts."""
    labels = dict(zip(frame["env_key"], frame["env"])) if len(frame) else {}
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


def training_label(row):
    """The row's training settings in a few words ('adam 0.001'; 'sgd 0.1 m0.9 wd0.0005, lr
    linear/128, warm-up 1'; '..., no set_epoch'; '..., pinned-non-blocking, 2 loader workers';
    '..., precision bf16, compressed fp16'; '..., reshard after-backward')."""
    label = f"{row.get('optimizer', 'adam')} {row.get('lr', 1e-3):g}"
    if row.get("momentum"):
        label += f" m{row['momentum']:g}"
    if row.get("weight_decay"):
        label += f" wd{row['weight_decay']:g}"
    if row.get("lr_scaling", "none") != "none":
        label += f", lr {row['lr_scaling']}/{row.get('reference_batch')}"
    if row.get("warmup_epochs"):
        label += f", warm-up {row['warmup_epochs']}"
    if row.get("set_epoch") is False:
        label += ", no set_epoch"
    if row.get("host_memory", "pageable") != "pageable":
        label += f", {row['host_memory']}"
    if row.get("loader_workers"):
        label += f", {row['loader_workers']} loader workers"
    if row.get("precision", "framework-default") != "framework-default":
        label += f", precision {row['precision']}"
    if row.get("compression", "none") != "none":
        label += f", compressed {compression_label(row['compression'], row.get('powersgd_rank'))}"
    if row.get("reshard", "after-forward") != "after-forward":
        label += f", reshard {row['reshard']}"
    if row.get("pin_ranks"):
        label += ", ranks pinned"
    if row.get("inject", "none") != "none":
        label += f", inject {row['inject']}"
    return label


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
