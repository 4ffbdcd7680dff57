"""Scaling: each backend's speedup and efficiency against its own 1-device cell."""
from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import (
    DEVICES,
    fixed_text,
    interval_note,
    left_out,
    legend,
    lines,
    needs_values,
    panels,
    without_faults,
    wrapped,
)
from xbench.reports.rendering.tables import (
    WHO,
    Column,
    Numbers,
    batch_text,
    column,
    field,
    numbers,
    ratio_text,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Figure, Made, Section, Table


def efficiency_text(efficiency) -> str:
    """An efficiency with its interval, SUSPECT above 100% (analysis.scaling's mark)."""
    text = ratio_text(efficiency, percent=True)
    return f"SUSPECT (above 100%): {text}" if efficiency.value > 1 else text


def scaling_table(data: ReportData) -> Numbers:
    scaled = data.scaling
    return numbers(scaled[scaled["devices"] > 1], [
        *WHO, field("multiple", "dataset_multiple", lambda v: f"×{v}"),
        ("scaling", column("scaling")), ("batch held fixed", batch_text),
        field("devices", "devices", str),
        Column("n (N / 1 device)", lambda s: (s["n"], s["n_ref"]), lambda v: f"{v[0]} / {v[1]}"),
        field("epoch-2 rate (samples/s)", "epoch2_rate"),
        field("1-device rate (samples/s)", "rate_1"),
        field("speedup, 95% CI", "speedup_ratio", ratio_text),
        field("efficiency, 95% CI", "efficiency_ratio", efficiency_text)])


def scaling_figure(data: ReportData) -> Made:
    """Speedup and efficiency vs devices per model, with the ideal lines."""
    scaled = without_faults(data.scaling)
    fixed = analysis.reference(scaled, analysis.held_fixed("model", "devices"))
    shown = analysis.at(scaled, fixed)
    if shown.empty:
        return NO_ROWS
    reason = needs_values(shown, "devices", "device counts of one backend and setup",
                          "the smoke grid has 1 and 2")
    if reason:
        return reason
    models = sorted(shown["model"].unique())
    figure, axes = panels(2 * len(models), columns=2)
    kind = analysis.scaling_kind(fixed.get("batch_mode"))
    devices = sorted(shown["devices"].unique())
    drawn = []
    for row, model in enumerate(models):
        rows = shown[shown["model"] == model]
        speedup_ax, efficiency_ax = axes[2 * row], axes[2 * row + 1]
        drawn += lines(speedup_ax, rows, "devices", "speedup", DEVICES, "speedup R(N)/R(1) (×)",
                       panel=f"speedup, model {model}", suspect=data.suspect)
        drawn += lines(efficiency_ax, rows, "devices", "efficiency", DEVICES,
                       "efficiency speedup/N (fraction)", panel=f"efficiency, model {model}",
                       suspect=data.suspect)
        speedup_ax.plot(devices, devices, "k--", linewidth=1, label="ideal")
        efficiency_ax.plot(devices, [1] * len(devices), "k--", linewidth=1, label="ideal")
        for ax in (speedup_ax, efficiency_ax):
            ax.set_title(wrapped(f"model {model}: {kind} scaling", 4.6))
    legend(figure, list(axes))
    return (fixed_text(fixed) + f"{kind.capitalize()} scaling: the "
            f"{analysis.batch_kind(fixed.get('batch_mode'))} batch is fixed as devices grow. "
            "R = mean epoch-2 rate; dashed: ideal." + interval_note(drawn)
            + left_out(data.frame)), figure


SECTION = Section(
    name="scaling",
    title="Scaling",
    paragraphs=[
        "Speedup = R(N)/R(1) of the epoch-2 rate (samples / mean epoch time) against the same "
        "backend's own 1-device cell of the same setup (its 1-device run goes through the same "
        "parallel machinery), with Fieller's 95% interval; efficiency = speedup / N. An "
        "efficiency above 100% is marked SUSPECT, not reported as a result. Strong scaling: "
        "the global batch is fixed (batch_mode global); weak scaling: the per-device batch is "
        "fixed (batch_mode per_device)."],
    figures=(Figure("scaling", "Scaling: speedup and efficiency", scaling_figure),),
    tables=(Table("scaling", "Speedup and efficiency of every N-device cell", scaling_table,
                  "it needs usable cells on 1 and on more devices of one backend and setup "
                  "(the smoke grid has 1 and 2 devices)"),))
