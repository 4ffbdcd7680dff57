"""The answer first: per setup (model, data, global batch, device type), every configuration
(backend × devices × the knobs varied there) ranked by epoch-2 rate with its 95% interval and
whether its place is surely its place (its interval apart from its neighbours': each adjacent
pair judged as the verdicts are, Fieller's interval under Benjamini-Hochberg's control over the
table's comparisons, reports.knobs.judged), then one sentence: "use X on N devices" where the
data supports it, else which are within each other's intervals and the repeats that would
settle it. Runs left out (contended) and cells left out (SUSPECT) are counted, never dropped
silently. Data here; `lines` and `frame` are its words (the summary, the pages), `as_json` its
data for `report --json`.
"""
import math
from dataclasses import dataclass, field, replace

import pandas as pd

from xbench.common.grids.columns import columns
from xbench.common.grids.setting import Role
from xbench.reports import analysis
from xbench.reports.knobs import judged
from xbench.reports.stats import repeats_to_settle
from xbench.reports.verdict import Interval, Verdicts, interval_text
from xbench.reports.verdicts import threshold_of

# What a user decides within: the same samples in the same global batches on one device type.
SETUP = [*analysis.SAME_WORK, "device_type"]
PLACE = ("backend", "devices")  # what every configuration names
# The other settings that may tell two configurations of a setup apart (named where they vary).
KNOBS = [c for c in columns(Role.PLACEMENT, Role.SETUP, Role.TRAINING)
         if c not in (*SETUP, *PLACE)]
RANKED_BY = "epoch-2 rate (samples/s)"


@dataclass(frozen=True)
class Choice:
    """One configuration in its place: its backend's series, devices and the knobs varied in
    its setup (name, value), its rate with its interval, its usable repeats, and whether it is
    surely apart from the one above and the one below (`sure`)."""
    series: str
    devices: int
    knobs: tuple[tuple[str, str], ...]
    cell_key: str
    rate: Interval
    repeats: int
    sure: bool = False

    @property
    def name(self) -> str:
        """'pt-ddp on 2 devices (accumulate=4)'."""
        knobs = ", ".join(f"{k}={v}" for k, v in self.knobs)
        return (f"{self.series} on {analysis.devices_text(self.devices)}"
                + (f" ({knobs})" if knobs else ""))


@dataclass(frozen=True)
class Decision:
    """A setup's ranking and what it allows: the `best` where the first is surely ahead of the
    second (with their `ratio`), else the `tied` first ones not surely apart and the repeats a
    side that would settle the first two (`more_repeats`: more than they have; None: not known
    or beyond 50, `repeats`: the fewer side's); the runs and cells left out."""
    setup: str
    choices: list[Choice]
    best: Choice | None = None
    ratio: Interval | None = None
    tied: int = 0
    repeats: int = 0
    more_repeats: int | None = None
    contended: int = 0
    suspect: list[str] = field(default_factory=list)


def setup_title(first) -> str:
    return (f"{first['model']} ×{first['dataset_multiple']} {first['dataset']}, global batch "
            f"{first['global_batch']}, {first['device_type']}"
            + (f" [env {first['env']}]" if first.get("env") not in (None, "A") else ""))


def keyed(frame: pd.DataFrame) -> pd.Series:
    """Each row's setup as one string (NaN included alike in rows and cells)."""
    return pd.Series(["|".join(map(str, v)) for v in frame[SETUP].itertuples(index=False)],
                     index=frame.index, dtype=object)


def suspect_keys(found: Verdicts, limits: pd.DataFrame) -> set[str]:
    """The cells a SUSPECT verdict rests on (both sides of its impossible ratio), and those
    beyond the machine's limits (MFU or bus bandwidth)."""
    keys = {side.cell_key for family in found.families for v in family.verdicts
            if v.impossible for side in (v.impossible.subject, v.impossible.reference)}
    if len(limits):
        beyond = limits["mfu_suspect"].fillna(False) | limits["bandwidth_suspect"].fillna(False)
        keys |= set(limits[beyond.astype(bool)]["cell_key"])
    return keys


def decisions(frame: pd.DataFrame, cells: pd.DataFrame, found: Verdicts,
              limits: pd.DataFrame) -> list[Decision]:
    """One decision per setup any ok run trained (runs with an injected fault are in none)."""
    ran = frame[frame["status"].eq("ok")] if len(frame) else frame
    ran = ran[ran["training"] == ran["training_without_fault"]] if len(ran) else ran
    if ran.empty:
        return []
    measured = analysis.measured(cells)
    measured = measured[measured["training"] == measured["training_without_fault"]]
    measured = measured.assign(_setup=keyed(measured)) if len(measured) else measured
    suspect = suspect_keys(found, limits)
    made = []
    for setup, rows in ran.groupby(keyed(ran), sort=False):
        here = measured[measured["_setup"] == setup] if len(measured) else measured
        kept = here[~here["cell_key"].isin(suspect)] if len(here) else here
        made.append(ranked(setup_title(rows.iloc[0]), kept,
                           int((rows["contended"] & ~rows["usable"]).sum()),
                           [Choice(c["series"], int(c["devices"]), (), c["cell_key"],
                                   Interval(c["epoch2_rate"]), int(c["n"])).name
                            for _, c in here[here["cell_key"].isin(suspect)].iterrows()]))
    return made


