"""Start-up and first-epoch overhead: launch to the first batch, and what epoch 1 costs more than
epoch 2."""
from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import (
    CI_NOTE,
    DEVICES,
    fixed_text,
    interval_note,
    left_out,
    legend,
    lines,
    needs_values,
    panels,
    without_faults,
)
from xbench.reports.rendering.tables import CELL_VALUES, Numbers, field, numbers
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Figure, Made, Section, Table


def overhead_table(data: ReportData) -> Numbers:
    return numbers(analysis.measured(data.cells), [
        *CELL_VALUES, field("start-up (s)", "startup_seconds"),
        field("epoch 1 − epoch 2 (s)", "first_epoch_overhead")])


def overhead_figure(data: ReportData) -> Made:
    """Start-up seconds and epoch-1 minus epoch-2 seconds vs devices."""
    cells = without_faults(data.cells)
    fixed = analysis.reference(cells, analysis.held_fixed("devices"))
    shown = analysis.at(cells, fixed)
    if shown[["startup_seconds", "first_epoch_overhead"]].isna().all().all():
        return NO_ROWS
    reason = needs_values(shown, "devices", "device counts", "the smoke grid has 1 and 2")
    if reason:
        return reason
    figure, axes = panels(2, columns=2)
    drawn = lines(axes[0], shown, "devices", "startup_seconds", DEVICES, "start-up (s)",
                  panel="start-up", suspect=data.suspect)
    drawn += lines(axes[1], shown, "devices", "first_epoch_overhead", DEVICES,
                   "epoch-1 − epoch-2 time (s)", panel="first-epoch costs",
                   suspect=data.suspect)
    axes[0].set_title("launch to first batch")
    axes[1].set_title("first-epoch one-time costs")
    legend(figure, list(axes))
    return fixed_text(fixed) + CI_NOTE + interval_note(drawn) + left_out(data.frame), figure


SECTION = Section(
    name="overhead",
    title="Start-up and first-epoch overhead",
    paragraphs=[
        "Start-up: from launching the cell's process(es) to the first batch. First-epoch "
        "overhead: epoch-1 time minus epoch-2 time."],
    figures=(Figure("overhead",
                    "Figure: launch-to-first-batch and epoch-1 extra time vs devices",
                    overhead_figure),),
    tables=(Table("overhead", "Start-up seconds and epoch-1 extra seconds, per cell",
                  overhead_table, NO_ROWS),))
