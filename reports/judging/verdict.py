"""A verdict as data: what reports.judging.comparisons decides (`Verdict`, grouped in `Family`s,
with the false-discovery control's `Control` and the `ReportWarning`s in one `Verdicts`), and the
one place they become words (`lines`: the text the console prints and both pages show;
reports.page.pages lays the same words out as Markdown and HTML). Nothing downstream parses text
back into structure: a page, a notebook or `xbench report --json` reads these objects (`as_json`).
"""
import math
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Literal

from xbench.reports.numbers.analysis import devices_text
from xbench.reports.numbers.stats import LOOKS, Ratio

Outcome = Literal["stated", "inconclusive", "held back", "suspect", "not compared"]
Direction = Literal["above", "below"]


class Kind(str, Enum):
    """What a verdict finds (its ratio is always the reference's epoch time over the subject's,
    per sample: above 1, the subject is faster)."""
    FASTEST = "fastest"  # the fastest backend at a device count, against the runner-up
    MORE_DEVICES = "more devices"  # the best N-device cell against the best 1-device cell
    SPEEDUP = "speedup"  # a backend's N devices against its own 1 device
    WRAPPER = "wrapper cost"  # a backend at 1 device against its framework's no-wrapper one
    ACCURACY_SAME = "accuracy the same"  # test accuracy equal on every count and backend
    ACCURACY = "accuracy change"  # a backend's test accuracy on N devices minus on 1


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% interval: NaN bounds where there is none (one run on a side),
    infinite ones where it is unbounded (the denominator not surely away from 0)."""
    value: float
    low: float = math.nan
    high: float = math.nan

    @classmethod
    def of(cls, ratio: Ratio) -> "Interval":
        return cls(float(ratio.value), float(ratio.low), float(ratio.high))

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a cell (its series, device count and key) and what it
    measured (epoch-2 samples/s, mean test accuracy; NaN where the verdict does not use it)."""
    series: str
    devices: int
    cell_key: str | None = None
    rate: float = math.nan
    accuracy: float = math.nan


@dataclass(frozen=True)
class Disturbance:
    """The likely cause of a SUSPECT ratio, a disturbed baseline: the baseline cell's slowest
    usable run (its `repeat` and epoch-2 `rate`, beside the range of its other runs' rates: NaN
    where it ran once) and what took that run's cores in its epoch 2 (`taken`: the shares of
    the most contended rank, by common.measuring.contention's names; empty where nothing was
    recorded), under its grid's contention `limit`."""
    side: Side
    repeat: int
    rate: float
    others: tuple[float, float]
    taken: dict[str, float]
    limit: float | None


@dataclass(frozen=True)
class Impossible:
    """Why a verdict is SUSPECT: `subject` ran at `ratio` the rate of `reference` (its own
    1-device run, or its framework's run without a wrapper), beyond the `most` its devices can
    give (N× on N devices; 1× for a wrapper at 1 device, its whole interval above it), and
    the `baseline` that was likely disturbed (None: none of its runs was timed)."""
    subject: Side
    reference: Side
    ratio: Interval
    most: float
    baseline: Disturbance | None


@dataclass(frozen=True)
class Verdict:
    """One finding: `subject` against `reference` (None: nothing to compare with), their
    `ratio` (or accuracy `difference`) with its interval, the p-value it was tested with
    (None: not tested), its `outcome` and, where stated, its `direction`; where inconclusive,
    the `repeats` it has (the fewer side's) and the repeats a side that would settle it
    (`repeats_needed`, None: more repeats are unlikely to); the looks of --until-conclusive
    behind it; a speedup's `efficiency`; `why` a slowdown happened (the step attribution); and
    where SUSPECT, what is `impossible` and its likely cause."""
    kind: Kind
    family: str
    subject: Side
    reference: Side | None
    outcome: Outcome
    ratio: Interval | None = None
    difference: Interval | None = None
    p_value: float | None = None
    direction: Direction | None = None
    repeats: int = 0
    repeats_needed: int | None = None
    looks: int = 0
    efficiency: float | None = None
    why: str | None = None
    impossible: Impossible | None = None


