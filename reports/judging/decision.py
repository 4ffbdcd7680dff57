"""The answer first: per setup (model, data, global batch, device type), every configuration
(backend × devices × the knobs varied there) ranked by epoch-2 rate with its 95% interval and
whether its place is surely its place (its interval apart from its neighbours': each adjacent
pair judged as the verdicts are, Fieller's interval under Benjamini-Hochberg's control over the
table's comparisons, reports.judging.knobs.judged), then one sentence: "use X on N devices" where
the data supports it, else which are within each other's intervals and the repeats that would
settle it. Where the grid has a target (an accuracy or a loss), what is decided is the time to
it: per setup and target, the global batch is a knob (a larger one may train faster per sample and
need more of them), the configurations are ranked by their median training time to the target
over their seeds (reports.judging.goodput's, evaluations left out), and adjacent places are judged
by a two-sided Mann-Whitney test under Benjamini-Hochberg. Runs left out (contended) and cells left
out (SUSPECT) are counted, never dropped silently. Data here; `lines` and `frame` are its words (the
summary, the pages), `as_json` its data for `report --json`.
"""
import math
from dataclasses import dataclass, field, replace

import pandas as pd
from scipy import stats

from xbench.common.grids.columns import columns, draws
from xbench.common.grids.setting import Role
from xbench.reports.judging import goodput
from xbench.reports.judging.comparisons import threshold_of
from xbench.reports.judging.knobs import judged
from xbench.reports.judging.verdict import Interval, Verdicts, interval_text
from xbench.reports.numbers import analysis
from xbench.reports.numbers.stats import LEVEL, false_discoveries_controlled, repeats_to_settle

# What a user decides within: the same samples in the same global batches on one device type.
SETUP = [*analysis.SAME_WORK, "device_type"]
PLACE = ("backend", "devices")  # what every configuration names
# The other settings that may tell two configurations of a setup apart (named where they vary).
KNOBS = [c for c in columns(Role.PLACEMENT, Role.SETUP, Role.TRAINING)
         if c not in (*SETUP, *PLACE)]
# A target's setup: the same work but for the draw (its runs are the seeds) and the global batch.
TARGET_SETUP = [*(c for c in SETUP if c not in (*draws(), "global_batch")), "metric", "target"]
RANKED_BY = "epoch-2 rate (samples/s)"
NAMED = 4  # configurations named in a sentence; more are counted


@dataclass(frozen=True)
class Choice:
    """One configuration in its place: its backend's series, devices and the knobs varied in
    its setup (name, value), what it is ranked by (its rate, or its median time to a target)
    with its interval and that interval's coverage, its usable repeats (or seeds) and how many
    of them were contended (used at the user's request: --include-contended), and whether it
    is surely apart from the one above and the one below (`sure`)."""
    series: str
    devices: int
    knobs: tuple[tuple[str, str], ...]
    cell_key: str
    value: Interval
    repeats: int
    sure: bool = False
    coverage: float = LEVEL
    contended: int = 0

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
    or beyond 50, `repeats`: the fewer side's); the runs and cells left out. `ranked_by`:
    RANKED_BY, or a target's time (the lower first)."""
    setup: str
    choices: list[Choice]
    ranked_by: str = RANKED_BY
    best: Choice | None = None
    ratio: Interval | None = None
    tied: int = 0
    repeats: int = 0
    more_repeats: int | None = None
    contended: int = 0
    suspect: list[str] = field(default_factory=list)


def setup_title(first, batch: bool = True) -> str:
    return (f"{first['model']} ×{first['dataset_multiple']} {first['dataset']}, "
            + (f"global batch {first['global_batch']}, " if batch else "")
            + str(first["device_type"])
            + (f" [env {first['env']}]" if first.get("env") not in (None, "A") else ""))


def keyed(frame: pd.DataFrame) -> pd.Series:
    """Each row's setup as one string (NaN included alike in rows and cells)."""
    return pd.Series(["|".join(map(str, v)) for v in frame[SETUP].itertuples(index=False)],
                     index=frame.index, dtype=object)


