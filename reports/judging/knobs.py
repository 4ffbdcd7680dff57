"""The knobs turned before adding devices, each compared within one setup: gradient accumulation
(K micro-batches a step, the gradients crossing once or after each) and compiling (off or on).

Two cells are compared only where they agree on every other setting, the injected link
included: "syncing once pays off at K=4" is said of the link the cells ran on. Each comparison is
a ratio of mean epoch-2 times with Fieller's interval, stated only where its interval says so and
the false-discovery rate over the section's comparisons stays at 5%
(reports.judging.comparisons.Judge), else "inconclusive" with the repeats that would settle it. Pure
functions of the report's cells (reports.numbers.analysis.cell_table).
"""
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xbench.common.grids.columns import columns
from xbench.common.grids.setting import Role
from xbench.common.grids.settings import SETTINGS
from xbench.reports.judging.comparisons import Judge, Judgement
from xbench.reports.judging.verdict import interval_text
from xbench.reports.numbers import analysis
from xbench.reports.numbers.stats import Ratio, false_discoveries_controlled, ratio_of_means

# The settings each knob is (common.grids.settings): accumulate with the one whose key part it
# writes (accumulate_sync), compile.
ACCUMULATION = tuple(s.column_name for s in SETTINGS.values()
                     if "accumulate" in (s.key, s.key_part))
COMPILING = (SETTINGS["compile"].column_name,)


def alike(varied: tuple[str, ...]) -> list[str]:
    """What two cells compared on the `varied` settings agree on: the environment, the device
    type and every other setting."""
    return ["env", "device_type", *(c for c in columns(Role.SETUP, Role.TRAINING,
                                                       Role.PLACEMENT, Role.FAULT)
                                    if c not in varied)]


def varied_groups(cells: pd.DataFrame, varied: tuple[str, ...]) -> list[pd.DataFrame]:
    """The measured cells grouped by everything but `varied`, the groups where those vary."""
    ok = analysis.measured(cells)
    if ok.empty:
        return []
    groups = ok.groupby(alike(varied), dropna=False, sort=False)
    return [group for _, group in groups if len(group[list(varied)].drop_duplicates()) > 1]


def counted(cell, field: str) -> float:
    """A cell's collectives or bytes a step as its runs counted them (the median over runs;
    NaN where none was counted)."""
    values = [run[field] for run in cell["attributions"] or [] if run.get(field) is not None]
    return float(np.median(values)) if values else math.nan