@dataclass(frozen=True)
class Family:
    """What a user decides within: a model, its data and a batch (`title`), and its verdicts."""
    title: str
    verdicts: list[Verdict]


@dataclass(frozen=True)
class Control:
    """The false-discovery control over the report's comparisons: how many had an interval,
    how many it held back, whether any had looks of --until-conclusive."""
    counted: int
    held: int
    looked: bool


@dataclass(frozen=True)
class ReportWarning:
    """What the verdicts leave out: `count` contended runs (`included`: at the user's request),
    or `count` of `of` cells with fewer than `needed` usable repeats."""
    kind: Literal["contended", "few repeats"]
    count: int
    of: int | None = None
    needed: int | None = None
    included: bool = False


@dataclass(frozen=True)
class Verdicts:
    """Everything the report's verdicts say: per family its findings, the control, warnings."""
    families: list[Family]
    control: Control | None = None
    warnings: list[ReportWarning] = field(default_factory=list)


HELD = ("not stated: its interval excludes no change, but not with the false-discovery rate over "
        "all the report's comparisons held at 5% (at its look's level, with looks)")
NO_VERDICT = "No verdict: no cell has a usable run."


def interval_text(ratio: Ratio | Interval, unit="×") -> str:
    """'1.23× [1.10, 1.37]'; an unbounded interval says so ('[−∞, ∞], unbounded')."""
    if not ratio.has_interval:
        return f"{ratio.value:.2f}{unit}"
    low, high = (f"{v:.2f}" if math.isfinite(v) else ("−∞" if v < 0 else "∞")
                 for v in (ratio.low, ratio.high))
    bounded = math.isfinite(ratio.low) and math.isfinite(ratio.high)
    return f"{ratio.value:.2f}{unit} [{low}, {high}]" + ("" if bounded else ", unbounded")


def after(looks: int) -> str:
    """' (after 3 looks of --until-conclusive, tested at 5% / 10)' where there were any."""
    return (f" (after {looks} look{'s' if looks > 1 else ''} of --until-conclusive, "
            f"tested at 5% / {LOOKS})" if looks else "")


def not_stated(verdict: Verdict) -> str:
    """Why a comparison was not stated: held back, or inconclusive and what would settle it."""
    if verdict.outcome == "held back":
        return HELD + after(verdict.looks)
    if verdict.repeats < 2:
        return "inconclusive: one run on a side has no interval (run --repeat 3)"
    return ("inconclusive: " + (f"about {verdict.repeats_needed} repeats each would settle it"
                                if verdict.repeats_needed else
                                "within the noise of these runs; more repeats are unlikely to "
                                "settle it"))


def decided(head: str, verdict: Verdict, above: str, below: str) -> str:
    """'head: above' or 'head: below' where stated, else 'head;' and why not."""
    if verdict.outcome == "stated":
        return f"{head}: {above if verdict.direction == 'above' else below}{after(verdict.looks)}"
    return f"{head}; " + not_stated(verdict)


def fastest_text(v: Verdict) -> str:
    best, head = v.subject, f"fastest on {devices_text(v.subject.devices)}: "
    if v.reference is None:
        return head + f"only {best.series} ran ({best.rate:,.0f} samples/s)"
    versus = (f"{best.series} {best.rate:,.0f} samples/s vs {v.reference.series} "
              f"{v.reference.rate:,.0f}: {interval_text(v.ratio)}")
    if v.outcome == "stated":
        return head + f"{best.series} is fastest ({versus}){after(v.looks)}"
    return head + f"{versus}; " + not_stated(v)


# What can take a rank's cores (common.measuring.contention.TAKEN), in words.
TAKEN_WORDS = {"other_cpu_share": "other processes", "interrupt_share": "interrupts",
               "sibling_share": "busy hyperthread siblings", "steal_share": "steal",
               "throttled_share": "its cgroup's throttling"}


def beyond_text(impossible: Impossible) -> str:
    """What the ratio is beyond: 'beyond the 2× 2 devices can give', or a wrapper's."""
    if impossible.most > 1:
        return (f"beyond the {impossible.most:g}× {devices_text(impossible.subject.devices)} "
                f"can give")
    return "its interval wholly above 1×: a wrapper adds work, it cannot be faster than none"


