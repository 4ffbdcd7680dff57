"""The verdicts at the top of the report: for each model, data and batch, which backend is fastest
at each device count and whether adding devices pays off, each stated only where its 95% interval
says so and the false-discovery rate over all the report's comparisons stays at 5%
(Benjamini-Hochberg), otherwise "inconclusive" with the repeats that would settle it (with 80%
power); whether more devices changed accuracy; and warnings for what the verdicts leave out.
Each finding is a reports.judging.verdict.Verdict (data); reports.judging.verdict renders them.
"""
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from xbench.reports.judging.suspect import beyond_a_wrapper, impossible
from xbench.reports.judging.verdict import (
    Control,
    Family,
    Interval,
    Kind,
    Outcome,
    ReportWarning,
    Side,
    Verdict,
    Verdicts,
)
from xbench.reports.judging.why import why
from xbench.reports.numbers import analysis
from xbench.reports.numbers.stats import (
    LEVEL,
    LOOKS,
    false_discoveries_controlled,
    finite,
    ratio_of_means,
    ratio_p_value,
    repeats_to_settle,
    sequential_p,
)
from xbench.reports.step_model.utilisation import against_limits

MIN_REPEATS = 3


def family_title(cells):
    first = cells.iloc[0]
    return (f"{first['model']} ×{first['dataset_multiple']} {first['dataset']}, "
            f"{analysis.batch_kind(first['batch_mode'])} batch {first['batch']} "
            f"({analysis.scaling_kind(first['batch_mode'])} scaling), {first['device_type']}"
            + (f" [env {first['env']}]" if first.get("env") not in (None, "A") else ""))


def family_titles(families: list) -> list[str]:
    """Each family's title; where two would read alike (one setup trained two ways, compiled
    and not, or with two seeds), each with what tells them apart (its training's words, or
    the setting and its value), so that no two groups of verdicts share a heading."""
    plain = [family_title(family) for family in families]
    keys = [c for c in analysis.SETUP if c != "backend"]
    titles = []
    for title, family in zip(plain, families):
        alike = [other.iloc[0] for named, other in zip(plain, families) if named == title]
        apart = [k for k in keys if len({str(first[k]) for first in alike}) > 1]
        first = family.iloc[0]
        titles.append(title + "".join(f", {first[k]}" if k == "training" else f", {k} {first[k]}"
                                      for k in apart))
    return titles


@dataclass(frozen=True)
class Judgement:
    """How the judge decided one comparison: 'above' or 'below' its threshold, 'held' (the
    interval excludes it, the control does not allow it) or None; the p-value it was tested
    with (NaN: no interval; a look's, scaled by the sequential plan); the repeats of its fewer
    side; the repeats a side that would settle it where undecided (None: not known, or more
    than MAX_REPEATS); the looks of --until-conclusive behind it."""
    side: Literal["above", "below", "held"] | None
    p_value: float
    repeats: int
    needed: int | None
    looks: int

    def outcome(self) -> Outcome:
        return ("stated" if self.side in ("above", "below") else
                "held back" if self.side == "held" else "inconclusive")

    def verdict(self, kind: Kind, family: str, subject: Side, reference: Side, ratio,
                **more) -> Verdict:
        """The verdict this judgement gives of `ratio` between `subject` and `reference`."""
        return Verdict(kind, family, subject, reference, self.outcome(), Interval.of(ratio),
                       p_value=None if math.isnan(self.p_value) else float(self.p_value),
                       direction=self.side if self.side in ("above", "below") else None,
                       repeats=self.repeats, repeats_needed=self.needed, looks=self.looks,
                       **more)


