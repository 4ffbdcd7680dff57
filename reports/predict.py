"""Predict, then measure: the step time of N devices on M nodes from a 1-device cell and a link,
and every measured N-device cell beside what the model said of it.

A step on N devices is its compute, the part of its gradients' collectives that the compute does
not hide, and the wait for the slowest rank: reports.step_model says how each is had.

This machine's link is the probe's bus bandwidth of the backend's library at the nearest size
(`xbench probe`), else the fastest bandwidth the calibration cells' collectives moved at; a
capped link (inject link=RATE) is its cap, shared by the ranks on the one loopback. Each
measured cell is predicted from a calibration on the cells of every other configuration (leave
one out, its seeds and capped-link twins held out with it), so no error is fitted to itself.
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.grids.columns import columns, draws
from xbench.common.grids.setting import Role
from xbench.common.grids.settings import SETTINGS
from xbench.common.measuring.attribution import COMPUTE
from xbench.common.workload import faults
from xbench.reports import analysis
from xbench.reports.analysis import CONFIG, SETUP, WORKLOAD, wire_size
from xbench.reports.step_model import (
    COMPUTE_PARTS,
    PER_SAMPLE,
    Link,
    bucket_bytes,
    carrier,
    collective_seconds,
    compute_parts,
    cores_lost,
    expected_largest,
    exposed_seconds,
    fault_outside_model,
    injected_link,
    link_class,
    moved_bytes,
    overlap_of,
    pair_one,
    pooled,
    probe_rate,
    protocol,
    relative_spread,
    split_apart,
)

LINKS_FILE = Path(__file__).with_name("links.toml")
STOPS_PAYING = 0.5  # efficiency below which a device count no longer pays
# an error beyond which a cell's prediction is far off (the bar the model is held to)
FAR_OFF = 0.35


def read_links(path: Path = LINKS_FILE) -> dict[str, Link]:
    """The named links (reports/links.toml)."""
    return {name: Link(entry["title"], float(entry["rate"]), float(entry["latency"]),
                       f"{entry['source']} (per {entry['per']}; latency assumed)")
            for name, entry in tomllib.loads(path.read_text()).items()}


LATENCY = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")


def parse_link(text: str, links: dict[str, Link] | None = None, what: str = "--link") -> Link:
    """A link named in links.toml, or RATE[,LATENCY]: RATE in tc's units (25gbit, 12gbps),
    LATENCY with us, ms or s (default 0); a UserError naming `what` gave it (the flag, or a
    published record's key) that says what a link looks like."""
    links = read_links() if links is None else links
    if text in links:
        return links[text]
    rate, _, latency = text.partition(",")
    found = faults.RATE.match(rate.strip().lower())
    wait = LATENCY.match(latency.strip().lower()) if latency else None
    if not found or (latency and not wait):
        raise UserError(f"{what} {text!r} is neither a named link ({', '.join(links)}) nor "
                        f"RATE[,LATENCY] such as 25gbit,5us (RATE in kbit, mbit, gbit, kbps, "
                        f"mbps or gbps; LATENCY in us, ms or s)")
    seconds = (float(wait.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[wait.group(2)]
               if wait else 0.0)
    number, unit = found.groups()
    rate = float(number) * faults.RATE_BYTES[unit]
    if not rate > 0:
        raise UserError(f"{what} {text!r}: a link's rate must be above 0")
    return Link(text, rate, seconds, "given on the command line")


def given_links(link: str | None, node_link: str | None) -> tuple[Link | None, Link | None]:
    """The links of `--link` and `--node-link` (default: --link); a UserError for a node link
    without a link between the devices of a node."""
    if node_link and not link:
        raise UserError("--node-link needs --link (the link between the devices of a node)")
    chosen = parse_link(link) if link else None
    return chosen, parse_link(node_link, what="--node-link") if node_link else chosen


def references(cells: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """Every attributed N-device cell beside its backend's attributed 1-device cell of the same
    setup and batch (as scaling pairs them; a capped link's cell beside the uncapped 1-device
    cell, which has no link to cap), with the parts per step of both. A cell whose step is
    mostly one untraced call (a JAX step) has no parts to calibrate on: left out."""
    family = [*[c for c in SETUP if c != "training"], "training_without_fault"]
    keyed = cells.merge(attributed[["env", "cell_key", *[f"{p}_step" for p in (
        *COMPUTE_PARTS, "waiting", "communication")], "moving_seconds", "bytes",
        "overlap_share", *[f"{p}_share" for p in COMPUTE]]],
        on=["env", "cell_key"])
    keyed = keyed[keyed["backend"].isin(list(TRAITS)) & split_apart(keyed)]
    ones = keyed[(keyed["devices"] == 1) & (keyed["nodes"] == 1)
                 & (keyed["training"] == keyed["training_without_fault"])]
    many = keyed[keyed["devices"] > 1]  # the world: every node's devices
    return many.merge(ones, on=family, suffixes=("", "_1"))


@dataclass
class Calibration:
    """What the model takes from measured cells: how a rank's compute grows with the cores it
    lost (the exponent, per device type and backend), each backend's measured overlap share
    (per link class), the bandwidth of each carrier here (by family, see carrier), and how many
    cells it came from."""
    core_exponent: dict[str, dict[str, float]]
    overlap: dict[str, dict[str, float]]
    rate: dict[str, dict[str, float]]
    cells: int


def calibrate(pairs: pd.DataFrame) -> Calibration:
    """Each calibrated factor over `pairs` (cells with their 1-device cells): the median, but
    the rates the fastest."""
    exponents, overlaps, rates = {}, {}, {}
    for _, pair in pairs.iterrows():
        measured = sum(pair[f"{p}_step"] for p in COMPUTE_PARTS)
        unslowed = sum(compute_parts(pair, 0.0).values())
        lost = cores_lost(pair)
        # a backend whose collectives' time is inside its compute (FSDP's) says nothing of it
        if not protocol(pair).collectives_in_compute and unslowed > 0 and lost != 1:
            exponents.setdefault(pair["device_type"], {}).setdefault(
                pair["backend"], []).append(math.log(measured / unslowed) / math.log(lost))
        moving, share = pair["moving_seconds"], pair["overlap_share"]
        if share is not None and np.isfinite(share):  # measured: its collectives were timed
            overlaps.setdefault(pair["backend"], {}).setdefault(link_class(pair), []).append(share)
        if not (moving and np.isfinite(moving) and moving > 0):
            # nothing timed its copies apart from the step: all of them were exposed
            moving = pair["communication_step"]
        if injected_link(pair["inject"]) is None and moving and np.isfinite(moving) and moving > 0:
            family, name = carrier(pair)
            rates.setdefault(family, {}).setdefault(name, []).append(moved_bytes(pair) / moving)
    median = lambda found: {k: float(np.median(v)) for k, v in found.items()}  # noqa: E731
    # a collective's moving time is at least its transfer (DDP's and Horovod's run on until
    # backward ends), so the fastest cell's rate is the nearest to the link's
    fastest = lambda found: {k: float(np.max(v)) for k, v in found.items()}  # noqa: E731
    return Calibration({kind: median(found) for kind, found in exponents.items()},
                       {backend: median(found) for backend, found in overlaps.items()},
                       {family: fastest(found) for family, found in rates.items()}, len(pairs))


def predict_cell(pair, calibration: Calibration, probes: dict) -> dict | None:
    """The model's step and epoch seconds of one N-device cell, with each part and where its
    link came from; None where it has no link (nothing measured its library's bandwidth)."""
    crossing = protocol(pair)
    cap = injected_link(pair["inject"])
    devices = pair["devices"]
    if cap is not None:
        link, how = Link("capped loopback", cap, 0.0, "inject", shared=True), "the cap"
    elif (rate := probe_rate(pair, probes)) is not None:
        link, how = Link("probe", rate, 0.0, "probe"), "the probe"
    elif (rate := pooled(calibration.rate.get(carrier(pair)[0], {}), carrier(pair)[1],
                         None)) is not None:
        link, how = Link("calibrated", rate, 0.0, "calibration"), "calibrated"
    elif not crossing.crosses:
        link, how = Link("none", math.inf, 0.0, "none"), "no collective"
    else:
        return None
    parts = compute_parts(pair, pooled(calibration.core_exponent.get(pair["device_type"], {}),
                                       pair["backend"], 1.0))
    compute = sum(parts.values())
    size = pair["bytes"] or wire_size(pair)
    # the probe and the calibration measured this machine's rings as per-device bus bandwidth,
    # one link for every rank, nodes or not
    moving = collective_seconds(crossing, size, devices, 1, link, link,
                                crossing.messages(size, bucket_bytes(pair)), pair["reshard"])
    overlap = overlap_of(calibration.overlap, pair["backend"], link_class(pair))
    exposed = exposed_seconds(moving, overlap, parts["backward"])
    waiting = compute * relative_spread(pair_one(pair)) * expected_largest(devices)
    step = compute + exposed + waiting
    windows = sum(pair[f"{p}_step_1"] for p in COMPUTE_PARTS)
    outside = pair["epoch2_seconds_1"] / (pair["steps_per_epoch_1"] * windows) if windows else 1.0
    return {"compute": compute, "moving": moving, "overlap": overlap, "exposed": exposed,
            "waiting": waiting, "step": step, "link": how,
            "epoch_seconds": step * pair["steps_per_epoch"] * outside}


def checked(cells: pd.DataFrame, attributed: pd.DataFrame, probes: dict) -> pd.DataFrame:
    """Every measured N-device cell beside what the model predicted of it, calibrated on the
    cells of every other configuration (its other seeds are its own configuration too, and a
    capped link's cell computes as its uncapped twin does: both held out with it): its epoch
    time both ways and the error; a cell it could not predict says why in
    `link`, its numbers NaN."""
    if cells.empty or attributed.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    pairs = references(cells, attributed)
    pairs = pairs[~pairs["inject"].map(fault_outside_model).astype(bool)].reset_index(drop=True)
    if pairs.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    configuration = analysis.configuration(pairs, "training_without_fault")
    records = []
    for index, pair in pairs.iterrows():
        calibration = calibrate(pairs[configuration != configuration[index]])
        found = predict_cell(pair, calibration, probes)
        if found is None:
            found = {"link": f"not predicted: no other cell measured {carrier(pair)[1]}",
                     "epoch_seconds": math.nan}
        measured, runs = pair["epoch2_seconds"], list(pair["epoch2_seconds_values"])
        records.append({**{c: pair[c] for c in CHECKED},
                        **found, "measured_seconds": measured, "measured_runs": len(runs),
                        "measured_low": min(runs), "measured_high": max(runs),
                        "error": found["epoch_seconds"] / measured - 1,
                        "calibrated_on": calibration.cells})
    return pd.DataFrame(records, columns=CHECK_COLUMNS)


CHECKED = [*CONFIG, "devices_per_node", "cell_key", "training", *columns(Role.FAULT)]
CHECK_COLUMNS = [*CHECKED, "compute", "moving", "overlap", "exposed", "waiting", "step", "link",
                 "epoch_seconds", "measured_seconds", "measured_runs", "measured_low",
                 "measured_high", "error", "calibrated_on"]


def check_summary(check: pd.DataFrame) -> str:
    """'uncapped cells on one node (the headline): median absolute error of the predicted epoch
    time 12% (largest 31%) over 9 cells; capped links: ...; several nodes: ...': the held-out
    errors apart, since a capped cell's link is the cap its experimenter set."""
    found = predicted(check)
    if found.empty:
        return "no N-device cell could be predicted"
    parts = []
    for name, cells in error_groups(found).items():
        errors = cells["error"].abs()
        if len(errors):
            far = int((errors > FAR_OFF).sum())
            parts.append(f"{name}: median absolute error of the predicted epoch time "
                         f"{errors.median():.0%} (largest {errors.max():.0%}) over {len(errors)} "
                         f"cell{'s' * (len(errors) != 1)}, {far} off by more than {FAR_OFF:.0%}")
    left = len(check) - len(found)
    return ("; ".join(parts) + ". Each cell held out of its own calibration"
            + (f"; {left} not predicted (see why below)" if left else ""))


def error_groups(check: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The checked cells by what their link was: the machine's own on one node (the headline),
    a capped link (the cap set by hand), several nodes."""
    capped = check["inject"].map(lambda inject: injected_link(inject) is not None).astype(bool)
    several = check["nodes"] > 1
    return {"uncapped cells on one node (the headline)": check[~capped & ~several],
            "capped links": check[capped & ~several], "several nodes": check[several]}


def predicted(check: pd.DataFrame) -> pd.DataFrame:
    """The cells of a check the model predicted."""
    return check[np.isfinite(check["error"].to_numpy(dtype=float))]


def error_band(check: pd.DataFrame) -> tuple[float, float] | None:
    """The factors a predicted rate is multiplied by for its interval: the held-out headline
    cells' (uncapped, one node) predicted / measured epoch times, their 10th and 90th
    percentiles (widened to hold 1, the prediction itself); None with fewer than 3 cells."""
    headline = next(iter(error_groups(predicted(check)).values()))
    if len(headline) < 3:
        return None
    factors = 1 + headline["error"].to_numpy(dtype=float)
    return min(float(np.percentile(factors, 10)), 1.0), max(float(np.percentile(factors, 90)), 1.0)


def band_text(check: pd.DataFrame) -> str:
    """Where a predicted number's interval comes from, and what it cannot say."""
    headline = next(iter(error_groups(predicted(check)).values()))
    if error_band(check) is None:
        return ("no interval: it needs 3 or more measured uncapped N-device cells on one node to "
                f"hold out, these results have {len(headline)}")
    return (f"interval: the {len(headline)} held-out uncapped one-node cells' predicted / "
            f"measured epoch time, 10th to 90th percentile: the error seen over the measured "
            f"range ({int(headline['devices'].min())} to {int(headline['devices'].max())} "
            f"devices), not known beyond it")


def counts(devices: list[int], nodes: list[int]) -> list[tuple[int, int]]:
    """(nodes, devices per node) in the order of the total count."""
    return sorted(((m, n) for m in nodes for n in devices), key=lambda c: (c[0] * c[1], c))


def what_if(cells: pd.DataFrame, attributed: pd.DataFrame, probes: dict, devices: list[int],
            nodes: list[int], link: Link, node_link: Link) -> pd.DataFrame:
    """For each backend's attributed 1-device cells of one setup (their mean over seeds and
    repeats): the predicted step, rate, speedup and efficiency on every count of devices per node
    and nodes over `link` (between the devices of a node) and `node_link` (between nodes), each
    device as fast as the measured one, with the interval of the held-out errors, and the count
    from which adding devices stops paying."""
    if cells.empty or attributed.empty:
        return pd.DataFrame(columns=WHAT_IF_COLUMNS)
    band = error_band(checked(cells, attributed, probes))
    calibration = calibrate(references(cells, attributed))
    parts = [f"{p}_step" for p in COMPUTE_PARTS]
    ones = cells.merge(attributed[["env", "cell_key", "untraced_share",
                                   *[f"{p}_share" for p in COMPUTE], *parts]],
                       on=["env", "cell_key"])
    ones = ones[(ones["devices"] == 1) & (ones["nodes"] == 1)
                & (ones["training"] == ones["training_without_fault"])
                & ones["backend"].map(lambda b: b in TRAITS and TRAITS[b].spans_devices)]
    records = []
    for key, group in ones.groupby(SETUP_OF_WHAT_IF, sort=False, dropna=False):
        one = {**dict(zip(SETUP_OF_WHAT_IF, key, strict=True)), "params": group["params"].iloc[0],
               **group[[*parts, "step_time_p50", "step_time_p90"]].mean().to_dict()}
        if not split_apart(group).all():  # one opaque call (a JAX step): nothing to scale
            records.append({**dict(zip(SETUP_OF_WHAT_IF, key, strict=True)), "nodes": 1,
                            "devices": 1, "total": 1, "link": "—", "node_link": "—",
                            "note": f"not predicted: {group['untraced_share'].mean():.0%} of "
                                    f"its step is one call no mark or trace splits, so its "
                                    f"compute cannot be told from its communication"})
            continue
        records += scaled_out(one, calibration, devices, nodes, link, node_link, band)
    return pd.DataFrame(records, columns=WHAT_IF_COLUMNS)


# A 1-device setup of the what-if: its seeds averaged, everything else its own.
SETUP_OF_WHAT_IF = ["env", "backend", "device_type", *[c for c in WORKLOAD if c not in draws()],
                    "training", *columns(Role.TRAINING)]


def scaled_out(one: dict, calibration: Calibration, devices: list[int], nodes: list[int],
               link: Link, node_link: Link, band: tuple[float, float] | None) -> list[dict]:
    """The what-if rows of one 1-device setup, to every count its backend can run (a count its
    global batch cannot be split over is a row "not predicted", with why)."""
    kind = TRAITS[one["backend"]]
    crossing, size = kind.protocol_on(one["device_type"]), wire_size(one)
    overlap = overlap_of(calibration.overlap, one["backend"], "uncapped")
    base = sum(one[f"{p}_step"] for p in COMPUTE_PARTS)
    rows, best, stopped = [], {}, None  # best: the highest rate at each smaller count
    for node_count, per_node in counts(devices, nodes):
        total = node_count * per_node
        if node_count > 1 and (not kind.spans_nodes or crossing.through_one_device):
            continue
        where = {**{c: one[c] for c in SETUP_OF_WHAT_IF}, "nodes": node_count,
                 "devices": per_node, "total": total,
                 "link": link.name if per_node > 1 else "—",
                 "node_link": node_link.name if node_count > 1 else "—"}
        if total > MOST_DEVICES:
            rows.append({**where, "note": f"not predicted: {total:,} devices in all, beyond "
                                          f"the {MOST_DEVICES:,} it predicts for"})
            continue
        if one["batch_mode"] == "global" and one["batch"] % total:
            rows.append({**where, "note": f"not predicted: a global batch of {one['batch']} "
                                          f"does not split over {total} devices"})
            continue
        share = 1 / total if one["batch_mode"] == "global" else 1.0
        parts = {p: one[f"{p}_step"] * (share if p in PER_SAMPLE else 1) for p in COMPUTE_PARTS}
        compute = sum(parts.values())
        moving = collective_seconds(crossing, size, per_node, node_count, link, node_link,
                                    crossing.messages(size, bucket_bytes(one)), one["reshard"])
        waiting = compute * relative_spread(one) * expected_largest(total)
        exposed = exposed_seconds(moving, overlap, parts["backward"])
        step = compute + exposed + waiting
        rate = one["batch"] * (1 if one["batch_mode"] == "global" else total) / step
        efficiency = rate / (one["batch"] / base) / total
        fewer = [r for count, r in best.items() if count < total]
        if stopped is None and total > 1 and (efficiency < STOPS_PAYING
                                              or (fewer and rate < max(fewer))):
            stopped = total
        best[total] = max(best.get(total, 0.0), rate)
        low, high = band if band and total > 1 else (math.nan, math.nan)  # 1 device: 100%
        rows.append({**where, "step": step, "exposed": exposed, "waiting": waiting,
                     "overlap": overlap, "rate": rate, "rate_low": rate * low,
                     "rate_high": rate * high, "speedup": efficiency * total,
                     "efficiency": efficiency, "efficiency_low": efficiency * low,
                     "efficiency_high": efficiency * high, "note": "predicted"})
    return [{**row, "stops_paying_at": stopped} for row in rows]


MOST_DEVICES = SETTINGS["devices"].maximum  # in all: a grid's limit on a count, the what-if's
WHAT_IF_COLUMNS = [*SETUP_OF_WHAT_IF, "nodes", "devices", "total", "link", "node_link", "step",
                   "exposed", "waiting", "overlap", "rate", "rate_low", "rate_high", "speedup",
                   "efficiency", "efficiency_low", "efficiency_high", "note", "stops_paying_at"]
