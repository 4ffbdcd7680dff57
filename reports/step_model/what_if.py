"""What if: a backend's measured 1-device cells scaled out to any count of devices and nodes over
a link one names (reports.step_model.step, each collective on the step's timeline:
reports.step_model.timeline), and, with several bucket sizes, which one a link and device count
want."""
from __future__ import annotations

import math

import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.common.grids.columns import columns, draws
from xbench.common.grids.setting import Role
from xbench.common.grids.settings import SETTINGS
from xbench.common.measuring.attribution import COMPUTE
from xbench.reports.numbers.analysis import WORKLOAD, wire_size
from xbench.reports.step_model.calibration import Calibration, calibrate
from xbench.reports.step_model.predict import checked, error_band, references
from xbench.reports.step_model.step import (
    COMPUTE_PARTS,
    PER_SAMPLE,
    Link,
    expected_largest,
    relative_spread,
    split_apart,
    step_collectives,
    syncs,
)
from xbench.reports.step_model.target import Target, foreign_link, target_compute

STOPS_PAYING = 0.5  # efficiency below which a device count no longer pays
MEASURED = Target()  # the measured device's own compute


def counts(devices: list[int], nodes: list[int]) -> list[tuple[int, int]]:
    """(nodes, devices per node) in the order of the total count."""
    return sorted(((m, n) for m in nodes for n in devices), key=lambda c: (c[0] * c[1], c))


def what_if(cells: pd.DataFrame, attributed: pd.DataFrame, probes: dict, devices: list[int],
            nodes: list[int], link: Link, node_link: Link,
            bucket_sizes: list[float] | None = None, target: Target = MEASURED,
            per_device_batch: int | None = None) -> pd.DataFrame:
    """For each backend's attributed 1-device cells of one setup (their mean over seeds and
    repeats): the predicted step, rate, speedup and efficiency on every count of devices per node
    and nodes over `link` (between the devices of a node) and `node_link` (between nodes), each
    device's compute the `target`'s (reports.step_model.target: the measured device's own by
    default, and every row says whose), with the interval of the held-out errors, and the count
    from which adding devices stops paying; with `bucket_sizes` (MiB), once for each size where
    the backend's library takes one, and the best of them marked; with `per_device_batch`, weak
    scaling at that batch a device (the global batch grows with the devices) in place of the
    cell's own batch."""
    if cells.empty or attributed.empty:
        return pd.DataFrame(columns=WHAT_IF_COLUMNS)
    band = error_band(checked(cells, attributed, probes))
    calibration = calibrate(references(cells, attributed))
    parts = [f"{p}_step" for p in COMPUTE_PARTS]
    ones = cells.merge(attributed[["env", "cell_key", "untraced_share", "timeline",
                                   *[f"{p}_share" for p in COMPUTE], *parts]],
                       on=["env", "cell_key"])
    ones = ones[(ones["devices"] == 1) & (ones["nodes"] == 1)
                & (ones["training"] == ones["training_without_fault"])
                & ones["backend"].map(lambda b: b in TRAITS and TRAITS[b].spans_devices)]
    on_target = ones["device_name"].fillna("").map(target.measured_on)
    ones = ones[on_target] if on_target.any() else ones
    records = []
    for key, group in ones.groupby(SETUP_OF_WHAT_IF, sort=False, dropna=False):
        recorded = [t for t in group["timeline"] if t]
        one = {**dict(zip(SETUP_OF_WHAT_IF, key, strict=True)), "params": group["params"].iloc[0],
               "flops_per_sample": group["flops_per_sample"].iloc[0],
               "device_name": group["device_name"].fillna("").iloc[0],
               **group[[*parts, "step_time_p50", "step_time_p90"]].mean().to_dict(),
               "timeline": recorded[0] if recorded else None,
               "measured_here": bool(on_target.any())}
        foreign = foreign_link([link, node_link], target, one["device_name"])
        if foreign or not split_apart(group).all():  # or one opaque call (an untraced JAX row)
            records.append({**dict(zip(SETUP_OF_WHAT_IF, key, strict=True)), "nodes": 1,
                            "devices": 1, "total": 1, "link": "—", "node_link": "—",
                            "note": foreign or f"not predicted: "
                                    f"{group['untraced_share'].mean():.0%} of its step is one "
                                    f"call no mark or trace splits, so its compute cannot be "
                                    f"told from its communication"})
            continue
        for bucket in bucket_sizes_of(one, bucket_sizes):
            records += scaled_out({**one, "bucket_mb": bucket}, calibration, devices, nodes,
                                  link, node_link, band, target, per_device_batch)
    return best_buckets(pd.DataFrame(records, columns=WHAT_IF_COLUMNS))


def bucket_sizes_of(one: dict, sizes: list[float] | None) -> list[float]:
    """The bucket sizes (MiB, 0 for the library's own) a setup is predicted at: the asked ones
    where its library takes a size, else its own."""
    takes = TRAITS[one["backend"]].protocol_on(one["device_type"]).bucket_knob
    return list(sizes) if sizes and takes else [one["bucket_mb"]]


