"""The numbers of the report, from the frame of rows (reports.numbers.rows): one place for every
formula (with reports.numbers.repeats: what a cell keeps of its repeats).

Repeats of a configuration are averaged only within one environment (machine and versions); the
environment label is part of every grouping key below. Only `usable` rows (ok, and not contended
unless asked) enter the statistics. A rate is samples / mean epoch time; every ratio of rates is
a ratio of mean epoch times with Fieller's interval (reports.numbers.stats).
"""
import math

import numpy as np
import pandas as pd

from xbench.common.backends.protocol import Protocol
from xbench.common.backends.traits import TRAITS, protocol_of, references
from xbench.common.grids.columns import columns, draws
from xbench.common.grids.setting import Role
from xbench.common.grids.settings import SETTINGS
from xbench.common.measuring.attribution import PARTS
from xbench.common.workload.compression import wire_bytes
from xbench.common.workload.resolve import own_model
from xbench.reports.numbers.communication import COLUMNS as COMMUNICATION_COLUMNS
from xbench.reports.numbers.communication import communication_columns
from xbench.reports.numbers.repeats import epoch_rate, evidence_of, repeated_values, statuses_text
from xbench.reports.numbers.stats import difference_of_means, ratio_of_means, summarize

# The columns of the settings by their role (common.grids.columns): never listed by hand here.
PLACED = columns(Role.PLACEMENT)  # the backend, nodes and devices a report compares
WORKLOAD = columns(Role.SETUP)  # what is trained on what: model, data, batch, epochs, seed, ...
AXES = columns(Role.SETUP, axes=True)  # the setup's axes a figure varies or holds fixed
# What identifies a cell in a table of the report.
CONFIG = ["env", "series", *PLACED, *WORKLOAD, "global_batch", "per_device_batch"]
# Besides the backend, what must agree for two cells to be compared (speedup, baselines): the
# setup, the device type and the training (its label: every training choice and fault).
SETUP = ["env", "backend", "device_type", *WORKLOAD, "training"]
BATCH = SETTINGS["batches"].column_name  # the batch a cell holds fixed, per its batch_mode
BATCH_MODE, DATASET = SETTINGS["batch_mode"].column_name, SETTINGS["data"].column_name
# The order of cells within a backend in every table: data, model, multiple, batch, devices.
CELL_ORDER = [DATASET, *(c for c in AXES if c != BATCH), BATCH_MODE, BATCH, "devices"]
# What trains on the same samples in the same global batches, whatever runs it.
SAME_WORK = ["env", *[c for c in WORKLOAD if c not in ("batch_mode", BATCH)], "global_batch"]
METRICS = ["step_time_p50", "step_time_p90", "startup_seconds", "first_epoch_overhead",
           "warmup_seconds",
           "test_accuracy", "test_loss", "last_loss", "last_accuracy", "peak_memory_bytes"]


def configuration(frame: pd.DataFrame, training: str = "training") -> pd.Series:
    """Each row's configuration: everything but its draw (the seed), whose runs are its seeds;
    with `training="training_without_fault"`, a fault's cell shares its twin's."""
    key = ["env", *PLACED, *[c for c in WORKLOAD if c not in draws()], training]
    return pd.Series(["|".join(map(str, values)) for values in frame[key].itertuples(index=False)],
                     index=frame.index, dtype=object)


def backend_order(name):
    """Sort key: the traits table's order, unknown names after it."""
    names = list(TRAITS)
    return (names.index(name), "") if name in names else (len(names), str(name))


def batch_kind(batch_mode):
    """How a batch of this batch_mode is counted: 'per-device' or 'global'."""
    return "per-device" if batch_mode == "per_device" else "global"


def devices_text(count):
    return f"{count} device" + ("" if count == 1 else "s")


def single_device_reference(framework):
    """The registered backend with no parallel wrapper for `framework` (None if there is none)."""
    return references().get(framework)


