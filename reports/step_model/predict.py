"""Predict, then measure: the step time of N devices on M nodes from a 1-device cell and a link,
and every measured N-device cell beside what the model said of it.

A step on N devices is its compute, the part of its gradients' collectives that the compute does
not hide, and the wait for the slowest rank: reports.step_model.step says how each is had.

This machine's link is what the calibration cells' collectives that ran after backward moved at
(reports.step_model.calibration: a latency and an efficiency per library and class of link), else
the probe's bus bandwidth of the backend's library at the nearest size (`xbench probe`); a capped
link (inject link=RATE) is its cap, shared by the ranks on the one loopback, at the efficiency
its library reached on other capped cells. Each measured cell is predicted from a calibration
on the cells of every other configuration (leave one out, its seeds and capped-link twins held
out with it), so no error is fitted to itself.
"""
from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.grids.columns import columns
from xbench.common.grids.setting import Role
from xbench.common.measuring.attribution import COMPUTE
from xbench.common.workload import faults
from xbench.reports.numbers import analysis
from xbench.reports.numbers.analysis import CONFIG, SETUP, WORKLOAD
from xbench.reports.step_model.calibration import (
    Calibration,
    calibrate,
    link_class,
    nominal_link,
    wire_of,
)
from xbench.reports.step_model.skill import held_out_scores, skill_text
from xbench.reports.step_model.step import (
    COMPUTE_PARTS,
    Link,
    bucket_bytes,
    carrier,
    compute_parts,
    expected_largest,
    fault_outside_model,
    injected_link,
    pair_one,
    pooled,
    probe_rate,
    protocol,
    relative_spread,
    split_apart,
    step_collectives,
    sync_bytes,
    syncs,
)

LINKS_FILE = Path(__file__).with_name("links.toml")
STOPS_PAYING = 0.5  # efficiency below which a device count no longer pays
# an error beyond which a cell's prediction is far off (the bar the model is held to)
FAR_OFF = 0.35


