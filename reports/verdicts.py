"""The verdicts at the top of the report: for each model, data and batch, which backend is fastest
at each device count and whether adding devices pays off, each stated only where its 95% interval
says so and the false-discovery rate over all the report's comparisons stays at 5%
(Benjamini-Hochberg), otherwise "inconclusive" with the repeats that would settle it (with 80%
power); whether more devices changed accuracy; and warnings for what the verdicts leave out.
"""
import math
from dataclasses import dataclass

import numpy as np

from xbench.common.measuring.attribution import COMPUTE
from xbench.reports import analysis
from xbench.reports.stats import (
    LEVEL,
    LOOKS,
    false_discoveries_controlled,
    finite,
    ratio_of_means,
    ratio_p_value,
    repeats_to_settle,
    sequential_p,
)
from xbench.reports.step_model import split_apart

MIN_REPEATS = 3


def family_title(cells):
    first = cells.iloc[0]
    return (f"{first['model']} ×{first['dataset_multiple']} {first['dataset']}, "
            f"{analysis.batch_kind(first['batch_mode'])} batch {first['batch']} "
            f"({analysis.scaling_kind(first['batch_mode'])} scaling), {first['device_type']}"
            + (f" [env {first['env']}]" if first.get("env") not in (None, "A") else ""))


def interval_text(ratio, unit="×"):
    """'1.23× [1.10, 1.37]'; an unbounded interval says so ('[−∞, ∞], unbounded')."""
    if not ratio.has_interval:
        return f"{ratio.value:.2f}{unit}"
    low, high = (f"{v:.2f}" if math.isfinite(v) else ("−∞" if v < 0 else "∞")
                 for v in (ratio.low, ratio.high))
    bounded = math.isfinite(ratio.low) and math.isfinite(ratio.high)
    return f"{ratio.value:.2f}{unit} [{low}, {high}]" + ("" if bounded else ", unbounded")


class Judge:
    """Whether a comparison may be stated. A ratio is stated where its 95% interval is beyond
    its threshold and, over all the report's comparisons, Benjamini-Hochberg holds the
    false-discovery rate at 5%. The verdicts are written twice: the first pass (no `stated`)
    collects every comparison's p-value in order, the second decides with what the control
    allows (`stated`, in the same order)."""

    def __init__(self, stated: np.ndarray | None = None, looks: dict[str, int] | None = None):
        self.stated, self.p_values, self.open = stated, [], []
        self.looks = looks or {}  # cell key -> the last look of --until-conclusive that ran it

    def looks_of(self, keys: tuple[str, str]) -> int:
        """The last look of --until-conclusive at a comparison of these cells (0: none)."""
        return max(self.looks.get(key, 0) for key in keys)

    def decide(self, ratio, a_seconds, b_seconds, keys: tuple[str, str] = ("", "")) -> str | None:
        """'above' or 'below' the threshold, 'held' (the interval excludes it, the control
        does not allow it), or None. `ratio` is mean(a)/mean(b), maybe scaled (per sample):
        its threshold of 1 is 1/scale for the epoch times' ratio. A comparison not stated is
        kept in `open` with the cells (`keys`) whose repeats would settle it."""
        a, b = finite(a_seconds), finite(b_seconds)
        threshold = threshold_of(ratio, a, b)
        index, looks = len(self.p_values), self.looks_of(keys)
        p_value = ratio_p_value(a, b, threshold)
        self.p_values.append(sequential_p(p_value, looks))
        side = "above" if ratio.above(1) else "below" if ratio.below(1) else None
        if side and self.stated is not None and not self.stated[index]:
            side = "held"
        if side in (None, "held"):
            self.open.append(Open(keys, p_value, side == "held",
                                  repeats_to_settle(a, b, threshold, level=level_of(looks))
                                  if side is None else None, min(len(a), len(b))))
        return side

    def after(self, keys: tuple[str, str]) -> str:
        """' (after 3 looks of --until-conclusive, tested at 5% / 10)' where there were any."""
        looks = self.looks_of(keys)
        return (f" (after {looks} look{'s' if looks > 1 else ''} of --until-conclusive, "
                f"tested at 5% / {LOOKS})" if looks else "")

    def not_stated(self, decision: str | None, a_seconds, b_seconds, keys, threshold=1.0) -> str:
        """Why a comparison was not stated: held back (by its look's level or the control), or
        inconclusive and what would settle it at its level."""
        if decision == "held":
            return HELD + self.after(keys)
        return undecided(a_seconds, b_seconds, threshold, level_of(self.looks_of(keys)))

    def note(self) -> list[str]:
        """A line on the control, where there was anything to control."""
        counted = int(np.sum(~np.isnan(np.asarray(self.p_values, dtype=float))))
        if not counted:
            return []
        held = sum(o.held for o in self.open)
        looked = any(self.looks.values())
        return [f"({counted} comparisons with an interval; a verdict is stated where its 95% "
                f"interval excludes no change and the false-discovery rate over all of them is "
                f"held at 5% (Benjamini-Hochberg)"
                + (f"; one with runs added by --until-conclusive is tested at its look's level, "
                   f"5% / {LOOKS} (a sequential plan of at most {LOOKS} looks, the level spent "
                   f"evenly: repeating until a verdict appears cannot raise the false-positive "
                   f"rate above 5%)" if looked else "")
                + (f"; {held} held back" if held else "") + ")"]