class Judge:
    """Whether a comparison may be stated. A ratio is stated where its 95% interval is beyond
    its threshold and, over all the report's comparisons, Benjamini-Hochberg holds the
    false-discovery rate at 5%. The verdicts are made twice: the first pass (no `stated`)
    collects every comparison's p-value in order, the second decides with what the control
    allows (`stated`, in the same order)."""

    def __init__(self, stated: np.ndarray | None = None, looks: dict[str, int] | None = None):
        self.stated, self.p_values, self.open = stated, [], []
        self.looks = looks or {}  # cell key -> the last look of --until-conclusive that ran it

    def looks_of(self, keys: tuple[str, str]) -> int:
        """The last look of --until-conclusive at a comparison of these cells (0: none)."""
        return max(self.looks.get(key, 0) for key in keys)

    def judge(self, ratio, a_seconds, b_seconds, keys: tuple[str, str] = ("", "")) -> Judgement:
        """How `ratio` (mean(a)/mean(b), maybe scaled per sample: its threshold of 1 is 1/scale
        for the epoch times' ratio) is decided. A comparison not stated is kept in `open` with
        the cells (`keys`) whose repeats would settle it."""
        a, b = finite(a_seconds), finite(b_seconds)
        threshold = threshold_of(ratio, a, b)
        index, looks = len(self.p_values), self.looks_of(keys)
        p_value = ratio_p_value(a, b, threshold)
        self.p_values.append(sequential_p(p_value, looks))
        side = "above" if ratio.above(1) else "below" if ratio.below(1) else None
        if side and self.stated is not None and not self.stated[index]:
            side = "held"
        needed = (repeats_to_settle(a, b, threshold, level=level_of(looks))
                  if side is None else None)
        if side in (None, "held"):
            self.open.append(Open(keys, p_value, side == "held", needed, min(len(a), len(b))))
        return Judgement(side, self.p_values[-1], min(len(a_seconds), len(b_seconds)), needed,
                         looks)

    def control(self) -> Control | None:
        """The control's numbers, where there was anything to control."""
        counted = int(np.sum(~np.isnan(np.asarray(self.p_values, dtype=float))))
        if not counted:
            return None
        return Control(counted, sum(o.held for o in self.open), any(self.looks.values()))


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


def level_of(looks: int) -> float:
    """The confidence a comparison is tested at: LEVEL, or a look's of the sequential plan."""
    return 1 - (1 - LEVEL) / LOOKS if looks else LEVEL


def side(cell, suffix: str = "", series: str | None = None) -> Side:
    """A row of the cell table as a side of a verdict; `suffix` '_ref': its reference's columns
    (a 1-device cell; `series` names it where the row does not)."""
    key = cell.get(f"cell_key{suffix}")
    return Side(str(series or cell["series"]), 1 if suffix else int(cell["devices"]),
                None if key is None else str(key),
                float(cell.get(f"epoch2_rate{suffix}", math.nan)),
                float(cell.get(f"test_accuracy{suffix}", math.nan)))


def fastest(cells, devices, judge, family: str) -> Verdict:
    """The fastest backend at `devices` (a count some cell ran on), against the runner-up."""
    here = cells[cells["devices"] == devices].sort_values("epoch2_rate", ascending=False)
    best = here.iloc[0]
    if len(here) == 1:
        return Verdict(Kind.FASTEST, family, side(best), None, "not compared")
    second = here.iloc[1]
    ratio = ratio_of_means(second["epoch2_seconds_values"], best["epoch2_seconds_values"])
    judgement = judge.judge(ratio, second["epoch2_seconds_values"], best["epoch2_seconds_values"],
                            (second["cell_key"], best["cell_key"]))
    return judgement.verdict(Kind.FASTEST, family, side(best), side(second), ratio)


def cell_of(cells, key: str):
    """The row of the cell table with this key."""
    return cells[cells["cell_key"] == key].iloc[0]


def own_speedup(row, cells):
    """An N-device cell's speedup over its own 1-device run (a row of
    reports.numbers.analysis.scaling) as what makes it SUSPECT."""
    return impossible(side(row), side(row, "_ref"), row["speedup_ratio"], row["devices"],
                      cell_of(cells, row["cell_key_ref"]))