def best_buckets(scaled: pd.DataFrame) -> pd.DataFrame:
    """`best_bucket`: whether a row's bucket size gives the highest predicted rate of its setup
    and count among the sizes asked (False where only one was)."""
    scaled["best_bucket"] = False
    rated = scaled[scaled["rate"].notna()]
    if rated.empty or rated["bucket_mb"].nunique() < 2:
        return scaled
    setup = [c for c in SETUP_OF_WHAT_IF if c != "bucket_mb"] + ["nodes", "devices"]
    best = rated.groupby(setup, dropna=False)["rate"].idxmax()
    scaled.loc[best.to_numpy(), "best_bucket"] = True
    return scaled


# A 1-device setup of the what-if: its seeds averaged, everything else its own.
SETUP_OF_WHAT_IF = ["env", "backend", "device_type", *[c for c in WORKLOAD if c not in draws()],
                    "training", *columns(Role.TRAINING)]


def scaled_out(one: dict, calibration: Calibration, devices: list[int], nodes: list[int],
               link: Link, node_link: Link, band: tuple[float, float] | None,
               target: Target = MEASURED, per_device_batch: int | None = None) -> list[dict]:
    """The what-if rows of one 1-device setup, to every count its backend can run (a count its
    global batch cannot be split over is a row "not predicted", with why)."""
    kind = TRAITS[one["backend"]]
    crossing, size = kind.protocol_on(one["device_type"]), wire_size(one)
    bucket = int(one["bucket_mb"] * 2**20) if one["bucket_mb"] else None
    weak = per_device_batch is not None or one["batch_mode"] != "global"
    batch = per_device_batch or one["batch"]  # a device's at 1 device (and at N, if weak)
    measured = sum(one[f"{p}_step"] * (batch / one["batch"] if p in PER_SAMPLE else 1)
                   for p in COMPUTE_PARTS)
    factor, compute_from = target_compute(one, target, measured, batch, one["measured_here"])
    rows, best, stopped = [], {}, None  # best: the highest rate at each smaller count
    for node_count, per_node in counts(devices, nodes):
        total = node_count * per_node
        if node_count > 1 and (not kind.spans_nodes or crossing.through_one_device):
            continue
        where = {**{c: one[c] for c in SETUP_OF_WHAT_IF}, "nodes": node_count,
                 "devices": per_node, "total": total, "per_device_batch": (
                     batch if weak else one["batch"] / total), "compute_from": compute_from,
                 "link": link.name if per_node > 1 else "—",
                 "node_link": node_link.name if node_count > 1 else "—"}
        note = unpredictable(one, total, weak, factor, compute_from)
        if note:
            rows.append({**where, "note": note})
            continue
        share = (1 if weak else 1 / total) * batch / one["batch"]
        parts = {p: one[f"{p}_step"] * (share if p in PER_SAMPLE else 1) * factor
                 for p in COMPUTE_PARTS}
        compute = sum(parts.values())
        timeline = step_collectives(one["timeline"], crossing, size, parts["backward"], per_node,
                                    node_count, link, node_link, bucket, one["reshard"],
                                    *syncs(one))
        waiting = compute * relative_spread(one) * expected_largest(total)
        step = compute + timeline["exposed"] + waiting
        rate = batch * (total if weak else 1) / step
        efficiency = rate / (batch / (measured * factor)) / total
        fewer = [r for count, r in best.items() if count < total]
        if stopped is None and total > 1 and (efficiency < STOPS_PAYING
                                              or (fewer and rate < max(fewer))):
            stopped = total
        best[total] = max(best.get(total, 0.0), rate)
        low, high = band if band and total > 1 else (math.nan, math.nan)  # 1 device: 100%
        rows.append({**where, "step": step, "exposed": timeline["exposed"], "waiting": waiting,
                     "hidden": timeline["hidden"], "rate": rate, "rate_low": rate * low,
                     "rate_high": rate * high, "speedup": efficiency * total,
                     "efficiency": efficiency, "efficiency_low": efficiency * low,
                     "efficiency_high": efficiency * high, "note": "predicted"})
    return [{**row, "stops_paying_at": stopped} for row in rows]


def unpredictable(one: dict, total: int, weak: bool, factor: float | None,
                  compute_from: str) -> str | None:
    """Why a count of a setup cannot be predicted (None where it can): no compute for the
    target, beyond the counts a grid allows, a global batch that does not split."""
    if factor is None:
        return compute_from
    if total > MOST_DEVICES:
        return (f"not predicted: {total:,} devices in all, beyond the {MOST_DEVICES:,} it "
                f"predicts for")
    if not weak and one["batch"] % total:
        return (f"not predicted: a global batch of {one['batch']} does not split over {total} "
                f"devices")
    return None


MOST_DEVICES = SETTINGS["devices"].maximum  # in all: a grid's limit on a count, the what-if's
WHAT_IF_COLUMNS = [*SETUP_OF_WHAT_IF, "nodes", "devices", "total", "per_device_batch",
                   "compute_from", "link", "node_link", "step",
                   "exposed", "waiting", "hidden", "rate", "rate_low", "rate_high", "speedup",
                   "efficiency", "efficiency_low", "efficiency_high", "note", "stops_paying_at",
                   "best_bucket"]