def cell_table(frame):
    """One row per configuration and environment: its statuses, and over its usable repeats the
    rate (samples / mean epoch time, with the interval of that mean) and n / mean / std / 95% CI
    of every other metric. The repeats' epoch times are kept for the ratios."""
    records = []
    for (_, key), group in frame.groupby(["env", "cell_key"], sort=False):
        ok, ran = group[group["usable"]], group[group["status"] == "ok"]
        first = (ok if len(ok) else group).iloc[0]
        record = {column: first[column] for column in FIRST_RUN}
        record.update(cell_key=key, scaling=scaling_kind(first["batch_mode"]),
                      n=len(ok), runs=len(group), looks=int(group["look"].max()),
                      statuses=statuses_text(group),
                      contended_runs=int((group["status"].eq("ok") & group["contended"]).sum()),
                      steps_per_epoch=first["epoch2_samples"] / first["global_batch"],
                      **repeated_values(ok), **evidence_of(ran))
        for epoch in (1, 2):
            record.update(epoch_rate(ok, epoch, first[f"epoch{epoch}_samples"]))
        for metric in METRICS:
            summary = summarize(ok[metric])
            record.update({metric: summary["mean"], f"{metric}_std": summary["std"],
                           f"{metric}_ci": summary["ci"]})
        records.append(record)
    table = pd.DataFrame(records, columns=CELL_COLUMNS)
    if table.empty:
        return table
    table["_order"] = table["backend"].map(backend_order)
    return (table.sort_values(["env", "_order", *CELL_ORDER])
            .drop(columns="_order").reset_index(drop=True))


# What a cell takes from its first usable run: its configuration, the settings a report reads,
# and what the run recorded of how it ran.
FIRST_RUN = list(dict.fromkeys([
    *CONFIG, *SETUP, *columns(Role.TRAINING, Role.FAULT), "training_without_fault",
    "device_name", "framework", "threads_per_device", "reduction", "collective_library",
    "cores", "devices_per_node", "batch_sweep", "traffic", "math", "compiled", "compiled_how",
    "epoch2_samples",
    "batchnorm", "params", "flops_per_sample"]))


CELL_COLUMNS = [
    *FIRST_RUN, "cell_key", "scaling", "n", "runs", "looks", "statuses", "contended_runs",
    "steps_per_epoch", "epoch2_input_seconds", "memory_per_device", "model_state_per_device",
    "epoch_means", "batchnorm_difference", "test_accuracy_values", "attributions", "epoch2_runs",
    "global_digests", "sampler_digests", "shard_overlap", "replicas_agree",
    *[f"epoch{e}_{field}" for e in (1, 2) for field in (
        "seconds_values", "seconds", "seconds_ci", "rate", "rate_low", "rate_high")],
    *[f"{m}{suffix}" for m in METRICS for suffix in ("", "_std", "_ci")]]


def scaling_kind(batch_mode):
    """'strong' when the global batch stays fixed as devices grow, 'weak' when the per-device
    batch does."""
    return "weak" if batch_mode == "per_device" else "strong"


def measured(cells):
    """The cells with at least one usable repeat."""
    if cells.empty:
        return cells
    return cells[cells["n"] > 0]


def failures(frame):
    """Every run that did not finish ok, with its status and reason."""
    failed = frame[frame["status"] != "ok"]
    return failed[["env", "cell_key", "repeat", "status", "error"]].reset_index(drop=True)