def pays_off(scaled, cells, attributed, limits, judge, family: str) -> list[Verdict]:
    """Per backend and device count its speedup over its own 1-device run, and where it is
    below 1, why (from the N-device cell's step attribution); SUSPECT, not judged, where it is
    beyond N."""
    found = []
    for _, row in scaled[scaled["devices"] > 1].iterrows():
        ratio, efficiency = row["speedup_ratio"], float(row["efficiency_ratio"].value)
        reason = why(row, attributed, limits) if ratio.value < 1 else None
        mine, reference = side(row), side(row, "_ref")
        if row["suspect"]:
            found.append(Verdict(Kind.SPEEDUP, family, mine, reference, "suspect",
                                 Interval.of(ratio), efficiency=efficiency, why=reason,
                                 impossible=own_speedup(row, cells)))
            continue
        judgement = judge.judge(ratio, row["epoch2_seconds_values_ref"],
                                row["epoch2_seconds_values"],
                                (row["cell_key_ref"], row["cell_key"]))
        found.append(judgement.verdict(Kind.SPEEDUP, family, mine, reference, ratio,
                                       efficiency=efficiency, why=reason))
    return found


def more_devices(cells, attributed, limits, judge, suspect: dict,
                 family: str) -> list[Verdict]:
    """The decision itself: the fastest N-device cell against the fastest 1-device cell,
    whatever their backends (and why, where the N devices are slower); suspect, not judged,
    where either efficiency is above 100% (this one's, or the N-device cell's against its own
    1-device run: `suspect`, {cell_key: its row of reports.numbers.analysis.scaling}): the report
    refuses that number, so no verdict rests on it, and says which it is."""
    ones = cells[cells["devices"] == 1]
    if ones.empty:
        return []
    one = ones.loc[ones["epoch2_rate"].idxmax()]
    found = []
    for devices in sorted(d for d in cells["devices"].unique() if d > 1):
        here = cells[cells["devices"] == devices]
        best = here.loc[here["epoch2_rate"].idxmax()]
        ratio = ratio_of_means(one["epoch2_seconds_values"], best["epoch2_seconds_values"])
        ratio = ratio.scaled(best["epoch2_samples"] / one["epoch2_samples"])
        if ratio.value / devices > 1 or best["cell_key"] in suspect:
            beyond = (impossible(side(best), side(one), ratio, devices, one)
                      if ratio.value / devices > 1 else own_speedup(suspect[best["cell_key"]],
                                                                     cells))
            found.append(Verdict(Kind.MORE_DEVICES, family, side(best), side(one), "suspect",
                                 Interval.of(ratio), impossible=beyond))
            continue
        judgement = judge.judge(ratio, one["epoch2_seconds_values"],
                                best["epoch2_seconds_values"], (one["cell_key"], best["cell_key"]))
        found.append(judgement.verdict(
            Kind.MORE_DEVICES, family, side(best), side(one), ratio,
            why=why(best, attributed, limits) if ratio.value < 1 else None))
    return found


def wrapper_costs(wrapper, cells, judge, family: str) -> list[Verdict]:
    """Each backend at 1 device against its framework's reference without a parallel wrapper;
    SUSPECT, not judged, where it is faster than the reference beyond its interval."""
    found = []
    for _, row in wrapper.iterrows():
        mine, reference = side(row), side(row, "_ref", row["reference"])
        if beyond_a_wrapper(row["ratio"]):
            found.append(Verdict(Kind.WRAPPER, family, mine, reference, "suspect",
                                 Interval.of(row["ratio"]), impossible=impossible(
                                     mine, reference, row["ratio"], 1,
                                     cell_of(cells, row["cell_key_ref"]))))
            continue
        judgement = judge.judge(row["ratio"], row["epoch2_seconds_values_ref"],
                                row["epoch2_seconds_values"],
                                (row["cell_key_ref"], row["cell_key"]))
        found.append(judgement.verdict(Kind.WRAPPER, family, mine, reference, row["ratio"]))
    return found


