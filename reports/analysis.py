"""The numbers of the report, from the frame of rows (reports.load): one place for every formula.

Repeats of a configuration are averaged only within one environment (machine and versions); the
environment label is part of every grouping key below.
"""
import numpy as np
import pandas as pd

from common.backend import BACKENDS
from common.models import MODELS, gradient_bytes
from reports.stats import summarize

CONFIG = ["env", "series", "backend", "dataset", "model", "dataset_multiple", "batch_mode", "batch",
          "global_batch", "per_device_batch", "devices"]
# Besides the axes in CONFIG, what must agree for two cells to be compared (speedup, baselines).
SETUP = ["env", "series", "backend", "dataset", "model", "dataset_multiple", "seed",
         "max_train_samples", "epochs_run", "device_type"]
METRICS = ["epoch1_rate", "epoch2_rate", "epoch2_seconds", "step_time_p50", "startup_seconds",
           "first_epoch_overhead", "test_accuracy", "last_loss", "last_accuracy",
           "peak_memory_bytes"]
COMMUNICATION_ASSUMPTION = (
    "Compute per step = the median epoch-2 step time of the same backend on 1 device at the same "
    "per-device batch; exposed communication = the N-device step time minus that. Bandwidth "
    "assumes a ring all-reduce of one float32 gradient per parameter (nccl-tests convention): "
    "algbw = gradient bytes / communication time, busbw = algbw × 2(N−1)/N. Communication that "
    "overlaps compute is not seen, so the time is what training waits for, not all the time the "
    "all-reduce takes; where the N-device step is not slower, no bandwidth is shown.")


def backend_order(name):
    """Sort key: the registry's order, unknown names after it."""
    names = list(BACKENDS)
    return (names.index(name), "") if name in names else (len(names), str(name))


def batch_kind(batch_mode):
    """How a batch of this batch_mode is counted: 'per-device' or 'global'."""
    return "per-device" if batch_mode == "per_device" else "global"


def devices_text(count):
    return f"{count} device" + ("" if count == 1 else "s")


def cell_table(frame):
    """One row per configuration and environment: its statuses, and n / mean / std / 95% CI of
    every metric over the repeats that ran ok."""
    records = []
    for (_, key), group in frame.groupby(["env", "cell_key"], sort=False):
        ok = group[group["status"] == "ok"]
        first = (ok if len(ok) else group).iloc[0]
        record = {column: first.get(column) for column in CONFIG}
        record.update(cell_key=key, scaling=scaling_kind(first["batch_mode"]),
                      seed=first.get("seed"), max_train_samples=first.get("max_train_samples"),
                      epochs_run=first["last_epoch"], device_type=first["device_type"],
                      device_name=first["device_name"], n=len(ok), runs=len(group),
                      statuses=", ".join(f"{count} {status}" for status, count
                                         in group["status"].value_counts().items()),
                      steps_per_epoch=first["epoch2_samples"] / first["global_batch"],
                      memory_per_device=mean_per_device(ok["memory_per_device"]),
                      epoch_means=epoch_means(ok["epoch_list"]))
        for metric in METRICS:
            stats = summarize(ok[metric])
            record.update({metric: stats["mean"], f"{metric}_std": stats["std"],
                           f"{metric}_ci": stats["ci"]})
        records.append(record)
    columns = [*CONFIG, "cell_key", "scaling", "seed", "max_train_samples", "epochs_run",
               "device_type", "device_name", "n", "runs", "statuses", "steps_per_epoch",
               "memory_per_device", "epoch_means",
               *[f"{m}{s}" for m in METRICS for s in ("", "_std", "_ci")]]
    table = pd.DataFrame(records, columns=columns)
    if table.empty:
        return table
    table["_order"] = table["backend"].map(backend_order)
    return (table.sort_values(["env", "_order", "dataset", "model", "dataset_multiple",
                               "batch_mode", "batch", "devices"])
            .drop(columns="_order").reset_index(drop=True))


def scaling_kind(batch_mode):
    """'strong' when the global batch stays fixed as devices grow, 'weak' when the per-device
    batch does."""
    return "weak" if batch_mode == "per_device" else "strong"


def measured(cells):
    """The cells with at least one ok repeat."""
    return cells[cells["n"] > 0]


def mean_per_device(lists):
    """Peak bytes per device, averaged over repeats (lists of the most common length)."""
    lists = [m for m in lists if isinstance(m, list) and m]
    if not lists:
        return None
    length = pd.Series([len(m) for m in lists]).mode()[0]
    return np.mean([m for m in lists if len(m) == length], axis=0).tolist()


def epoch_means(epoch_lists):
    """{epoch: (mean loss, mean training accuracy)} over the repeats, epochs in order."""
    by_epoch = {}
    for epochs in epoch_lists:
        for e in epochs:
            if isinstance(e.get("epoch"), int):
                by_epoch.setdefault(e["epoch"], []).append((e.get("loss"), e.get("accuracy")))
    return {epoch: (summarize([v[0] for v in values])["mean"],
                    summarize([v[1] for v in values])["mean"])
            for epoch, values in sorted(by_epoch.items())}