def suspect_keys(found: Verdicts, limits: pd.DataFrame) -> set[str]:
    """The cells a SUSPECT verdict rests on (both sides of its impossible ratio), and those
    beyond the machine's limits (MFU or bus bandwidth): what the figures ring."""
    keys = {side.cell_key for family in found.families for v in family.verdicts
            if v.impossible for side in (v.impossible.subject, v.impossible.reference)}
    return keys | beyond_limits(limits)


def beyond_limits(limits: pd.DataFrame) -> set[str]:
    """The cells whose own numbers are impossible: MFU or bus bandwidth above the machine's."""
    if limits.empty:
        return set()
    beyond = limits["mfu_suspect"].fillna(False) | limits["bandwidth_suspect"].fillna(False)
    return set(limits[beyond.astype(bool)]["cell_key"])


def impossible_runs(found: Verdicts) -> tuple[set[tuple[str, int]], set[str]]:
    """What makes each SUSPECT ratio impossible, to leave out of the ranking and nothing more:
    the disturbed baseline's slowest run ((cell key, repeat): a disturbance only slows a run),
    or, where no run of the baseline was timed, the baseline cell. The other side, a clean
    cell, stays."""
    runs, cells = set(), set()
    for family in found.families:
        for verdict in family.verdicts:
            if not verdict.impossible:
                continue
            baseline = verdict.impossible.baseline
            if baseline is None:
                cells.add(verdict.impossible.reference.cell_key)
            else:
                runs.add((baseline.side.cell_key, baseline.repeat))
    return runs, cells


def without_runs(frame: pd.DataFrame, runs: set[tuple[str, int]]) -> pd.DataFrame:
    """`frame` with `runs` ((cell key, repeat)) no longer usable."""
    left_out = [(key, repeat) in runs for key, repeat in zip(frame["cell_key"], frame["repeat"])]
    return frame.assign(usable=frame["usable"] & ~pd.Series(left_out, index=frame.index))


def decisions(frame: pd.DataFrame, cells: pd.DataFrame, found: Verdicts,
              limits: pd.DataFrame) -> list[Decision]:
    """One decision per setup any ok run trained (runs with an injected fault are in none): by
    time to the target where its rows have one, else by rate. A SUSPECT ratio's disturbed run
    is left out of the ranking (its cell ranked on its other runs), a cell beyond the machine's
    limits wholly; each is named under its setup."""
    ran = frame[frame["status"].eq("ok")] if len(frame) else frame
    ran = ran[ran["training"] == ran["training_without_fault"]] if len(ran) else ran
    if ran.empty:
        return []
    targeted = goodput.target_rows(ran)
    runs, doubted = impossible_runs(found)
    doubted |= beyond_limits(limits)
    made = to_target(frame, runs, doubted) if len(targeted) else []
    included = ran[ran["contended"] & ran["usable"]]["cell_key"].value_counts().to_dict()
    ran = ran.drop(targeted.index)
    if ran.empty:
        return made
    if runs:
        cells = analysis.cell_table(without_runs(frame, runs))
    measured = analysis.measured(cells)
    measured = measured[measured["training"] == measured["training_without_fault"]]
    measured = measured.assign(_setup=keyed(measured)) if len(measured) else measured
    for setup, rows in ran.groupby(keyed(ran), sort=False):
        here = measured[measured["_setup"] == setup] if len(measured) else measured
        kept = here[~here["cell_key"].isin(doubted)] if len(here) else here
        dropped = [f"run {repeat} of {name}" for key, repeat in sorted(runs)
                   for name in names(rows, key)]
        made.append(ranked(setup_title(rows.iloc[0]), kept,
                           int((rows["contended"] & ~rows["usable"]).sum()),
                           [*names(here[here["cell_key"].isin(doubted)]), *dropped], included))
    return made