def threshold_of(ratio, a_seconds, b_seconds) -> float:
    """What 1 for `ratio` (mean(a)/mean(b), maybe scaled per sample) is for the epoch times'
    own ratio: 1/scale."""
    a, b = finite(a_seconds), finite(b_seconds)
    raw = a.mean() / b.mean() if len(a) and len(b) and b.mean() else math.nan
    threshold = raw / ratio.value if ratio.value else math.nan
    return threshold if math.isfinite(threshold) and threshold > 0 else 1.0


@dataclass
class Open:
    """A comparison the verdicts could not state: its two cells, its p-value (NaN without two
    runs a side; before a sequential plan's scaling, so that it still orders them), whether only
    the false-discovery control (or its look's level) held it back, the repeats a side that
    would settle it with 80% power (None: not known, or more than MAX_REPEATS) and the repeats
    it has."""
    keys: tuple[str, str]
    p_value: float
    held: bool
    needed: int | None
    repeats: int

    @property
    def settleable(self) -> bool:
        """Whether more repeats can be expected to settle it."""
        return self.held or self.repeats < 2 or self.needed is not None


HELD = ("not stated: its interval excludes no change, but not with the false-discovery rate over "
        "all the report's comparisons held at 5% (at its look's level, with looks)")


def level_of(looks: int) -> float:
    """The confidence a comparison is tested at: LEVEL, or a look's of the sequential plan."""
    return 1 - (1 - LEVEL) / LOOKS if looks else LEVEL


def undecided(a_seconds, b_seconds, threshold=1.0, level=LEVEL):
    """Why a comparison cannot be stated yet, and what would settle it (at `level`)."""
    if min(len(a_seconds), len(b_seconds)) < 2:
        return "inconclusive: one run on a side has no interval (run --repeat 3)"
    needed = repeats_to_settle(a_seconds, b_seconds, threshold, level=level)
    return ("inconclusive: " + (f"about {needed} repeats each would settle it" if needed else
                                "within the noise of these runs; more repeats are unlikely to "
                                "settle it"))


