"""The report's figures (matplotlib, Agg): the blog's Figure 5a-e, scaling, where a step's time
goes, accuracy, memory and start-up overhead.

Every backend keeps one colour in every figure (from the traits table's order); a figure that varies
some axes holds the others at their most common value and says which in its caption. Error bars
are 95% CIs (reports.stats) and appear only where a cell has more than one repeat.
"""
import io

import matplotlib
import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from xbench.common.backends.traits import TRAITS
from xbench.common.measuring.attribution import PARTS
from xbench.reports import analysis, predict

matplotlib.use("Agg")  # files only, never a display

TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22"]
COLORS = dict(zip(TRAITS, TAB10))
OTHER_COLOR = "#7f7f7f"
LINESTYLES = ["-", "--", "-.", ":"]
RATE = "epoch-2 rate (samples/s)"
DEVICES = "devices (count)"
CI_NOTE = "Error bars: 95% CI over repeats (only where n > 1)."


def color(backend):
    return COLORS.get(backend, OTHER_COLOR)


def plain(text):
    """Text from the results shown literally (matplotlib would read $...$ as math)."""
    return str(text).replace("$", r"\$")


NO_ROWS = "no cell of these results has a usable run"
NO_ATTRIBUTION = ("no usable run records its step attribution (rows of xbench before schema 5 "
                  "do not): run the grid again")