def accumulation_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Each cell of a setup run at more than one accumulation: its rate, the optimizer steps a
    second, the collectives and the gradient bytes reduced per optimizer step (counted by its
    library where it tells them, else computed from the model: the gradients once per sync)."""
    records = []
    for group in varied_groups(cells, ACCUMULATION):
        for _, cell in group.sort_values(list(ACCUMULATION)).iterrows():
            syncs = cell["accumulate"] if cell["accumulate_sync"] == "each" else 1
            size = counted(cell, "bytes")
            records.append({**cell.to_dict(),
                            "steps_per_second": cell["epoch2_rate"] / cell["global_batch"],
                            "collectives_counted": counted(cell, "collectives"),
                            "step_bytes": size if math.isfinite(size)
                            else syncs * analysis.wire_size(cell) if cell["devices"] > 1
                            else 0.0,
                            "bytes_how": "counted" if math.isfinite(size) else "computed"})
    return pd.DataFrame(records)


@dataclass(frozen=True)
class Finding:
    """One comparison of a section: what it compares (`head`), its ratio (the reference's
    epoch time over the subject's: above 1 the subject is faster), how the judge decided it,
    and the words for each outcome."""
    head: str
    ratio: Ratio
    judgement: Judgement
    above: str
    below: str

    @property
    def text(self) -> str:
        """'head: above (ratio)', or why it is not stated."""
        shown = interval_text(self.ratio)
        if self.judgement.side == "above":
            return f"{self.head}: {self.above} ({shown})"
        if self.judgement.side == "below":
            return f"{self.head}: {self.below} ({shown})"
        if self.judgement.side == "held":
            return (f"{self.head}: {shown}, held back: its interval excludes 1 but the "
                    f"false-discovery control over this section's comparisons does not allow it")
        if self.judgement.repeats < 2:
            return f"{self.head}: {shown}, inconclusive: one run a side has no interval " \
                   f"(run --repeat 3)"
        settle = (f"about {self.judgement.needed} repeats each would settle it"
                  if self.judgement.needed else "within the noise of these runs")
        return f"{self.head}: {shown}, inconclusive: {settle}"


def answers(found: list[Finding], missing: str) -> list[str]:
    """A section's answers: each comparison's verdict, or, with nothing to compare, what would
    give it something."""
    return [f.text for f in found] or [missing]


def judged(pairs: list[tuple], make) -> list[Finding]:
    """Each pair (subject, reference, words...) judged twice, as the report's verdicts are: a
    first pass collects the p-values, the second states what the false-discovery control
    allows."""
    collected = Judge()
    for subject, reference, *_ in pairs:
        collected.judge(_ratio(subject, reference), reference["epoch2_seconds_values"],
                        subject["epoch2_seconds_values"])
    judge = Judge(false_discoveries_controlled(collected.p_values))
    found = []
    for subject, reference, *words in pairs:
        ratio = _ratio(subject, reference)
        judgement = judge.judge(ratio, reference["epoch2_seconds_values"],
                                subject["epoch2_seconds_values"],
                                (reference["cell_key"], subject["cell_key"]))
        found.append(make(subject, reference, ratio, judgement, *words))
    return found


def _ratio(subject, reference) -> Ratio:
    """The reference's mean epoch-2 time over the subject's, per sample (above 1: the subject
    is faster)."""
    scale = subject["epoch2_samples"] / reference["epoch2_samples"]
    return ratio_of_means(reference["epoch2_seconds_values"],
                          subject["epoch2_seconds_values"]).scaled(scale)


def where(cell) -> str:
    """'pt-ddp on 2 devices, link=400mbit': what a finding is about."""
    link = f", {cell['inject']}" if cell["inject"] != "none" else ""
    return f"{cell['backend']} on {analysis.devices_text(cell['nodes'] * cell['devices'])}{link}"


def accumulation_findings(cells: pd.DataFrame) -> list[Finding]:
    """Per setup and K: syncing once (last) against after every micro-batch (each), and each
    sync mode against no accumulation."""
    pairs = []
    for group in varied_groups(cells, ACCUMULATION):
        by = {(c["accumulate"], c["accumulate_sync"]): c for _, c in group.iterrows()}
        one = next((c for (k, _), c in by.items() if k == 1), None)
        for k in sorted({k for k, _ in by if k > 1}):
            last, each = by.get((k, "last")), by.get((k, "each"))
            if last is not None and each is not None:
                pairs.append((last, each, f"{where(last)}, K={k}: syncing once (last) against "
                              f"after each micro-batch", f"syncing once pays off at K={k}",
                              f"syncing once costs at K={k}"))
            for mode, cell in (("last", last), ("each", each)):
                if cell is not None and one is not None:
                    pairs.append((cell, one, f"{where(cell)}: {k} micro-batches synced {mode} "
                                  f"against one batch", "accumulating is faster",
                                  "accumulating is slower"))
    return judged(pairs, _finding)


def _finding(subject, reference, ratio, judgement, head, above, below) -> Finding:
    return Finding(head, ratio, judgement, above, below)


@dataclass(frozen=True)
class CompileFinding(Finding):
    """Compiled against eager, and the job length from which compiling pays off: the extra
    warm-up seconds compiling costs over the time it saves an epoch."""
    payoff: str = ""

    @property
    def text(self) -> str:
        return super().text + (f"; {self.payoff}" if self.payoff else "")


def compile_findings(cells: pd.DataFrame) -> list[Finding]:
    """Per setup: compile on against off."""
    pairs = []
    for group in varied_groups(cells, COMPILING):
        by = {c["compile"]: c for _, c in group.iterrows()}
        if "on" in by and "off" in by:
            pairs.append((by["on"], by["off"], f"{where(by['on'])}: compiled against not",
                          "compiling is faster", "compiling is slower"))
    return judged(pairs, _compile_finding)


def _compile_finding(on, off, ratio, judgement, head, above, below) -> CompileFinding:
    return CompileFinding(head, ratio, judgement, above, below,
                          payoff=payoff_text(on, off, ratio, judgement))


def compile_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Each cell of a setup run compiled and not, and every cell that always compiles (JAX):
    its rate and warm-up seconds (epoch 1 beyond its steady steps, plus a compile ahead of
    time), with their intervals."""
    shown = [*varied_groups(cells, COMPILING)]
    ok = analysis.measured(cells)
    if len(ok):
        always = ok[ok["compiled"].fillna(False).astype(bool) & ok["compile"].eq("off")]
        shown.append(always[~always["cell_key"].isin(
            {k for g in shown for k in g["cell_key"]})])
    frame = pd.concat(shown) if shown else pd.DataFrame()
    return frame.sort_values(["backend", *COMPILING]) if len(frame) else frame


def payoff_text(on, off, ratio: Ratio, judgement: Judgement) -> str:
    """From how many epochs of this cell's size compiling pays for its warm-up, where compiling
    is surely faster: the extra warm-up seconds over the seconds it saves an epoch (with the
    range the ratio's interval gives)."""
    if judgement.side != "above":
        return ""
    extra = on["warmup_seconds"] - off["warmup_seconds"]
    if not math.isfinite(extra):
        return "its warm-up was not measured"
    if extra <= 0:
        return "it pays off from the first epoch (its warm-up is no longer)"
    epoch = off["epoch2_seconds"]
    saved = [epoch * (1 - 1 / r) for r in (ratio.value, ratio.high, ratio.low)]
    epochs = [extra / s if s > 0 else math.inf for s in saved]
    span = (f" [{epochs[1]:.1f}, {epochs[2]:.1f}]" if all(map(math.isfinite, epochs[1:]))
            else "")
    return (f"it pays off after {epochs[0]:.1f} epochs{span} of {int(off['epoch2_samples']):,} "
            f"samples ({extra:.1f} s more warm-up, {saved[0]:.2f} s saved an epoch)")