def ranked(title: str, cells: pd.DataFrame, contended: int, suspect: list[str]) -> Decision:
    """The setup's cells ranked by rate, each adjacent pair judged, and what that allows."""
    cells = cells.sort_values("epoch2_rate", ascending=False)
    varied = [k for k in KNOBS if k in cells and cells[k].astype(str).nunique() > 1]
    rows = [c for _, c in cells.iterrows()]
    pairs = judged([(above, below) for above, below in zip(rows, rows[1:])],
                   lambda subject, reference, ratio, judgement: (ratio, judgement))
    apart = [judgement.side == "above" for _, judgement in pairs]
    choices = [Choice(c["series"], int(c["devices"]), tuple((k, str(c[k])) for k in varied),
                      c["cell_key"], Interval(c["epoch2_rate"], c["epoch2_rate_low"],
                                              c["epoch2_rate_high"]), int(c["n"]),
                      sure=(i == 0 or apart[i - 1]) and (i == len(rows) - 1 or apart[i]))
               for i, c in enumerate(rows)]
    decision = Decision(title, choices, contended=contended, suspect=suspect)
    if len(choices) < 2:
        return decision
    ratio = Interval.of(pairs[0][0])
    if apart[0]:
        return replace(decision, best=choices[0], ratio=ratio)
    tied = next((i + 1 for i, sure in enumerate(apart) if sure), len(choices))
    first, second = rows[0]["epoch2_seconds_values"], rows[1]["epoch2_seconds_values"]
    repeats = min(len(first), len(second))
    needed = repeats_to_settle(second, first, threshold_of(pairs[0][0], second, first))
    return replace(decision, ratio=ratio, tied=tied, repeats=repeats,
                   more_repeats=needed - repeats if needed else None)


def sentence(d: Decision) -> str:
    """The one sentence a setup's ranking allows."""
    if not d.choices:
        return "no configuration to rank: " + ("every run was left out (below)"
                                               if left_out_text(d) else "none has a usable run")
    if len(d.choices) == 1:
        return f"only {d.choices[0].name} has usable runs: nothing to rank it against"
    if d.best:
        return (f"use {d.best.name}: surely faster than the next, {d.choices[1].name} "
                f"({interval_text(d.ratio)})")
    names = ", ".join(c.name for c in d.choices[:d.tied])
    settle = ("one run on a side has no interval: run --repeat 3" if d.repeats < 2 else
              f"{d.more_repeats} more repeat{'s' * (d.more_repeats > 1)} a side would settle "
              f"it" if d.more_repeats else
              "within the noise of these runs, more repeats are unlikely to settle it")
    return (f"no configuration is surely best: these {d.tied} are within each other's "
            f"intervals ({names}; the first two: {interval_text(d.ratio)}); {settle}")


def left_out_text(d: Decision) -> str:
    """What the ranking leaves out, counted ('' where nothing)."""
    parts = ([f"{d.contended} contended run(s) (--include-contended uses them)"]
             if d.contended else [])
    if d.suspect:
        parts.append(f"{len(d.suspect)} SUSPECT cell(s) ({', '.join(d.suspect)}: see the "
                     f"verdicts)")
    return ("left out: " + "; ".join(parts)) if parts else ""


def place_text(c: Choice) -> str:
    return "sure" if c.sure else "not sure"


def rate_text(c: Choice) -> str:
    """'1,234 [1,200, 1,270]' (no interval from one run; ∞ where it is unbounded)."""
    def number(value: float) -> str:
        return f"{value:,.0f}" if math.isfinite(value) else "∞"
    if not c.rate.has_interval:
        return number(c.rate.value)
    return f"{number(c.rate.value)} [{number(c.rate.low)}, {number(c.rate.high)}]"


def lines(made: list[Decision]) -> list[str]:
    """The terminal's lines: per setup its title, its ranking, its sentence, what was left
    out."""
    out = []
    for d in made:
        out.append(f"{d.setup}:")
        out += [f"  {i}. {c.name}: {rate_text(c)} samples/s; place {place_text(c)}"
                for i, c in enumerate(d.choices, 1)]
        out += [f"  → {sentence(d)}"] + ([f"  {left_out_text(d)}"] if left_out_text(d) else [])
    return out


def frame(d: Decision) -> pd.DataFrame:
    """A setup's ranking as a table for the pages."""
    return pd.DataFrame([[i, c.name, rate_text(c), c.repeats, place_text(c)]
                         for i, c in enumerate(d.choices, 1)],
                        columns=["rank", "configuration", f"{RANKED_BY}, 95% CI", "repeats",
                                 "place"])


def as_json(made: list[Decision]) -> list[dict]:
    """The decisions by field with their words (reports.json_report makes them strict JSON)."""
    return [{**d.__dict__, "ranked_by": RANKED_BY, "sentence": sentence(d),
             "left_out": left_out_text(d) or None,
             "choices": [{**c.__dict__, "name": c.name} for c in d.choices]} for d in made]


EXPLAINED = ("Per setup, every configuration ranked by its epoch-2 rate with its 95% interval; a "
             "place is sure where its interval is apart from its neighbours' (Fieller's "
             "interval of each adjacent pair, with the false-discovery rate over the table's "
             "comparisons held at 5%, Benjamini-Hochberg).")