def names(rows: pd.DataFrame, key: str | None = None) -> list[str]:
    """'pt-ddp on 2 devices' of each cell in `rows` (of the one cell `key`, where given)."""
    rows = rows[rows["cell_key"] == key] if key is not None else rows
    return list(dict.fromkeys(f"{c['series']} on {analysis.devices_text(int(c['devices']))}"
                              for _, c in rows.iterrows()))


def to_target(frame: pd.DataFrame, runs: set[tuple[str, int]],
              cells: set[str]) -> list[Decision]:
    """Per setup and target, its configurations ranked by their median training time to it
    (reports.judging.goodput's records of the rows with a target; runs with a fault in none). A
    configuration with no usable run is not ranked; a SUSPECT ratio's disturbed run (`runs`:
    (cell key, repeat)) is left out of its configuration's seeds, and a configuration with a
    doubted cell (`cells`) wholly; each is named."""
    plain = frame[frame["training"] == frame["training_without_fault"]]
    plain = plain[[(key, repeat) not in runs
                   for key, repeat in zip(plain["cell_key"], plain["repeat"])]]
    records, targeted = goodput.target_table(plain), goodput.target_rows(plain)
    targeted = targeted.assign(configuration=analysis.configuration(targeted))
    doubted = set(targeted[targeted["cell_key"].isin(cells)]["configuration"])
    dropped = [f"seed {row['seed']} of {row['series']} on "
               f"{analysis.devices_text(int(row['devices']))}"
               for _, row in frame.iterrows() if (row["cell_key"], row["repeat"]) in runs]
    made = []
    for _, group in records.groupby(TARGET_SETUP, sort=False, dropna=False):
        first = group.iloc[0]
        rows = targeted[targeted["configuration"].isin(group["configuration"])]
        left = group[group["configuration"].isin(doubted)]
        usable = group["training_seconds"].map(lambda t: t["n"] > 0)
        target = goodput.target_text(first)
        empty = Decision(f"{setup_title(first, batch=False)}, to {target}", [],
                         ranked_by=f"training time to {target} (median over seeds, s)",
                         contended=int((rows["status"].eq("ok") & rows["contended"]
                                        & ~rows["usable"]).sum()),
                         suspect=[*(f"{c['series']} on {analysis.devices_text(c['devices'])}"
                                    for _, c in left.iterrows()), *dropped])
        included = rows[rows["status"].eq("ok") & rows["contended"] & rows["usable"]]
        made.append(by_time(group[usable & ~group["configuration"].isin(doubted)], empty,
                            included["configuration"].value_counts().to_dict()))
    return made


def by_time(group: pd.DataFrame, empty: Decision, included: dict[str, int]) -> Decision:
    """`group`'s configurations ranked by median training time to the target (a run that did
    not reach it the slowest), each adjacent pair judged by a two-sided Mann-Whitney test of
    their seeds' times, Benjamini-Hochberg over the table's pairs; `empty`: the decision
    before any is ranked (its title, what it left out); `included`: contended runs used, by
    configuration."""
    if group.empty:
        return empty
    median = group["training_seconds"].map(lambda t: t["median"])
    rows = [c for _, c in group.assign(_median=median).sort_values("_median").iterrows()]
    varied = [k for k in ("nodes", "global_batch", "training")
              if group[k].astype(str).nunique() > 1]
    p_values = [stats.mannwhitneyu(a["training_seconds_values"], b["training_seconds_values"],
                                   alternative="two-sided").pvalue
                if min(len(a["training_seconds_values"]), len(b["training_seconds_values"])) > 1
                and a["_median"] < b["_median"] else math.nan for a, b in zip(rows, rows[1:])]
    apart = [bool(stated) for stated in false_discoveries_controlled(p_values)]
    choices = [Choice(c["series"], int(c["devices"]), tuple((k, str(c[k])) for k in varied),
                      c["configuration"], Interval(c["_median"], c["training_seconds"]["low"],
                                                   c["training_seconds"]["high"]),
                      len(c["training_seconds_values"]),
                      sure=len(rows) > 1 and (i == 0 or apart[i - 1])
                      and (i == len(rows) - 1 or apart[i]),
                      coverage=c["training_seconds"]["coverage"],
                      contended=included.get(c["configuration"], 0))
               for i, c in enumerate(rows)]
    decision = replace(empty, choices=choices)
    if len(choices) < 2:
        return decision
    if apart[0]:
        return replace(decision, best=choices[0])
    tied = next((i + 1 for i, sure in enumerate(apart) if sure), len(choices))
    return replace(decision, tied=tied, repeats=min(choices[0].repeats, choices[1].repeats))