PART_COLORS = dict(zip(PARTS, ["#8c564b", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#d62728", "#7f7f7f"]))


def build(cells, scaling, attributed, targets, check):
    """([(name, title, caption, Figure)] for every figure there are data for,
    {name: (title, why it is not drawn and what would draw it)} for the others)."""
    makers = [
        ("fig5a_rate_vs_devices", "Figure 5a: epoch-2 rate vs devices, by model", rate_vs_devices),
        ("fig5b_rate_vs_batch", "Figure 5b: epoch-2 rate vs batch size", rate_vs_batch),
        ("fig5c_epoch2_time_by_multiple", "Figure 5c: epoch-2 time by dataset multiple",
         time_by_multiple),
        ("fig5d_epoch1_vs_epoch2", "Figure 5d: epoch-1 vs epoch-2 rate", epoch1_vs_epoch2),
        ("fig5e_rate_vs_multiple", "Figure 5e: epoch-2 rate vs dataset multiple", rate_vs_multiple),
        ("scaling", "Scaling: speedup and efficiency", lambda c: scaling_figure(scaling)),
        ("step_parts", "Where a step's time goes, per cell",
         lambda c: attribution_figure(attributed)),
        ("accuracy", "Loss, training and test accuracy by epoch, devices and batch", accuracy),
        ("memory", "Figure: peak memory of each device, by cell", memory),
        ("overhead", "Figure: launch-to-first-batch and epoch-1 extra time vs devices", overhead),
        ("time_to_accuracy", "Test accuracy against time, every run to its target",
         lambda c: accuracy_curves(targets)),
        ("predicted", "Predicted against measured epoch time, every N-device cell",
         lambda c: predicted_figure(check)),
    ]
    figures, missing = [], {}
    for name, title, maker in makers:
        made = maker(cells)
        if isinstance(made, str):
            missing[name] = (title, made)
        else:
            figures.append((name, title, *made))
    return figures, missing


def needs_values(data, column, words, grid):
    """Why a figure along `column` is not drawn when the data have fewer than two values there
    (None when they have two or more)."""
    values = sorted(data[column].dropna().unique())
    if len(values) >= 2:
        return None
    have = f"only {values[0]}" if values else "none"
    return f"it needs cells at two or more {words}; these results have {have} ({grid})"


def render(figure, fmt):
    """The figure as PNG bytes or SVG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt, dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def fixed_text(values):
    """'model small, dataset x1, global batch 128': what a figure holds fixed."""
    parts = []
    for column, value in values.items():
        if column == "batch":
            parts.append(f"{analysis.batch_kind(values.get('batch_mode'))} batch {value}")
        elif column == "dataset_multiple":
            parts.append(f"dataset ×{value}")
        elif column == "devices":
            parts.append(analysis.devices_text(value))
        elif column == "model":
            parts.append(f"model {value}")
    return "Held fixed: " + ", ".join(parts) + ". " if parts else ""


def batch_label(batch_mode):
    return f"{analysis.batch_kind(batch_mode)} batch (samples)"


def panels(count, width=4.6, height=3.4, columns=3):
    rows = (count + columns - 1) // columns
    columns = min(count, columns)
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for extra in axes[count:]:
        extra.set_visible(False)
    return figure, axes[:count]


def by_series(cells):
    """(series, style, rows) per line, backends in the traits table's order."""
    envs = sorted(cells["env"].unique())
    backend_of = dict(zip(cells["series"], cells["backend"]))
    for series in sorted(backend_of, key=lambda s: (analysis.backend_order(backend_of[s]), s)):
        rows = cells[cells["series"] == series]
        first = rows.iloc[0]
        style = {"color": color(first["backend"]),
                 "linestyle": LINESTYLES[envs.index(first["env"]) % len(LINESTYLES)],
                 "marker": "x" if first["dataset"] == "synthetic" else "o"}
        yield series, style, rows


def interval_bars(rows, y) -> np.ndarray | None:
    """The 95% interval of `y` as (below, above) distances per row, infinite where unbounded,
    NaN where there is none: from a rate's bounds, a ratio's interval (speedup, efficiency) or
    a mean's half-width."""
    if f"{y}_low" in rows:
        below, above = rows[y] - rows[f"{y}_low"], rows[f"{y}_high"] - rows[y]
    elif f"{y}_ratio" in rows:
        below = [r.value - r.low for r in rows[f"{y}_ratio"]]
        above = [r.high - r.value for r in rows[f"{y}_ratio"]]
    elif f"{y}_ci" in rows:
        below = above = rows[f"{y}_ci"]
    else:
        return None
    return np.array([below, above], dtype=float)


def error_bars(rows, y):
    """matplotlib's error bars of `y`'s 95% interval (None if no row has a bounded one); an
    unbounded one is drawn by `mark_unbounded`, never left out as if there were no doubt."""
    bars = interval_bars(rows, y)
    if bars is None:
        return None
    bars = np.where(np.isfinite(bars), bars, np.nan)
    return None if np.isnan(bars).all() else bars


def mark_unbounded(ax, xs, rows, y, color):
    """A dotted line through the whole plot at each point whose interval is unbounded, and the
    word: the data allow any value there."""
    bars = interval_bars(rows, y)
    if bars is None:
        return
    for x, value, unbounded in zip(xs, rows[y], np.isinf(bars).any(axis=0)):
        if unbounded:
            ax.axvline(x, linestyle=":", color=color, alpha=0.7)
            ax.annotate("95% CI unbounded", (x, value), textcoords="offset points",
                        xytext=(3, 6), fontsize=7, color=color)


def lines(ax, cells, x, y, xlabel, ylabel):
    """One line per series of y (mean, with its 95% interval as error bars) against x."""
    for series, style, rows in by_series(cells):
        rows = rows.sort_values(x)
        ax.errorbar(rows[x], rows[y], yerr=error_bars(rows, y), capsize=3, label=plain(series),
                    **style)
        mark_unbounded(ax, rows[x], rows, y, style["color"])
    values = sorted(cells[x].dropna().unique())
    ax.set_xticks(values, [plain(v) for v in values])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def legend(figure, axes):
    """One legend under the panels, each label once."""
    seen = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels):
            seen.setdefault(label, handle)
    if seen:
        figure.legend(seen.values(), seen.keys(), loc="outside lower center",
                      ncols=min(len(seen), 4), fontsize="small")


def faceted_lines(cells, facet, fixed_columns, x, y, xlabel, ylabel, facet_title):
    """Lines of y vs x, one panel per value of `facet`, the other axes held at their reference."""
    fixed = analysis.reference(cells, fixed_columns)
    data = analysis.at(cells, fixed).dropna(subset=[y])
    if data.empty:
        return NO_ROWS
    words = {"devices": ("device counts", "the smoke grid has 1 and 2, the seed grid 1, 2, 4"),
             "batch": ("batch sizes", "the seed grid has 128, 256, 512"),
             "dataset_multiple": ("dataset multiples", "the seed grid has 1x, 4x, 8x")}[x]
    reason = needs_values(data, x, *words)
    if reason:
        return reason
    values = sorted(data[facet].unique())
    figure, axes = panels(len(values))
    for ax, value in zip(axes, values):
        lines(ax, data[data[facet] == value], x, y, xlabel, ylabel)
        ax.set_title(plain(facet_title(value)))
    legend(figure, axes)
    return fixed_text(fixed) + CI_NOTE, figure


def rate_vs_devices(cells):
    return faceted_lines(cells, "model", analysis.held_fixed("model", "devices"), "devices",
                         "epoch2_rate", DEVICES, RATE, lambda m: f"model: {m}")


def rate_vs_batch(cells):
    held = analysis.held_fixed("devices", analysis.BATCH)
    fixed = analysis.reference(cells, held)
    return faceted_lines(cells, "devices", held, "batch",
                         "epoch2_rate", batch_label(fixed.get("batch_mode")), RATE,
                         analysis.devices_text)


def time_by_multiple(cells):
    return faceted_lines(cells, "dataset_multiple", analysis.held_fixed("dataset_multiple",
                                                                         "devices"), "devices",
                         "epoch2_seconds", DEVICES, "epoch-2 time (s)",
                         lambda m: f"dataset ×{m}")


def rate_vs_multiple(cells):
    return faceted_lines(cells, "devices", analysis.held_fixed("devices", "dataset_multiple"),
                         "dataset_multiple",
                         "epoch2_rate", "dataset multiple (× MNIST training set)", RATE,
                         analysis.devices_text)


def epoch1_vs_epoch2(cells):
    """Bars per series and device count: epoch 1 (hatched) beside epoch 2 (solid)."""
    fixed = analysis.reference(cells, analysis.held_fixed("devices"))
    data = analysis.at(cells, fixed).dropna(subset=["epoch1_rate", "epoch2_rate"], how="all")
    if data.empty:
        return NO_ROWS
    devices = sorted(data["devices"].unique())
    series = list(by_series(data))
    width = 0.8 / (2 * len(series))
    figure, (ax,) = panels(1, width=max(6.0, 1.2 * len(devices) * len(series)), columns=1)
    for i, (name, style, rows) in enumerate(series):
        for j, epoch in enumerate((1, 2)):
            offset = (2 * i + j + 0.5) * width - 0.4
            positions = [devices.index(d) + offset for d in rows["devices"]]
            ax.bar(positions, rows[f"epoch{epoch}_rate"], width,
                   yerr=error_bars(rows, f"epoch{epoch}_rate"), capsize=3,
                   color=style["color"], alpha=0.45 if epoch == 1 else 1.0,
                   hatch="//" if epoch == 1 else None, edgecolor=style["color"],
                   label=plain(f"{name}, epoch {epoch}"))
            mark_unbounded(ax, positions, rows, f"epoch{epoch}_rate", style["color"])
    ax.set_xticks(range(len(devices)), devices)
    ax.set_xlabel(DEVICES)
    ax.set_ylabel("rate (samples/s)")
    ax.grid(axis="y", alpha=0.3)
    legend(figure, [ax])
    return (fixed_text(fixed) + "Hatched: epoch 1 (one-time costs); solid: epoch 2. " + CI_NOTE,
            figure)


def scaling_figure(scaling):
    """Speedup and efficiency vs devices per model, with the ideal lines."""
    fixed = analysis.reference(scaling, analysis.held_fixed("model", "devices"))
    data = analysis.at(scaling, fixed)
    if data.empty:
        return NO_ROWS
    reason = needs_values(data, "devices", "device counts of one backend and setup",
                          "the smoke grid has 1 and 2")
    if reason:
        return reason
    models = sorted(data["model"].unique())
    figure, axes = panels(2 * len(models), columns=2)
    kind = analysis.scaling_kind(fixed.get("batch_mode"))
    devices = sorted(data["devices"].unique())
    for row, model in enumerate(models):
        rows = data[data["model"] == model]
        speedup_ax, efficiency_ax = axes[2 * row], axes[2 * row + 1]
        lines(speedup_ax, rows, "devices", "speedup", DEVICES, "speedup R(N)/R(1) (×)")
        lines(efficiency_ax, rows, "devices", "efficiency", DEVICES,
              "efficiency speedup/N (fraction)")
        speedup_ax.plot(devices, devices, "k--", linewidth=1, label="ideal")
        efficiency_ax.plot(devices, [1] * len(devices), "k--", linewidth=1, label="ideal")
        for ax in (speedup_ax, efficiency_ax):
            ax.set_title(plain(f"model {model}: {kind} scaling"))
    legend(figure, list(axes))
    return (fixed_text(fixed) + f"{kind.capitalize()} scaling: the "
            f"{analysis.batch_kind(fixed.get('batch_mode'))} batch is fixed as devices grow. "
            "R = mean epoch-2 rate; dashed: ideal."), figure


def attribution_figure(attributed):
    """Stacked bars of the parts of one step (ms, the mean over repeats) for every backend and
    device count side by side, one panel per model, at the most common data and batch."""
    if attributed.empty:
        return NO_ATTRIBUTION
    fixed = analysis.reference(attributed, [*analysis.held_fixed("model", "devices"), "training"])
    data = analysis.at(attributed, fixed)
    models = sorted(data["model"].unique())
    figure, axes = panels(len(models), width=max(6.0, 0.5 * len(data)), columns=1)
    for ax, model in zip(axes, models):
        rows = [row for _, _, series in by_series(data[data["model"] == model])
                for _, row in series.sort_values("devices").iterrows()]
        positions = range(len(rows))
        bottom = np.zeros(len(rows))
        for part in PARTS:
            height = np.array([row[f"{part}_step"] * 1000 for row in rows])
            ax.bar(positions, height, 0.7, bottom=bottom, color=PART_COLORS[part],
                   label=part)
            bottom += height
        ax.set_xticks(positions, [plain(f"{row['series']}, {row['devices']} dev") for row in rows],
                      fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("one step (ms, mean over repeats)")
        ax.set_title(plain(f"model {model}"))
        ax.grid(axis="y", alpha=0.3)
    legend(figure, list(axes))
    return (fixed_text(fixed) + "Each bar: one step of the cell, split into its parts (the mean "
            "over its ranks and repeats): input, forward, backward, optimizer, waiting for the "
            "slowest rank, exposed communication, host overhead."), figure


NO_PREDICTION = ("no N-device cell could be predicted: it needs attributed cells on 1 and on "
                 "more devices of one backend and setup (the smoke grid has 1 and 2)")


def predicted_figure(check):
    """Each N-device cell's epoch time as the model predicted it (held out of its calibration)
    against the measured one, on the y = x line where the model is right."""
    check = predict.predicted(check)
    if check.empty:
        return NO_PREDICTION
    figure, (ax,) = panels(1, width=5.5, height=4.5, columns=1)
    for backend in sorted(check["backend"].unique(), key=analysis.backend_order):
        rows = check[check["backend"] == backend]
        capped = rows["link"] == "the cap"
        for chosen, marker, how in ((~capped, "o", ""), (capped, "^", ", capped link")):
            if chosen.any():
                ax.scatter(rows.loc[chosen, "measured_seconds"], rows.loc[chosen, "epoch_seconds"],
                           color=color(backend), marker=marker, label=plain(backend + how))
    reach = [min(check["measured_seconds"].min(), check["epoch_seconds"].min()) * 0.8,
             max(check["measured_seconds"].max(), check["epoch_seconds"].max()) * 1.2]
    ax.plot(reach, reach, "k--", linewidth=1, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_number = ticker.FuncFormatter(lambda value, _: f"{value:g}")
    some = ticker.FuncFormatter(  # 2, 3 and 5 of each decade: the others would overlap
        lambda value, _: f"{value:g}" if value > 0 and f"{value:.0e}"[0] in "235" else "")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain_number)
        axis.set_minor_formatter(some)
    ax.tick_params(which="minor", labelsize=7)
    ax.set_xlabel("measured epoch-2 time (s)")
    ax.set_ylabel("predicted epoch time (s)")
    ax.grid(alpha=0.3)
    legend(figure, [ax])
    return ("Each point: one N-device cell, predicted from its backend's 1-device cell and a "
            "calibration on every other configuration's cells (reports.predict); on the dashed "
            "line the model is right."), figure


def accuracy(cells):
    """Loss and training accuracy per epoch; test accuracy vs devices and vs batch."""
    fixed = analysis.reference(cells, analysis.held_fixed())
    data = analysis.at(cells, {k: v for k, v in fixed.items() if k != "devices"})
    data = data[data["epoch_means"].map(bool)]
    if data.empty:
        return NO_ROWS
    figure, axes = panels(4, columns=2)
    markers, device_counts = "osD^v<>", sorted(data["devices"].unique())
    for series, style, rows in by_series(data):
        for n, (_, cell) in enumerate(rows.sort_values("devices").iterrows()):
            epochs = list(cell["epoch_means"])
            marker = markers[device_counts.index(cell["devices"]) % len(markers)]
            for ax, index in ((axes[0], 0), (axes[1], 1)):
                ax.plot(epochs, [cell["epoch_means"][e][index] for e in epochs],
                        color=style["color"], linestyle=style["linestyle"], marker=marker,
                        label=plain(series) if n == 0 else "_nolegend_")
    # the legend: one entry per backend (its colour), one per device count (its marker)
    for count in device_counts:
        axes[0].plot([], [], color="black", linestyle="none",
                     marker=markers[device_counts.index(count) % len(markers)],
                     label=f"marker: {analysis.devices_text(count)}")
    axes[0].set_ylabel("mean training loss (cross-entropy)")
    axes[1].set_ylabel("training accuracy (fraction)")
    epochs = sorted({e for means in data["epoch_means"] for e in means})
    for ax in axes[:2]:
        ax.set_xticks(epochs)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    test = data.dropna(subset=["test_accuracy"])
    at_batch = test[test["batch"] == fixed.get("batch")]
    lines(axes[2], at_batch, "devices", "test_accuracy", DEVICES, "test accuracy (fraction)")
    at_devices = analysis.at(cells, {k: v for k, v in fixed.items() if k != "batch"})
    lines(axes[3], at_devices.dropna(subset=["test_accuracy"]), "batch", "test_accuracy",
          batch_label(fixed.get("batch_mode")), "test accuracy (fraction)")
    axes[2].set_title(plain(f"test accuracy at batch {fixed.get('batch')}"))
    axes[3].set_title(plain(f"test accuracy on {analysis.devices_text(fixed.get('devices'))}"))
    legend(figure, list(axes))
    return fixed_text({k: v for k, v in fixed.items() if k != "devices"}) + CI_NOTE, figure


NO_TARGET = ("no usable run has a target accuracy: run a grid with --target-accuracy, e.g. "
             "`xbench grid --preset time-to-accuracy`")


def accuracy_curves(targets):
    """Per backend and target, every run's test accuracy at its evaluations against wall-clock
    time (evaluations included), one colour per batch and device count, the target dashed."""
    if targets.empty or not any(curve for curves in targets["curves"] for curve in curves):
        return NO_TARGET
    panels_of = list(targets.groupby(["series", "training", "target"], sort=False))
    figure, axes = panels(len(panels_of), columns=2)
    for ax, ((series, training, target), rows) in zip(axes, panels_of):
        for n, (_, c) in enumerate(rows.iterrows()):
            label = f"{analysis.batch_kind(c['batch_mode'])} {c['batch']}, " \
                    f"{analysis.devices_text(c['devices'])}"
            for k, curve in enumerate(c["curves"]):
                ax.plot([p["seconds"] for p in curve], [p["accuracy"] for p in curve],
                        color=TAB10[n % len(TAB10)], alpha=0.7, linewidth=1,
                        label=plain(label) if k == 0 else "_nolegend_")
        ax.axhline(target, color="black", linestyle="--", linewidth=1)
        ax.set_title(plain(f"{series}, {training}"), fontsize="small")
        ax.set_xlabel("seconds of the epochs from the first step (evaluations included)")
        ax.set_ylabel("test accuracy (fraction)")
        ax.set_ylim(max(0.0, min(target - 0.1, ax.get_ylim()[0])), 1.0)
        ax.legend(fontsize="x-small")
        ax.grid(alpha=0.3)
    return ("One line per run (seed); dashed: the target. A run that reached it ends at the end "
            "of that epoch and evaluates no more, so its last point is the one that reached it; "
            "a run that never did ends at its last epoch.", figure)


def memory(cells):
    """Bars of peak memory per device, one group per cell (device 0 first)."""
    fixed = analysis.reference(cells, analysis.held_fixed("devices"))
    data = analysis.at(cells, fixed)
    data = data[data["memory_per_device"].map(bool)]
    if data.empty:
        return NO_ROWS
    figure, (ax,) = panels(1, width=max(6.0, 1.0 * len(data)), columns=1)
    labels = []
    for position, (_, cell) in enumerate(data.iterrows()):
        values = [b / 2**20 for b in cell["memory_per_device"]]
        width = 0.8 / len(values)
        ax.bar([position - 0.4 + (i + 0.5) * width for i in range(len(values))], values, width,
               color=color(cell["backend"]), edgecolor="black", linewidth=0.5)
        labels.append(plain(f"{cell['series']}\n{cell['devices']} dev"))
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    ax.set_ylabel("peak memory per device (MiB)")
    ax.grid(axis="y", alpha=0.3)
    return (fixed_text(fixed) + "One bar per device of the cell, device 0 first. On GPU: peak "
            "allocated memory per GPU; on CPU: peak resident memory of each process."), figure


def overhead(cells):
    """Start-up seconds and epoch-1 minus epoch-2 seconds vs devices."""
    fixed = analysis.reference(cells, analysis.held_fixed("devices"))
    data = analysis.at(cells, fixed)
    if data[["startup_seconds", "first_epoch_overhead"]].isna().all().all():
        return NO_ROWS
    reason = needs_values(data, "devices", "device counts", "the smoke grid has 1 and 2")
    if reason:
        return reason
    figure, axes = panels(2, columns=2)
    lines(axes[0], data, "devices", "startup_seconds", DEVICES, "start-up (s)")
    lines(axes[1], data, "devices", "first_epoch_overhead", DEVICES, "epoch-1 − epoch-2 time (s)")
    axes[0].set_title("launch to first batch")
    axes[1].set_title("first-epoch one-time costs")
    legend(figure, list(axes))
    return fixed_text(fixed) + CI_NOTE, figure
