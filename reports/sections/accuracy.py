"""Accuracy: loss and accuracy per epoch and test accuracy against devices and batch, and what
each backend does with BatchNorm's running statistics across replicas."""
from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import (
    CI_NOTE,
    DEVICES,
    batch_label,
    by_series,
    fixed_text,
    interval_note,
    left_out,
    legend,
    lines,
    panels,
    plain,
    without_faults,
)
from xbench.reports.rendering.tables import (
    ACCURACY,
    CELL_VALUES,
    Column,
    Numbers,
    column,
    field,
    num,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Figure, Made, Section, Table

MARKER_SIZES = (5, 8, 11, 14)  # one per device count (a series' marker is its backend's)


def accuracy_table(data: ReportData) -> Numbers:
    measured = analysis.measured(data.cells)
    epochs = sorted({e for means in measured["epoch_means"] for e in means})

    def loss_accuracy(epoch) -> Column:
        return Column(f"epoch {epoch} loss / accuracy",
                      lambda cell: tuple(cell["epoch_means"].get(epoch, (None, None))),
                      lambda means: f"{num(means[0])} / {num(means[1], 4)}")
    return numbers(measured, [*CELL_VALUES, *map(loss_accuracy, epochs), ACCURACY])


def batchnorm_table(data: ReportData) -> Numbers:
    """The cells of models with BatchNorm: what the backend does with the running statistics
    across replicas, how far apart the replicas' statistics ended, the test accuracy."""
    measured = analysis.measured(data.cells)
    with_batchnorm = measured[measured["batchnorm"].notna()]
    return numbers(with_batchnorm, [
        *CELL_VALUES, ("training", column("training")),
        ("running statistics across replicas", column("batchnorm")),
        field("largest difference from replica 0 at the end", "batchnorm_difference"),
        ACCURACY])


def by_epoch(axes, cells) -> None:
    """Loss (axes[0]) and training accuracy (axes[1]) per epoch: each series in its style, a
    marker size per device count, and a legend entry for each size."""
    device_counts = sorted(cells["devices"].unique())

    def size(count):
        return MARKER_SIZES[min(device_counts.index(count), len(MARKER_SIZES) - 1)]
    for series, style, rows in by_series(cells):
        for n, (_, cell) in enumerate(rows.sort_values("devices").iterrows()):
            epochs = list(cell["epoch_means"])
            for ax, index in ((axes[0], 0), (axes[1], 1)):
                ax.plot(epochs, [cell["epoch_means"][e][index] for e in epochs], **style,
                        markersize=size(cell["devices"]),
                        label=plain(series) if n == 0 else "_nolegend_")
    for count in device_counts:
        axes[0].plot([], [], color="black", linestyle="none", marker="o", markersize=size(count),
                     label=f"marker size: {analysis.devices_text(count)}")
    axes[0].set_ylabel("mean training loss (cross-entropy)")
    axes[1].set_ylabel("training accuracy (fraction)")
    epochs = sorted({e for means in cells["epoch_means"] for e in means})
    for ax in axes[:2]:
        ax.set_xticks(epochs)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)


def accuracy_figure(data: ReportData) -> Made:
    """Loss and training accuracy per epoch; test accuracy vs devices and vs batch."""
    cells = without_faults(data.cells)
    fixed = analysis.reference(cells, analysis.held_fixed())
    shown = analysis.at(cells, {k: v for k, v in fixed.items() if k != "devices"})
    shown = shown[shown["epoch_means"].map(bool)]
    if shown.empty:
        return NO_ROWS
    figure, axes = panels(4, columns=2)
    by_epoch(axes, shown)
    test = shown.dropna(subset=["test_accuracy"])
    at_batch = test[test["batch"] == fixed.get("batch")]
    devices_title = plain(f"test accuracy at batch {fixed.get('batch')}")
    drawn = lines(axes[2], at_batch, "devices", "test_accuracy", DEVICES,
                  "test accuracy (fraction)", panel=devices_title, suspect=data.suspect)
    at_devices = analysis.at(cells, {k: v for k, v in fixed.items() if k != "batch"})
    batch_title = plain(f"test accuracy on {analysis.devices_text(fixed.get('devices'))}")
    drawn += lines(axes[3], at_devices.dropna(subset=["test_accuracy"]), "batch",
                   "test_accuracy", batch_label(fixed.get("batch_mode")),
                   "test accuracy (fraction)", panel=batch_title, suspect=data.suspect)
    axes[2].set_title(devices_title)
    axes[3].set_title(batch_title)
    legend(figure, list(axes))
    return (fixed_text({k: v for k, v in fixed.items() if k != "devices"}) + CI_NOTE
            + interval_note(drawn) + left_out(data.frame), figure)


SECTION = Section(
    name="accuracy",
    title="Accuracy",
    paragraphs=[
        "Mean training loss and accuracy per epoch, and test accuracy after training, against "
        "devices and batch size (no learning-rate scaling).",
        "A model with BatchNorm is evaluated with one replica's running statistics, so what a "
        "backend does with them across replicas changes the test accuracy: the second table "
        "says it per cell, with how far the replicas' statistics ended apart (the largest "
        "difference of any statistic from replica 0's, relative to replica 0's largest; 0: "
        "every replica holds rank 0's)."],
    figures=(Figure("accuracy", "Loss, training and test accuracy by epoch, devices and batch",
                    accuracy_figure),),
    tables=(Table("accuracy", "Loss and accuracy per epoch, test accuracy, per cell",
                  accuracy_table, NO_ROWS),
            Table("batchnorm", "BatchNorm's running statistics across replicas, per cell",
                  batchnorm_table, "no model in these results has BatchNorm")))