def failures(frame):
    """Every run that did not finish ok, with its status and reason."""
    failed = frame[frame["status"] != "ok"]
    return failed[["env", "cell_key", "repeat", "status", "error"]].reset_index(drop=True)


def scaling(cells):
    """Speedup R(N)/R(1) of the epoch-2 rate and efficiency speedup/N, against the 1-device cell
    of the same setup and batch; strong scaling when the global batch is fixed, weak when the
    per-device batch is."""
    family = [*SETUP, "batch_mode", "batch"]
    ok = measured(cells).dropna(subset=["epoch2_rate"])
    out = ok.merge(baseline(ok, family, "epoch2_rate", "rate_1"), on=family)
    out["speedup"] = out["epoch2_rate"] / out["rate_1"]
    out["efficiency"] = out["speedup"] / out["devices"]
    return out


def communication(cells):
    """Per N > 1 and per-device batch: compute, exposed communication, algbw and busbw (see
    COMMUNICATION_ASSUMPTION)."""
    keys = [*SETUP, "per_device_batch"]
    ok = measured(cells).dropna(subset=["step_time_p50"])
    out = ok[ok["devices"] > 1].merge(baseline(ok, keys, "step_time_p50", "compute_seconds"),
                                      on=keys)
    out["comm_seconds"] = out["step_time_p50"] - out["compute_seconds"]
    out["gradient_bytes"] = [gradient_bytes(m) if m in MODELS else np.nan for m in out["model"]]
    exposed = out["comm_seconds"].where(out["comm_seconds"] > 0)
    out["algbw"] = out["gradient_bytes"] / exposed
    out["busbw"] = bus_bandwidth(out["algbw"], out["devices"])
    out["compute_epoch_seconds"] = out["compute_seconds"] * out["steps_per_epoch"]
    out["comm_epoch_seconds"] = out["comm_seconds"] * out["steps_per_epoch"]
    return out


def baseline(cells, keys, metric, name):
    """`metric` of the 1-device cells as column `name`, one row per `keys` (the mean if two
    1-device cells share them, e.g. batch mode global and per_device of the same batch)."""
    ones = cells[cells["devices"] == 1]
    return ones.groupby(keys, dropna=False, as_index=False)[metric].mean().rename(
        columns={metric: name})


def bus_bandwidth(algbw, devices):
    """busbw = algbw * 2(N-1)/N: the bytes each link carries in a ring all-reduce (nccl-tests)."""
    return algbw * 2 * (devices - 1) / devices


def best_per_family(cells):
    """For each configuration apart from the backend: the backend with the highest epoch-2 rate."""
    family = [c for c in [*CONFIG, "seed", "max_train_samples", "epochs_run", "device_type"]
              if c not in ("series", "backend")]
    ok = measured(cells).dropna(subset=["epoch2_rate"])
    rows = []
    for _, group in ok.groupby(family, dropna=False, sort=False):
        best = group.loc[group["epoch2_rate"].idxmax()]
        rows.append({**best.to_dict(), "compared": len(group)})
    return pd.DataFrame(rows)


def environments(frame):
    """One row per environment: what ran where (from the rows' env and device fields)."""
    records = []
    for label, group in frame.groupby("env", sort=True):
        env = group["env_record"].iloc[0]
        packages = env.get("packages") or {}
        records.append({
            "env": label, "host": env.get("host"), "cpu_count": env.get("cpu_count"),
            "devices_seen": _distinct(f"{kind}: {name}" for kind, name
                                      in zip(group["device_type"], group["device_name"])
                                      if isinstance(name, str)),
            "threads": _distinct(r.get("threads") for r in group["env_record"]),
            "python": env.get("python"),
            "packages": ", ".join(f"{k} {v}" for k, v in sorted(packages.items())),
            "git_commit": _distinct(r.get("git_commit") for r in group["env_record"]),
            "rows": len(group), "files": _distinct(group["source"])})
    return pd.DataFrame(records, columns=["env", "host", "cpu_count", "devices_seen", "threads",
                                          "python", "packages", "git_commit", "rows", "files"])


def _distinct(values):
    return ", ".join(sorted({str(v) for v in values if v is not None and v == v})) or "—"


def reference(cells, columns):
    """The most common combination of `columns` among measured cells (ties: the smallest), so a
    figure that varies the other axes can hold these fixed, as the blog's figures do."""
    counts = measured(cells)[columns].value_counts()
    if counts.empty:
        return {}
    return dict(zip(columns, min(counts[counts == counts.max()].index)))


def at(cells, values):
    """The measured cells whose columns equal `values` (a dict from `reference`)."""
    ok = measured(cells)
    mask = np.ones(len(ok), dtype=bool)
    for column, value in values.items():
        mask &= (ok[column] == value).to_numpy()
    return ok[mask]