def scaling(cells):
    """Speedup R(N)/R(1) of the epoch-2 rate and efficiency speedup/N, each with its 95% interval,
    against the 1-device cell of the same setup and batch; strong scaling when the global batch
    is fixed, weak when the per-device batch is. Efficiency above 100% is marked suspect."""
    ok = measured(cells)
    if ok.empty:
        return pd.DataFrame(columns=[*CONFIG, "speedup", "efficiency", "scaling", "suspect"])
    ones = ok[ok["devices"] == 1][[*SETUP, "n", "epoch2_rate", "epoch2_seconds_values",
                                   "epoch2_samples", "cell_key"]]
    out = ok.merge(ones, on=SETUP, suffixes=("", "_ref"))
    out["speedup_ratio"] = [ratio_of_means(t1, tn).scaled(sn / s1) for t1, tn, sn, s1 in zip(
        out["epoch2_seconds_values_ref"], out["epoch2_seconds_values"], out["epoch2_samples"],
        out["epoch2_samples_ref"], strict=True)]
    out["speedup"] = [r.value for r in out["speedup_ratio"]]
    out["efficiency_ratio"] = [r.scaled(1 / n) for r, n in zip(out["speedup_ratio"],
                                                                out["devices"], strict=True)]
    out["efficiency"] = [r.value for r in out["efficiency_ratio"]]
    out["suspect"] = out["efficiency"] > 1
    out["rate_1"] = out["epoch2_rate_ref"]
    return out


def attribution(cells, centre: str = "mean"):
    """Per measured cell with attributed runs: each part per step (ms, the mean over repeats,
    with its interval) and its share of the step; the epoch's compute (input, forward,
    backward, optimizer, host, and what no step window covered) and communication (waiting for
    the slowest rank, exposed communication) with their intervals, which add up to the epoch
    time; and for a cell whose gradients cross between N > 1 devices, the time its collectives
    moved data per step and the bandwidth that makes (reports.sections.steps says how).
    `centre`: "mean" (the report's, with its interval) or "median" of the runs (what predict
    calibrates on: one slow run moves a mean, not a median of 3)."""
    ok = measured(cells)
    ok = ok[ok["attributions"].map(bool)] if len(ok) else ok
    records = []
    for _, cell in ok.iterrows():
        runs = cell["attributions"]
        record = {**{column: cell[column] for column in CONFIG},
                  **{column: cell[column] for column in (
                      "cell_key", "training", "reduction", "collective_library", "scaling",
                      "epoch2_seconds", "epoch2_seconds_ci", "n")},
                  "n_attributed": len(runs), "adds_up": all(r["adds_up"] for r in runs),
                  "residual_share": max(abs(r["residual"]) / max(sum(r["parts"].values()), 1e-12)
                                        for r in runs),
                  "how": runs[0]["how"], "slowest_rank": runs[0]["slowest_rank"]}
        for part in PARTS:
            values = [r["parts"][part] / r["steps"] for r in runs]
            per_step = summarize(values)
            record[f"{part}_step"] = per_step["mean"] if centre == "mean" else float(
                np.median(values))
            record[f"{part}_step_ci"] = per_step["ci"]
        step = sum(record[f"{part}_step"] for part in PARTS)
        record.update({f"{part}_share": record[f"{part}_step"] / step if step else math.nan
                       for part in PARTS})
        for name, parts in (("comm", COMMUNICATION_PARTS),
                            ("compute", [p for p in PARTS if p not in COMMUNICATION_PARTS])):
            total = summarize([sum(r["parts"][p] for p in parts)
                               + (r["residual"] if name == "compute" else 0) for r in runs])
            record[f"{name}_epoch_seconds"], record[f"{name}_epoch_ci"] = total["mean"], total["ci"]
        record.update(communication_columns(cell, runs, wire_size(cell),
                                            protocol(cell).is_all_reduce, centre))
        records.append(record)
    return pd.DataFrame(records, columns=ATTRIBUTION_COLUMNS)


COMMUNICATION_PARTS = ("waiting", "communication")
ATTRIBUTION_COLUMNS = [
    *CONFIG, "cell_key", "training", "reduction", "collective_library", "scaling",
    "epoch2_seconds", "epoch2_seconds_ci", "n",
    "n_attributed",
    "adds_up", "residual_share", "how", "slowest_rank",
    *[f"{part}{suffix}" for part in PARTS for suffix in ("_step", "_step_ci", "_share")],
    "compute_epoch_seconds", "compute_epoch_ci", "comm_epoch_seconds", "comm_epoch_ci",
    *COMMUNICATION_COLUMNS]
