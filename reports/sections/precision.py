"""Precision: each setup run at more than one precision, side by side."""
import math

from xbench.common.grids.columns import columns
from xbench.common.grids.setting import Role
from xbench.reports.numbers import analysis
from xbench.reports.rendering.tables import (
    ACCURACY,
    CELL_VALUES,
    RATE_INTERVAL,
    Numbers,
    column,
    field,
    mfu_text,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Section, Table


def precision_table(data: ReportData) -> Numbers:
    """The cells of setups run at more than one precision, side by side: the rate, MFU against
    the probe's peak at the precision each ran in (reports.step_model.utilisation.against_limits)
    and the test accuracy that the lower precision may cost."""
    measured = analysis.measured(data.cells)
    setup = list(dict.fromkeys([  # all but the precision
        *analysis.PLACED, *(c for c in analysis.SETUP if c != "training"),
        *(c for c in columns(Role.TRAINING, Role.FAULT) if c != "precision")]))
    varied = measured.groupby(setup, dropna=False)["precision"].transform("nunique") > 1
    shown = measured[varied].sort_values([*setup, "precision"])
    limits = data.limits
    found = ({(r["env"], r["cell_key"]): r for _, r in limits.iterrows()} if len(limits) else {})
    for name in ("mfu", "mfu_low", "mfu_high", "mfu_suspect"):
        shown[name] = [found[(e, k)][name] if (e, k) in found else math.nan
                       for e, k in zip(shown["env"], shown["cell_key"], strict=True)]
    shown["precision_of_peak"] = [found[(e, k)]["precision"] if (e, k) in found else None
                                  for e, k in zip(shown["env"], shown["cell_key"], strict=True)]
    return numbers(shown, [*CELL_VALUES, ("training", column("training")),
                           ("precision", column("precision")),
                           field("epoch-2 rate (samples/s)", "epoch2_rate"), RATE_INTERVAL,
                           ("MFU at its precision's peak, 95% CI", precision_mfu_text),
                           ACCURACY])


def precision_mfu_text(c) -> str:
    """MFU against the peak of the precision the cell ran in, naming it."""
    if not isinstance(c["precision_of_peak"], str) or not math.isfinite(c["mfu"]):
        return "— (no probe of it)"
    return f"{mfu_text(c, 'mfu')} of the {c['precision_of_peak']} peak"


SECTION = Section(
    name="precision",
    title="Precision",
    paragraphs=[
        "Mixed precision (bf16, fp16) trades accuracy for speed: each setup run at more than "
        "one precision, with its rate, MFU against the probe's matmul peak at the precision it "
        "ran in (bf16 and fp16 cells against the lower type's peak, the others against what "
        "their framework allowed float32: fp32, or TF32 on a GPU) and its test accuracy."],
    tables=(Table("precision", "Each precision beside the others of its setup", precision_table,
                  "it needs one setup run at two precisions or more (--precision fp32,bf16)"),))