def read_links(path: Path = LINKS_FILE) -> dict[str, Link]:
    """The named links (reports/links.toml)."""
    return {name: Link(entry["title"], float(entry["rate"]), float(entry["latency"]),
                       f"{entry['source']} (per {entry['per']}; latency assumed)",
                       device=entry.get("device"))
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
    if not math.isfinite(rate) or not math.isfinite(seconds):
        raise UserError(f"{what} {text!r}: a rate or latency of more digits than a float holds")
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
    mostly one untraced call (a JAX step recorded before xbench traced it) has no parts to
    calibrate on: left out."""
    family = [*[c for c in SETUP if c != "training"], "training_without_fault"]
    keyed = cells.merge(attributed[["env", "cell_key", *[f"{p}_step" for p in (
        *COMPUTE_PARTS, "waiting", "communication")], "moving_seconds", "bytes", "timeline",
        "after_bytes", "after_seconds", "after_messages", "alone_seconds", "under_compute_seconds",
        *[f"{p}_share" for p in COMPUTE]]],
        on=["env", "cell_key"])
    keyed = keyed[keyed["backend"].isin(list(TRAITS)) & split_apart(keyed)]
    ones = keyed[(keyed["devices"] == 1) & (keyed["nodes"] == 1)
                 & (keyed["training"] == keyed["training_without_fault"])]
    many = keyed[keyed["devices"] > 1]  # the world: every node's devices
    return many.merge(ones, on=family, suffixes=("", "_1"))

def cell_link(pair, calibration: Calibration, probes: dict) -> tuple[Link, str] | None:
    """The link an N-device cell's collectives run over as its library uses it, and where that
    came from: its carrier's calibrated Wire on its class of link (reports.step_model.calibration),
    else the cap as it is, else the probe's bus bandwidth; None where nothing says."""
    if not protocol(pair).crosses:
        return Link("none", math.inf, 0.0, "none"), "no collective"
    kind, nominal = link_class(pair), nominal_link(pair)
    wire = wire_of(calibration, pair, kind)
    if wire is not None:
        return (Link(f"{nominal.name}, calibrated", nominal.rate * wire.efficiency, wire.latency,
                     "calibration", shared=nominal.shared),
                f"{'the cap, ' if kind == 'capped' else ''}calibrated: {wire.basis} of "
                f"{wire.cells} cell{'s' * (wire.cells != 1)}")
    if kind == "capped":
        return nominal, "the cap"
    if (rate := probe_rate(pair, probes)) is not None:
        return Link("probe", rate, 0.0, "probe"), "the probe"
    return None


def predict_cell(pair, calibration: Calibration, probes: dict) -> dict | None:
    """The model's step and epoch seconds of one N-device cell, with each part, the terms that
    made it (reports.step_model.step's optimizer, input, sharing, accumulation, stragglers) and
    where its link came from; None where it has no link (nothing measured its library's
    collectives)."""
    found = cell_link(pair, calibration, probes)
    if found is None:
        return None
    link, how = found
    parts = compute_parts(pair, pooled(calibration.core_exponent.get(pair["device_type"], {}),
                                       pair["backend"], 1.0))
    compute = sum(parts.values())
    share, shared_by = calibration.sharing.get(carrier(pair)[1], (0.0, 0))
    def collectives(backward: float) -> dict:
        # the probe and the calibration measured this machine's rings as per-device bus
        # bandwidth, one link for every rank, nodes or not
        return step_collectives(pair.get("timeline_1"), protocol(pair),
                                sync_bytes(pair, pair["bytes"]), backward, pair["devices"], 1,
                                link, link, bucket_bytes(pair), pair["reshard"], *syncs(pair))
    timeline = collectives(parts["backward"])
    slowed = share * timeline["under_backward"]
    if slowed > 0:  # backward lengthened by what its collectives took of it: its timeline again
        timeline = collectives(parts["backward"] + slowed)
        slowed = share * timeline["under_backward"]
    spread, spread_from = calibration.spread.get((pair["device_type"], pair["backend"]),
                                                 (None, 0))
    if spread is None:  # no N-device cell of its backend to say it: the 1-device cell's own
        spread = relative_spread(pair_one(pair))
    waiting = compute * spread * expected_largest(pair["devices"])
    step = compute + slowed + timeline["exposed"] + waiting
    terms = {"optimizer": parts["optimizer"], "input": parts["input"],
             "sharing": {"share": share, "cells": shared_by, "seconds": slowed},
             "accumulation": syncs(pair)[0],
             "stragglers": {"spread": spread, "cells": spread_from, "seconds": waiting}}
    return {"compute": compute, **timeline, "sharing": slowed, "waiting": waiting,
            "step": step, "link": how, "terms": terms,
            "epoch_seconds": step * pair["steps_per_epoch"] * outside(pair)}


def outside(pair) -> float:
    """The 1-device cell's epoch over its steps' windows: what no step window covers (the
    epoch's start and end), carried over to the N-device cell's epoch."""
    windows = sum(pair[f"{p}_step_1"] for p in COMPUTE_PARTS)
    if not windows:
        return 1.0
    return median_epoch(pair["epoch2_seconds_values_1"]) / (pair["steps_per_epoch_1"] * windows)


def median_epoch(runs) -> float:
    """The median of a cell's epoch-2 times over its runs."""
    return float(np.median(list(runs)))


def trivial_epochs(pair) -> dict[str, float]:
    """What two predictors that know nothing of the step say of the cell's epoch: perfect
    scaling (the 1-device cell's compute in proportion to the per-device batch, nothing else)
    and the 1-device cell's step itself (nothing gained)."""
    epochs = pair["steps_per_epoch"] * outside(pair)
    return {"perfect_seconds": sum(compute_parts(pair, 0.0).values()) * epochs,
            "one_device_seconds": sum(pair[f"{p}_step_1"] for p in COMPUTE_PARTS) * epochs}


def held_out(pairs: pd.DataFrame, index: int, configuration: pd.Series) -> pd.Series:
    """The cells a cell's calibration may use: not its own configuration (its seeds, and a
    capped link's twin, which computes as it does), nor any cell of its backend at its bucket
    size (on any link or count)."""
    bucket = pairs["bucket_mb"].fillna(0)
    mine = (pairs["backend"] == pairs.at[index, "backend"]) & (bucket == bucket[index])
    return (configuration != configuration[index]) & ~mine


def checked(cells: pd.DataFrame, attributed: pd.DataFrame, probes: dict) -> pd.DataFrame:
    """Every measured N-device cell beside what the model predicted of it, calibrated on cells
    held out from it (`held_out`; `attributed` as `calibrating` makes it: the median of each
    cell's runs): its epoch time both ways (the measured median over its runs), the error with
    its interval over the runs, and what the trivial predictors said (perfect scaling, the
    1-device step, the median ratio to perfect scaling of the calibrating cells); a cell it could
    not predict says why in `link`, its numbers NaN."""
    if cells.empty or attributed.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    pairs = references(pooled_ones(cells), attributed)
    pairs = pairs[~pairs["inject"].map(fault_outside_model).astype(bool)].reset_index(drop=True)
    if pairs.empty:
        return pd.DataFrame(columns=CHECK_COLUMNS)
    configuration = analysis.configuration(pairs, "training_without_fault")
    trivial = pd.DataFrame([trivial_epochs(pair) for _, pair in pairs.iterrows()])
    measured = pairs["epoch2_seconds_values"].map(median_epoch)
    records = []
    for index, pair in pairs.iterrows():
        kept = held_out(pairs, index, configuration)
        calibration = calibrate(pairs[kept])
        found = predict_cell(pair, calibration, probes)
        if found is None:
            found = {"link": f"not predicted: no other cell measured {carrier(pair)[1]}",
                     "epoch_seconds": math.nan}
        runs = list(pair["epoch2_seconds_values"])
        ratio = (measured[kept] / trivial["perfect_seconds"][kept]).median()
        records.append({**{c: pair[c] for c in CHECKED}, **found,
                        **trivial.loc[index].to_dict(),
                        "constant_seconds": trivial.at[index, "perfect_seconds"] * ratio,
                        "measured_seconds": measured[index], "measured_runs": len(runs),
                        "measured_low": min(runs), "measured_high": max(runs),
                        "error": found["epoch_seconds"] / measured[index] - 1,
                        "error_low": found["epoch_seconds"] / max(runs) - 1,
                        "error_high": found["epoch_seconds"] / min(runs) - 1,
                        "calibrated_on": calibration.cells})
    return pd.DataFrame(records, columns=CHECK_COLUMNS)


def calibrating(cells: pd.DataFrame) -> pd.DataFrame:
    """The attributed cells predict calibrates on and predicts from: each part and each
    number of the collectives the median of the cell's runs (reports.numbers.analysis), a
    1-device cell's pooled with its twins' (`pooled_ones`)."""
    return analysis.attribution(pooled_ones(cells), centre="median")


# Settings that cannot act on one device: its gradients cross to no other, so the size of the
# messages they would cross in changes nothing it computes.
IDLE_AT_ONE = ("bucket_mb",)
TWINS_AT_ONE = ["env", "backend", "device_type", *WORKLOAD, *columns(Role.FAULT),
                *[c for c in columns(Role.TRAINING) if c not in IDLE_AT_ONE]]


def pooled_ones(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with each 1-device cell's runs (its attributions and epoch times) pooled with
    those of its twins, the 1-device cells of its setup that differ only in settings that
    cannot act at one device (IDLE_AT_ONE): the compute term's median over more runs."""
    ones = cells[(cells["devices"] == 1) & (cells["nodes"] == 1)]
    pooled = cells.copy()
    for _, twins in ones.groupby(TWINS_AT_ONE, sort=False, dropna=False):
        if len(twins) < 2:
            continue
        runs = [run for found in twins["attributions"] for run in found]
        epochs = [seconds for found in twins["epoch2_seconds_values"] for seconds in found]
        for index in twins.index:
            pooled.at[index, "attributions"] = runs
            pooled.at[index, "epoch2_seconds_values"] = epochs
    return pooled


CHECKED = [*CONFIG, "devices_per_node", "cell_key", "training", "bucket_mb", *columns(Role.FAULT)]
CHECK_COLUMNS = [*CHECKED, "compute", "moving", "hidden", "under_backward", "exposed", "sharing",
                 "waiting", "step", "link", "terms",
                 "epoch_seconds", "perfect_seconds", "one_device_seconds", "constant_seconds",
                 "measured_seconds", "measured_runs", "measured_low", "measured_high", "error",
                 "error_low", "error_high", "calibrated_on"]


def check_summary(check: pd.DataFrame) -> str:
    """'uncapped cells on one node (the headline): median absolute error of the predicted epoch
    time 12% (largest 31%) over 9 cells, ...; skill +0.40 against the best trivial predictor
    (perfect scaling); capped links: ...; several nodes: ...': the held-out errors apart, since
    a capped cell's link is the cap its experimenter set."""
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
                         f"cell{'s' * (len(errors) != 1)}, {far} off by more than {FAR_OFF:.0%}"
                         f"{by_framework(cells)}, {skill_text(held_out_scores(cells))}")
    left = len(check) - len(found)
    fewest = int(check["measured_runs"].min())
    return ("; ".join(parts) + ". Each cell held out of its own calibration (its configuration, "
            "and its backend at its bucket size), which takes each cell's median over its runs"
            + (f" (the fewest runs a cell has: {fewest}; ask for {ENOUGH_RUNS} or more: --repeat "
               f"{ENOUGH_RUNS})" if fewest < ENOUGH_RUNS else "")
            + (f"; {left} not predicted (see why below)" if left else ""))


ENOUGH_RUNS = 3  # runs a cell needs for its median to stand against one slow run


def by_framework(cells: pd.DataFrame) -> str:
    """' (PyTorch 12% over 3 cells, JAX 17% over 3)': a group's median absolute error per
    framework, where it holds more than one (each framework's collectives and compute are
    modelled from its own cells)."""
    titles = cells["backend"].map(lambda b: TRAITS[b].framework.title if b in TRAITS else b)
    if titles.nunique() < 2:
        return ""
    errors = cells["error"].abs().groupby(titles, sort=False)
    return " (" + ", ".join(f"{title} {group.median():.0%} over {len(group)}"
                            for title, group in errors) + ")"


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