def fastest(cells, devices, judge):
    """A line on the fastest backend at `devices`, against the runner-up."""
    here = cells[cells["devices"] == devices].sort_values("epoch2_rate", ascending=False)
    if here.empty:
        return None
    best = here.iloc[0]
    head = f"{analysis.devices_text(devices)}: "
    if len(here) == 1:
        return head + f"only {best['series']} ran ({best['epoch2_rate']:,.0f} samples/s)"
    second = here.iloc[1]
    ratio = ratio_of_means(second["epoch2_seconds_values"], best["epoch2_seconds_values"])
    versus = (f"{best['series']} {best['epoch2_rate']:,.0f} samples/s vs {second['series']} "
              f"{second['epoch2_rate']:,.0f}: {interval_text(ratio)}")
    decision = judge.decide(ratio, second["epoch2_seconds_values"], best["epoch2_seconds_values"],
                            (second["cell_key"], best["cell_key"]))
    keys = (second["cell_key"], best["cell_key"])
    if decision == "above":
        return head + f"{best['series']} is fastest ({versus}){judge.after(keys)}"
    return head + f"{versus}; " + judge.not_stated(
        decision, second["epoch2_seconds_values"], best["epoch2_seconds_values"], keys)


def pays_off(scaled, attributed, limits, judge):
    """A line per backend and device count on its speedup over its own 1-device run, and where
    it is below 1, why (from the N-device cell's step attribution)."""
    lines = []
    for _, row in scaled[scaled["devices"] > 1].iterrows():
        ratio, efficiency = row["speedup_ratio"], row["efficiency_ratio"]
        head = (f"{row['series']} on {analysis.devices_text(row['devices'])}: speedup "
                f"{interval_text(ratio)}, efficiency ")
        head += (f"SUSPECT ({efficiency.value:.0%}, above 100%: the 1-device baseline or the "
                 f"machine was disturbed)" if row["suspect"] else f"{efficiency.value:.0%}")
        if row["suspect"]:
            lines.append(f"{head}: not taken as a result")
        else:
            lines.append(decided(head, ratio, "pays off",
                                 "does not pay off (slower than 1 device)",
                                 row["epoch2_seconds_values_ref"], row["epoch2_seconds_values"],
                                 judge, (row["cell_key_ref"], row["cell_key"])))
        reason = why(row, attributed, limits) if ratio.value < 1 else None
        if reason:
            lines.append(f"  why: {reason}")
    return lines


PART_WORDS = {"communication": "waiting for the collective after every rank's compute is done "
                               "(exposed communication)",
              "waiting": "waiting for the slowest rank", "input": "waiting for input",
              "host": "on host overhead"}


def why(cell, attributed, limits):
    """One line on what an N-device cell's step spends beyond compute, how its compute compares
    with the same backend's 1-device compute, and its bandwidth against the probe's (None where
    its rows do not attribute their steps)."""
    def same(frame, devices):
        return frame[(frame["env"] == cell["env"]) & (frame["backend"] == cell["backend"])
                     & (frame["training"] == cell["training"]) & (frame["model"] == cell["model"])
                     & (frame["dataset_multiple"] == cell["dataset_multiple"])
                     & (frame["batch_mode"] == cell["batch_mode"])
                     & (frame["batch"] == cell["batch"]) & (frame["devices"] == devices)]
    mine = same(attributed, cell["devices"]) if len(attributed) else attributed
    if mine.empty:
        return None
    mine = mine.iloc[0]
    if not split_apart(mine.to_frame().T).iloc[0]:  # one opaque call (a JAX step)
        return (f"not known: {mine['untraced_share']:.0%} of the step is one call no mark or "
                f"trace splits (its compute and communication together)")
    parts = [f"{mine[f'{part}_share']:.0%} {PART_WORDS[part]}" for part in PART_WORDS
             if mine[f"{part}_share"] >= 0.05]
    text = ("the step spends " + ", ".join(parts) if parts
            else "the step is nearly all compute")
    one = same(attributed, 1)
    if len(one):
        compute = sum(mine[f"{part}_step"] for part in COMPUTE)
        alone = sum(one.iloc[0][f"{part}_step"] for part in COMPUTE)
        ideal = 1 / mine["devices"] if mine["batch_mode"] == "global" else 1.0
        text += (f"; each rank's compute takes {compute / alone:.2f}× the 1-device step's "
                 f"(ideal {ideal:.2f}×)")
    probed = limits[(limits["env"] == mine["env"]) & (limits["cell_key"] == mine["cell_key"])]
    if len(probed) and math.isfinite(probed["bandwidth_share"].iloc[0]):
        share = probed["bandwidth_share"].iloc[0]
        text += ("; its bus bandwidth is SUSPECT (above the probe's)" if share > 1 else
                 f"; the link reached {share:.0%} of the probe's bus bandwidth")
    return text


