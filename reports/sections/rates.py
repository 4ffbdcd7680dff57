"""Figure 5: the blog's Figure 5a-e (rates against devices, batch and dataset multiple, and epoch
1 beside epoch 2) for every backend in the results."""
from matplotlib.patches import Rectangle

from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import (
    CI_NOTE,
    DEVICES,
    RATE,
    batch_label,
    by_series,
    cell_labels,
    error_bars,
    fixed_text,
    interval_note,
    left_out,
    legend,
    lines,
    mark,
    needs_values,
    open_ends,
    panels,
    plain,
    points,
    without_faults,
    wrapped,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Figure, Made, Section

PANEL_WIDTH = 4.3  # inches: three panels a row, or one beside a figure of two, fit the page
EPOCH1 = "hatched: epoch 1"
# What each axis a figure may vary needs, and which grid has it.
AXIS_WORDS = {"devices": ("device counts", "the smoke grid has 1 and 2, the seed grid 1, 2, 4"),
              "batch": ("batch sizes", "the seed grid has 128, 256, 512"),
              "dataset_multiple": ("dataset multiples", "the seed grid has 1x, 4x, 8x")}


def faceted_lines(data: ReportData, facet, fixed_columns, x, y, xlabel, ylabel,
                  facet_title) -> Made:
    """Lines of y vs x, one panel per value of `facet`, the other axes held at their reference."""
    cells = without_faults(data.cells)
    fixed = analysis.reference(cells, fixed_columns)
    shown = analysis.at(cells, fixed).dropna(subset=[y])
    if shown.empty:
        return NO_ROWS
    reason = needs_values(shown, x, *AXIS_WORDS[x])
    if reason:
        return reason
    values = sorted(shown[facet].unique())
    figure, axes = panels(len(values), width=PANEL_WIDTH)
    drawn = []
    for ax, value in zip(axes, values, strict=True):
        title = facet_title(value)
        drawn += lines(ax, shown[shown[facet] == value], x, y, xlabel, ylabel,
                       panel=title if len(values) > 1 else "", suspect=data.suspect)
        ax.set_title(wrapped(title, PANEL_WIDTH))
    legend(figure, axes)
    return fixed_text(fixed) + CI_NOTE + interval_note(drawn) + left_out(data.frame), figure


def rate_vs_devices(data: ReportData) -> Made:
    return faceted_lines(data, "model", analysis.held_fixed("model", "devices"), "devices",
                         "epoch2_rate", DEVICES, RATE, lambda m: f"model: {m}")


def rate_vs_batch(data: ReportData) -> Made:
    held = analysis.held_fixed("devices", analysis.BATCH)
    fixed = analysis.reference(without_faults(data.cells), held)
    return faceted_lines(data, "devices", held, "batch",
                         "epoch2_rate", batch_label(fixed.get("batch_mode")), RATE,
                         analysis.devices_text)


def time_by_multiple(data: ReportData) -> Made:
    return faceted_lines(data, "dataset_multiple",
                         analysis.held_fixed("dataset_multiple", "devices"), "devices",
                         "epoch2_seconds", DEVICES, "epoch-2 time (s)",
                         lambda m: f"dataset ×{m}")


def rate_vs_multiple(data: ReportData) -> Made:
    return faceted_lines(data, "devices",
                         analysis.held_fixed("devices", "dataset_multiple"), "dataset_multiple",
                         "epoch2_rate", "dataset multiple (× MNIST training set)", RATE,
                         analysis.devices_text)


def epoch1_vs_epoch2(data: ReportData) -> Made:
    """Per device count a panel (wrapped into rows at the page's width), in it per series epoch 1
    (hatched) beside epoch 2 (solid), its SUSPECT and contended cells ringed."""
    cells = without_faults(data.cells)
    fixed = analysis.reference(cells, analysis.held_fixed("devices"))
    shown = analysis.at(cells, fixed).dropna(subset=["epoch1_rate", "epoch2_rate"],
                                                  how="all")
    if shown.empty:
        return NO_ROWS
    devices = sorted(shown["devices"].unique())
    series = list(by_series(shown))
    figure, axes = panels(len(devices), width=max(PANEL_WIDTH, 0.6 * len(series) + 1))
    drawn = []
    for ax, count in zip(axes, devices, strict=True):
        for i, (name, style, rows) in enumerate(series):
            rows = rows[rows["devices"] == count]
            if rows.empty:
                continue  # no cell of this series on `count` devices: its place stays blank
            for epoch, offset in ((1, -0.2), (2, 0.2)):
                y = f"epoch{epoch}_rate"
                ax.bar([i + offset] * len(rows), rows[y], 0.4, yerr=error_bars(rows, y),
                       capsize=3, color=style["color"], alpha=0.45 if epoch == 1 else 1.0,
                       hatch="//" if epoch == 1 else None, edgecolor=style["color"],
                       label=plain(name) if epoch == 2 else "_epoch 1")
                open_ends(ax, [i + offset] * len(rows), rows[y], rows, y, style["color"])
                mark(ax, [i + offset] * len(rows), rows[y], rows, data.suspect)
                drawn += points(rows, "devices", y, lambda row, name=name, epoch=epoch: (
                    f"{name}, epoch {epoch} on {analysis.devices_text(row['devices'])}"))
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor="white", edgecolor="grey", hatch="//",
                               label=EPOCH1))  # the legend's key to the hatching
        cell_labels(ax, [name for name, _, _ in series])
        ax.set_title(analysis.devices_text(count))
        ax.set_ylabel("rate (samples/s)")
        ax.grid(axis="y", alpha=0.3)
    legend(figure, axes)
    return (fixed_text(fixed) + "Hatched: epoch 1 (one-time costs); solid: epoch 2. " + CI_NOTE
            + interval_note(drawn) + left_out(data.frame), figure)


SECTION = Section(
    name="figure5",
    title="Figure 5: rates as in the blog",
    paragraphs=[
        "The blog's Figure 5a-e for every backend in the results. Rate = training samples in "
        "the epoch / wall-clock epoch time; epoch 2 is the steady state, epoch 1 carries "
        "one-time costs."],
    figures=(
        Figure("fig5a_rate_vs_devices", "Figure 5a: epoch-2 rate vs devices, by model",
               rate_vs_devices),
        Figure("fig5b_rate_vs_batch", "Figure 5b: epoch-2 rate vs batch size", rate_vs_batch),
        Figure("fig5c_epoch2_time_by_multiple", "Figure 5c: epoch-2 time by dataset multiple",
               time_by_multiple),
        Figure("fig5d_epoch1_vs_epoch2", "Figure 5d: epoch-1 vs epoch-2 rate", epoch1_vs_epoch2),
        Figure("fig5e_rate_vs_multiple", "Figure 5e: epoch-2 rate vs dataset multiple",
               rate_vs_multiple),
    ))