def accuracy_changes(changes, family: str) -> list[Verdict]:
    """Test accuracy on N devices against 1: one verdict where it is the same everywhere, else
    one per backend and count, with the difference's interval."""
    differences = [row["difference"][0] for _, row in changes.iterrows()
                   if not math.isnan(row["difference"][0])]
    if differences and max(abs(d) for d in differences) < 5e-5:
        first = changes.iloc[0]
        return [Verdict(Kind.ACCURACY_SAME, family, side(first), side(first, "_ref"), "stated")]
    found = []
    for _, row in changes.iterrows():
        d, low, high = map(float, row["difference"])
        if math.isnan(d):
            continue
        outcome = ("inconclusive" if math.isnan(low) or (low <= 0 <= high and low != high)
                   else "stated")
        found.append(Verdict(Kind.ACCURACY, family, side(row), side(row, "_ref"), outcome,
                             difference=Interval(d, low, high),
                             repeats=min(len(row["test_accuracy_values"]),
                                         len(row["test_accuracy_values_ref"]))))
    return found


def verdicts(cells, frame, include_contended=False, attributed=None, limits=None) -> Verdicts:
    """The report's verdicts: per family its findings, the control, then warnings. Cells with
    an injected fault are left out (they show where a fault lands, not what to choose). Made
    twice (Judge): the second time with the false-discovery control over every comparison."""
    families, judge = judged(cells, attributed, limits)
    return Verdicts(families, judge.control(), warnings(cells, frame, include_contended))


def judged(cells, attributed=None, limits=None) -> tuple[list[Family], Judge]:
    """The verdicts of every family and the Judge that decided them: a first pass collects
    every comparison's p-value, the second states what the control allows."""
    attributed = analysis.attribution(cells) if attributed is None else attributed
    limits = against_limits(cells, attributed, {}) if limits is None else limits
    looks = cells.groupby("cell_key")["looks"].max().to_dict() if len(cells) else {}
    collected = Judge(looks=looks)
    family_verdicts(cells, attributed, limits, collected)
    judge = Judge(false_discoveries_controlled(collected.p_values), looks)
    return family_verdicts(cells, attributed, limits, judge), judge


def family_verdicts(cells, attributed, limits, judge) -> list[Family]:
    scaled, changes = analysis.scaling(cells), analysis.accuracy_change(cells)
    wrapper = analysis.wrapper_cost(cells)
    families, grouped = [], [family for _, family in analysis.families(cells)]
    for title, family in zip(family_titles(grouped), grouped):
        keys = set(family["cell_key"])
        found = [fastest(family, devices, judge, title)
                 for devices in sorted(family["devices"].unique())]
        family_scaled = scaled[scaled["cell_key"].isin(keys)]
        suspect = {row["cell_key"]: row for _, row
                   in family_scaled[family_scaled["suspect"].astype(bool)].iterrows()}
        found += more_devices(family, attributed, limits, judge, suspect, title)
        found += pays_off(family_scaled, family, attributed, limits, judge, title)
        found += wrapper_costs(wrapper[wrapper["cell_key"].isin(keys)], family, judge, title)
        found += accuracy_changes(changes[changes["cell_key"].isin(keys)], title)
        families.append(Family(title, found))
    return families


def warnings(cells, frame, include_contended) -> list[ReportWarning]:
    found = []
    contended = frame[frame["status"].eq("ok") & frame["contended"]]
    if len(contended):
        found.append(ReportWarning("contended", len(contended), included=include_contended))
    measured = analysis.measured(cells)
    few = measured[measured["n"] < MIN_REPEATS]
    if len(few):
        found.append(ReportWarning("few repeats", len(few), len(measured), MIN_REPEATS))
    return found