def more_devices(cells, attributed, limits, judge, suspect: set[str]):
    """The decision itself: the fastest N-device cell against the fastest 1-device cell,
    whatever their backends (and why, where the N devices are slower); none where either
    efficiency is above 100% (this one's, or the N-device cell's against its own 1-device run,
    whose cell_key is in `suspect`): the report refuses that number, so no verdict rests on it."""
    ones = cells[cells["devices"] == 1]
    if ones.empty:
        return []
    one = ones.loc[ones["epoch2_rate"].idxmax()]
    lines = []
    for devices in sorted(d for d in cells["devices"].unique() if d > 1):
        here = cells[cells["devices"] == devices]
        best = here.loc[here["epoch2_rate"].idxmax()]
        ratio = ratio_of_means(one["epoch2_seconds_values"], best["epoch2_seconds_values"])
        ratio = ratio.scaled(best["epoch2_samples"] / one["epoch2_samples"])
        head = (f"{analysis.devices_text(devices)} at best ({best['series']}) vs 1 device at "
                f"best ({one['series']}): {interval_text(ratio)}")
        if ratio.value / devices > 1 or best["cell_key"] in suspect:
            lines.append(f"{head}: not stated: an efficiency above 100% (SUSPECT) is not taken "
                         f"as a result")
            continue
        lines.append(decided(head, ratio, f"{devices} devices pay off here",
                             f"{devices} devices do not pay off here (slower than 1)",
                             one["epoch2_seconds_values"], best["epoch2_seconds_values"],
                             judge, (one["cell_key"], best["cell_key"])))
        reason = why(best, attributed, limits) if ratio.value < 1 else None
        if reason:
            lines.append(f"  why ({best['series']}): {reason}")
    return lines


def decided(head, ratio, above, below, reference_seconds, seconds, judge, keys):
    """'head: above' or 'head: below' where the judge states the ratio, else 'head;' and why
    not (held back by the false-discovery control, or how many repeats would settle it)."""
    decision = judge.decide(ratio, reference_seconds, seconds, keys)
    if decision in ("above", "below"):
        return f"{head}: {above if decision == 'above' else below}{judge.after(keys)}"
    return f"{head}; " + judge.not_stated(decision, reference_seconds, seconds, keys,
                                          threshold_of(ratio, reference_seconds, seconds))


def wrapper_lines(wrapper, judge):
    lines = []
    for _, row in wrapper.iterrows():
        ratio = row["ratio"]
        head = (f"{row['series']} at 1 device: {interval_text(ratio)} the rate of "
                f"{row['reference']} (no parallel wrapper)")
        lines.append(decided(head, ratio, "faster than no wrapper",
                             "its machinery costs time at 1 device",
                             row["epoch2_seconds_values_ref"], row["epoch2_seconds_values"],
                             judge, (row["cell_key_ref"], row["cell_key"])))
    return lines