def disturbance_text(d: Disturbance) -> str:
    """'pt-single on 1 device, its slowest run (repeat 2) at 488 samples/s against 2,000-2,111
    in its other runs; what took its cores in that run's epoch 2: other processes 37% (limit
    10%)'."""
    where = f"{d.side.series} on {devices_text(d.side.devices)}"
    runs = (f"its one run (repeat {d.repeat}) at {d.rate:,.0f} samples/s"
            if math.isnan(d.others[0]) else
            f"its slowest run (repeat {d.repeat}) at {d.rate:,.0f} samples/s against "
            f"{d.others[0]:,.0f}–{d.others[1]:,.0f} in its other runs")
    limit = f" (limit {d.limit:.0%})" if d.limit is not None else ""
    taken = ", ".join(f"{TAKEN_WORDS.get(name, name)} {share:.0%}"
                      for name, share in d.taken.items())
    took = (f"what took its cores in that run's epoch 2: {taken}{limit}" if taken else
            "nothing was recorded taking its cores in that run's epoch 2")
    return f"{where}, {runs}; {took}"


def suspect_text(v: Verdict, named: bool = True) -> str:
    """'SUSPECT (beyond ...), not taken as a result: likely a disturbed baseline: ...'; where
    the impossible ratio is another comparison than the verdict's own (an N-device cell's
    against its own 1 device), that comparison first. `named`: the head has not said SUSPECT."""
    impossible = v.impossible
    if impossible is None:
        return "SUSPECT, not taken as a result" if named else "not taken as a result"
    own = (impossible.subject.cell_key == v.subject.cell_key
           and impossible.reference.cell_key == v.reference.cell_key)
    text = ("" if not named else f"SUSPECT ({beyond_text(impossible)}), " if own
            else "SUSPECT, ")
    text += "not taken as a result: "
    if not own:
        text += (f"{impossible.subject.series} on {devices_text(impossible.subject.devices)} "
                 f"ran {interval_text(impossible.ratio)} the rate of "
                 f"{impossible.reference.series} on "
                 f"{devices_text(impossible.reference.devices)}, {beyond_text(impossible)}; ")
    return text + "likely a disturbed baseline" + (
        f": {disturbance_text(impossible.baseline)}" if impossible.baseline else "")


def more_devices_text(v: Verdict) -> str:
    devices = v.subject.devices
    head = (f"{devices_text(devices)} at best ({v.subject.series}) vs 1 device at best "
            f"({v.reference.series}): {interval_text(v.ratio)}")
    if v.outcome == "suspect":
        return f"{head}: " + suspect_text(v)
    return decided(head, v, f"{devices} devices pay off here",
                   f"{devices} devices do not pay off here (slower than 1)")


def speedup_text(v: Verdict) -> str:
    head = (f"{v.subject.series} on {devices_text(v.subject.devices)}: speedup "
            f"{interval_text(v.ratio)}, efficiency ")
    if v.outcome == "suspect":
        return f"{head}SUSPECT ({v.efficiency:.0%}, above 100%), " + suspect_text(v, named=False)
    return decided(f"{head}{v.efficiency:.0%}", v, "pays off",
                   "does not pay off (slower than 1 device)")


def wrapper_text(v: Verdict) -> str:
    head = (f"{v.subject.series} at 1 device: {interval_text(v.ratio)} the rate of "
            f"{v.reference.series} (no parallel wrapper)")
    if v.outcome == "suspect":
        return f"{head}: " + suspect_text(v)
    return decided(head, v, "faster than no wrapper", "its machinery costs time at 1 device")


def accuracy_same_text(v: Verdict) -> str:
    return ("test accuracy: the same on every device count, in every backend "
            f"({v.reference.accuracy:.4f}; one seed)")