UNTRACED_LIMIT = 0.10  # a step's share no mark or trace covers above which the report says so


def protocol(cell) -> Protocol:
    """How the cell's gradients crossed: its backend's protocol on its device type, or what its
    row recorded (common.backends.traits.protocol_of)."""
    return protocol_of(cell["backend"], cell.get("device_type"), cell.get("reduction"))


def wire_size(cell) -> float:
    """The bytes a step's gradients put into the all-reduce, under the cell's compression."""
    spec = own_model(cell["model"])
    if spec is None:  # a model file's: one float32 gradient per parameter
        return 4.0 * cell["params"] if cell["compression"] == "none" else math.nan
    return wire_bytes(spec.tensor_shapes(), cell["compression"], cell["powersgd_rank"])


def wrapper_cost(cells):
    """At one device: each backend's epoch-2 rate over its framework's single-device reference
    (no parallel wrapper) in the same setup, with its interval: what the parallel machinery
    costs (below 1) when there is nothing to parallelise."""
    ok = measured(cells)
    if ok.empty:
        return pd.DataFrame(columns=[*CONFIG, "reference", "ratio"])
    ones = ok[ok["devices"] == 1].copy()
    ones["reference"] = ones["framework"].map(single_device_reference)
    family = [c for c in SETUP if c != "backend"]
    references = ones[ones["backend"] == ones["reference"]][
        [*family, "backend", "epoch2_seconds_values", "epoch2_rate", "cell_key"]].rename(
        columns={"backend": "reference"})
    out = ones[ones["backend"] != ones["reference"]].merge(references, on=[*family, "reference"],
                                                           suffixes=("", "_ref"))
    out["ratio"] = [ratio_of_means(ref, mine) for ref, mine in zip(
        out["epoch2_seconds_values_ref"], out["epoch2_seconds_values"], strict=True)]
    return out


def accuracy_change(cells):
    """Per setup and batch: test accuracy on N devices minus on 1 device, with Welch's interval
    (the case study's question: do more devices cost accuracy?)."""
    ok = measured(cells)
    if ok.empty:
        return pd.DataFrame(columns=[*CONFIG, "difference"])
    ones = ok[ok["devices"] == 1][[*SETUP, "test_accuracy", "test_accuracy_values"]]
    out = ok[ok["devices"] > 1].merge(ones, on=SETUP, suffixes=("", "_ref"))
    out["difference"] = [difference_of_means(many, one) for many, one in zip(
        out["test_accuracy_values"], out["test_accuracy_values_ref"], strict=True)]
    return out


def families(cells):
    """The cells grouped by what a user decides for: model, data, batch (everything but the
    backend and the device count); cells with an injected fault are in none."""
    keys = [c for c in SETUP if c != "backend"]
    ok = measured(cells)
    ok = ok[ok["training"] == ok["training_without_fault"]] if len(ok) else ok
    return [] if ok.empty else list(ok.groupby(keys, dropna=False, sort=False))


def held_fixed(*varied: str) -> list[str]:
    """What a figure that varies `varied` holds at its most common value: the setup's other
    axes and the device count; never two batch modes in one figure."""
    held = [c for c in [*AXES, "devices"] if c not in varied]
    return ["batch_mode", *held]


def reference(cells, columns):
    """The most common combination of `columns` among measured cells (ties: the smallest), so a
    figure that varies the other axes can hold these fixed, as the blog's figures do."""
    counts = measured(cells)[columns].value_counts()
    if counts.empty:
        return {}
    return dict(zip(columns, min(counts[counts == counts.max()].index), strict=True))


def at(cells, values):
    """The measured cells whose columns equal `values` (a dict from `reference`)."""
    ok = measured(cells)
    mask = np.ones(len(ok), dtype=bool)
    for column, value in values.items():
        mask &= (ok[column] == value).to_numpy()
    return ok[mask]