def accuracy_lines(changes):
    differences = [row["difference"][0] for _, row in changes.iterrows()
                   if not math.isnan(row["difference"][0])]
    if differences and max(abs(d) for d in differences) < 5e-5:
        return ["test accuracy: the same on every device count, in every backend "
                f"({changes.iloc[0]['test_accuracy_ref']:.4f}; one seed)"]
    lines = []
    for _, row in changes.iterrows():
        d, low, high = row["difference"]
        if math.isnan(d):
            continue
        points = f"{d * 100:+.2f} points"
        if math.isnan(low):
            judged = "one run each, one seed: no interval"
        elif low == high:
            judged = ("identical repeats (one seed): exact for this seed, seed-to-seed spread "
                      "unmeasured")
        elif low > 0 or high < 0:
            judged = f"[{low * 100:+.2f}, {high * 100:+.2f}]: a real change"
        else:
            judged = f"[{low * 100:+.2f}, {high * 100:+.2f}]: no detectable change"
        lines.append(f"{row['series']} on {analysis.devices_text(row['devices'])} vs 1: test "
                     f"accuracy {row['test_accuracy']:.4f} vs {row['test_accuracy_ref']:.4f}, "
                     f"{points} ({judged})")
    return lines


def verdicts(cells, frame, include_contended=False, attributed=None, limits=None):
    """The verdict lines: per family a heading and indented findings, then warnings. Cells with
    an injected fault are left out (they show where a fault lands, not what to choose). Written
    twice (Judge): the second time with the false-discovery control over every comparison."""
    lines, judge = judged(cells, attributed, limits)
    if not lines:
        lines.append("No verdict: no cell has a usable run.")
    return lines + judge.note() + warnings(cells, frame, include_contended)


def judged(cells, attributed=None, limits=None):
    """The verdicts' lines of every family and the Judge that decided them: a first pass
    collects every comparison's p-value, the second states what the control allows."""
    attributed = analysis.attribution(cells) if attributed is None else attributed
    limits = analysis.against_limits(cells, attributed, {}) if limits is None else limits
    looks = cells.groupby("cell_key")["looks"].max().to_dict() if len(cells) else {}
    collected = Judge(looks=looks)
    family_lines(cells, attributed, limits, collected)
    judge = Judge(false_discoveries_controlled(collected.p_values), looks)
    return family_lines(cells, attributed, limits, judge), judge


def family_lines(cells, attributed, limits, judge):
    scaled, changes = analysis.scaling(cells), analysis.accuracy_change(cells)
    wrapper = analysis.wrapper_cost(cells)
    lines = []
    for _, family in analysis.families(cells):
        lines.append(f"{family_title(family)}:")
        keys = set(family["cell_key"])
        for devices in sorted(family["devices"].unique()):
            lines.append("  fastest on " + fastest(family, devices, judge))
        family_scaled = scaled[scaled["cell_key"].isin(keys)]
        suspect = set(family_scaled[family_scaled["suspect"].astype(bool)]["cell_key"])
        lines += ["  " + line for line in more_devices(family, attributed, limits, judge,
                                                       suspect)]
        lines += ["  " + line for line in pays_off(family_scaled, attributed, limits, judge)]
        lines += ["  " + line for line in wrapper_lines(wrapper[wrapper["cell_key"].isin(keys)],
                                                        judge)]
        lines += ["  " + line for line in accuracy_lines(changes[changes["cell_key"].isin(keys)])]
    return lines


def warnings(cells, frame, include_contended):
    lines = []
    contended = frame[frame["status"].eq("ok") & frame["contended"]]
    if len(contended):
        lines.append(f"WARNING: {len(contended)} run(s) were contended (other processes, "
                     f"interrupts, busy siblings, steal or throttling took more than their "
                     f"cell's limit of a rank's cores, or "
                     f"another process used its GPU, while it was timed): "
                     + ("included at your request (--include-contended)" if include_contended
                        else "left out of every number and verdict above"))
    measured = analysis.measured(cells)
    few = measured[measured["n"] < MIN_REPEATS]
    if len(few):
        lines.append(f"WARNING: {len(few)} of {len(measured)} cells have fewer than "
                     f"{MIN_REPEATS} usable repeats: their comparisons stay inconclusive or rest "
                     f"on little; run the grid with --repeat {MIN_REPEATS} or more")
    return lines