def accuracy_text(v: Verdict) -> str:
    d, low, high = v.difference.value, v.difference.low, v.difference.high
    if math.isnan(low):
        judged = "one run each, one seed: no interval"
    elif low == high:
        judged = "identical repeats (one seed): exact for this seed, seed-to-seed spread unmeasured"
    elif low > 0 or high < 0:
        judged = f"[{low * 100:+.2f}, {high * 100:+.2f}]: a real change"
    else:
        judged = f"[{low * 100:+.2f}, {high * 100:+.2f}]: no detectable change"
    return (f"{v.subject.series} on {devices_text(v.subject.devices)} vs 1: test accuracy "
            f"{v.subject.accuracy:.4f} vs {v.reference.accuracy:.4f}, {d * 100:+.2f} points "
            f"({judged})")


TEXT = {Kind.FASTEST: fastest_text, Kind.MORE_DEVICES: more_devices_text,
        Kind.SPEEDUP: speedup_text, Kind.WRAPPER: wrapper_text,
        Kind.ACCURACY_SAME: accuracy_same_text, Kind.ACCURACY: accuracy_text}


def finding_lines(verdict: Verdict) -> list[str]:
    """The finding's line and, where it has one, its reason's ('why: ...')."""
    lines = [TEXT[verdict.kind](verdict)]
    if verdict.why:
        named = f" ({verdict.subject.series})" if verdict.kind is Kind.MORE_DEVICES else ""
        lines.append(f"why{named}: {verdict.why}")
    return lines


def control_text(control: Control) -> str:
    """The line on the false-discovery control."""
    return (f"({control.counted} comparisons with an interval; a verdict is stated where its 95% "
            f"interval excludes no change and the false-discovery rate over all of them is "
            f"held at 5% (Benjamini-Hochberg)"
            + (f"; one with runs added by --until-conclusive is tested at its look's level, "
               f"5% / {LOOKS} (a sequential plan of at most {LOOKS} looks, the level spent "
               f"evenly: repeating until a verdict appears cannot raise the false-positive "
               f"rate above 5%)" if control.looked else "")
            + (f"; {control.held} held back" if control.held else "") + ")")


def warning_text(warning: ReportWarning) -> str:
    if warning.kind == "contended":
        return (f"WARNING: {warning.count} run(s) were contended (other processes, interrupts, "
                f"busy siblings, steal or throttling took more than their cell's limit of a "
                f"rank's cores, or another process used its GPU, while it was timed): "
                + ("included at your request (--include-contended)" if warning.included
                   else "left out of every number and verdict above"))
    return (f"WARNING: {warning.count} of {warning.of} cells have fewer than {warning.needed} "
            f"usable repeats: their comparisons stay inconclusive or rest on little; run the "
            f"grid with --repeat {warning.needed} or more")


def headings(verdicts: Verdicts) -> list[str]:
    """The lines that stand after the families: no verdict, the control's."""
    return (([] if verdicts.families else [NO_VERDICT])
            + ([control_text(verdicts.control)] if verdicts.control else []))


def lines(verdicts: Verdicts) -> list[str]:
    """The verdicts as text lines: per family its title and its findings indented by two
    spaces (a finding's reason by four), then the control's line and the warnings (the
    printed summary's layout)."""
    out = []
    for family in verdicts.families:
        out.append(f"{family.title}:")
        for verdict in family.verdicts:
            finding, *reason = finding_lines(verdict)
            out += ["  " + finding, *["    " + line for line in reason]]
    return out + headings(verdicts) + [warning_text(w) for w in verdicts.warnings]


def as_json(verdicts: Verdicts) -> dict:
    """The verdicts by field (reports.page.json_report makes them strict JSON), each finding and
    warning with its text, so a reader can match the page."""
    def fields_of(found) -> dict:
        return {f.name: getattr(found, f.name) for f in fields(found)}
    return {"families": [{"title": family.title,
                          "verdicts": [{**fields_of(v), "text": finding_lines(v)}
                                       for v in family.verdicts]}
                         for family in verdicts.families],
            "control": verdicts.control,
            "control_text": control_text(verdicts.control) if verdicts.control else None,
            "warnings": [{**fields_of(w), "text": warning_text(w)} for w in verdicts.warnings]}