def ranked(title: str, cells: pd.DataFrame, contended: int, suspect: list[str],
           included: dict[str, int]) -> Decision:
    """The setup's cells ranked by rate, each adjacent pair judged, and what that allows;
    `included`: contended runs used, by cell."""
    cells = cells.sort_values("epoch2_rate", ascending=False)
    varied = [k for k in KNOBS if k in cells and cells[k].astype(str).nunique() > 1]
    rows = [c for _, c in cells.iterrows()]
    pairs = judged([(above, below) for above, below in zip(rows, rows[1:])],
                   lambda subject, reference, ratio, judgement: (ratio, judgement))
    apart = [judgement.side == "above" for _, judgement in pairs]
    choices = [Choice(c["series"], int(c["devices"]), tuple((k, str(c[k])) for k in varied),
                      c["cell_key"], Interval(c["epoch2_rate"], c["epoch2_rate_low"],
                                              c["epoch2_rate_high"]), int(c["n"]),
                      sure=len(rows) > 1 and (i == 0 or apart[i - 1])
                      and (i == len(rows) - 1 or apart[i]),
                      contended=included.get(c["cell_key"], 0))
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
    if d.best and d.ranked_by != RANKED_BY:
        return (f"use {d.best.name}: surely shorter to the target than the next, "
                f"{d.choices[1].name} (Mann-Whitney under Benjamini-Hochberg, 5%)")
    if d.best:
        return (f"use {d.best.name}: surely faster than the next, {d.choices[1].name} "
                f"({interval_text(d.ratio)})")
    tied = [c.name for c in d.choices[:d.tied]]
    names = ", ".join(tied if len(tied) <= NAMED else [*tied[:NAMED - 1],
                                                        f"and {len(tied) - NAMED + 1} more"])
    if d.ranked_by != RANKED_BY:
        fewest = d.repeats
        settle = (f"with {fewest} seed(s) on a side no test can tell them apart: it takes 4 or "
                  f"more seeds a configuration (--seeds 4)"
                  if fewest < 2 or goodput.smallest_p(fewest, fewest) > 1 - LEVEL else
                  "more seeds a configuration may settle it, or they are as fast")
        return (f"no configuration is surely the shortest to the target: these {d.tied} are "
                f"not told apart ({names}); {settle}")
    if d.repeats < 2:
        return (f"no configuration is surely best: the first two ran once ({interval_text(d.ratio)}"
                f" apart), and one run has no interval: run --repeat 3")
    settle = (f"{d.more_repeats} more repeat{'s' * (d.more_repeats > 1)} a side would settle "
              f"it" if d.more_repeats else
              "within the noise of these runs, more repeats are unlikely to settle it")
    return (f"no configuration is surely best: these {d.tied} are within each other's "
            f"intervals ({names}; the first two: {interval_text(d.ratio)}); {settle}")


def left_out_text(d: Decision) -> str:
    """What the ranking leaves out, counted ('' where nothing)."""
    parts = ([f"{d.contended} contended run(s) (--include-contended uses them)"]
             if d.contended else [])
    if d.suspect:
        parts.append(f"what makes a ratio SUSPECT ({', '.join(d.suspect)}: see the verdicts)")
    return ("left out: " + "; ".join(parts)) if parts else ""


def place_text(c: Choice, d: Decision) -> str:
    """A place is sure only where it is apart from a neighbour: a lone configuration has no
    place to be sure of."""
    return "the only usable one" if len(d.choices) == 1 else "sure" if c.sure else "not sure"


def value_text(c: Choice, d: Decision, unit: bool = False) -> str:
    """'1,234 [1,200, 1,270]' samples/s (no interval from one run; ∞ where it is unbounded), or a
    time to target '41.2 [38.0, 45.1] s (93.8%)', its interval's coverage said where it is not
    95% (a median's of few seeds); `unit` adds the unit."""
    by_rate = d.ranked_by == RANKED_BY

    def number(value: float) -> str:
        return ("∞" if not math.isfinite(value) else
                f"{value:,.0f}" if by_rate or value >= 100 else f"{value:.1f}")
    if math.isinf(c.value.value):
        return "not reached"
    shown = number(c.value.value) + (f" [{number(c.value.low)}, {number(c.value.high)}]"
                                     if c.value.has_interval else "")
    coverage = (f" ({c.coverage:.1%})" if c.value.has_interval
                and not math.isclose(c.coverage, LEVEL) else "")
    return shown + ((" samples/s" if by_rate else " s") if unit else "") + coverage


def lines(made: list[Decision]) -> list[str]:
    """The terminal's lines: per setup its title, its ranking, its sentence, what was left
    out."""
    out = []
    for d in made:
        out.append(f"{d.setup}, ranked by {d.ranked_by}:")
        out += [f"  {i}. {c.name}: {value_text(c, d, unit=True)}; place {place_text(c, d)}"
                + (f"; {contended_text(c)} (included)" if c.contended else "")
                for i, c in enumerate(d.choices, 1)]
        out += [f"  → {sentence(d)}"] + ([f"  {left_out_text(d)}"] if left_out_text(d) else [])
    return out


def contended_text(c: Choice) -> str:
    """'2 of 3 runs contended': what a configuration's numbers include at the user's request."""
    return f"{c.contended} of {c.repeats} {'runs' if c.repeats > 1 else 'run'} contended"


def frame(d: Decision) -> pd.DataFrame:
    """A setup's ranking as a table for the pages; a column of the contended runs each
    configuration's numbers include, where any does (--include-contended)."""
    table = pd.DataFrame([[i, c.name, value_text(c, d), c.repeats, place_text(c, d)]
                          for i, c in enumerate(d.choices, 1)],
                         columns=["rank", "configuration", f"{d.ranked_by}, interval",
                                  "repeats" if d.ranked_by == RANKED_BY else "seeds", "place"])
    if any(c.contended for c in d.choices):
        table["contended runs (included)"] = [
            f"⚠ {contended_text(c)}" if c.contended else "none" for c in d.choices]
    return table


def as_json(made: list[Decision]) -> list[dict]:
    """The decisions by field with their words (reports.page.json_report makes them strict JSON)."""
    return [{**d.__dict__, "sentence": sentence(d),
             "left_out": left_out_text(d) or None,
             "choices": [{**c.__dict__, "name": c.name} for c in d.choices]} for d in made]


EXPLAINED = ("Per setup, every configuration ranked by its epoch-2 rate with its 95% interval; a "
             "place is sure where its interval is apart from its neighbours' (Fieller's "
             "interval of each adjacent pair, with the false-discovery rate over the table's "
             "comparisons held at 5%, Benjamini-Hochberg). Where the grid has a target, by "
             "the median training time to it over the seeds (evaluations left out), the global "
             "batch one of the knobs, with the median's distribution-free interval (its "
             "coverage said where few seeds cannot give 95%); a place is sure where a "
             "two-sided Mann-Whitney test of its seeds' times against its neighbours' is "
             "significant under Benjamini-Hochberg at 5% (4 seeds a side or more).")
