"""What the report's figures share (matplotlib, Agg): colours, panels, lines with their intervals,
one legend, and the words under a figure. Each figure itself is its section's
(reports.sections).

Every backend keeps one colour in every figure (from the traits table's order); a figure that varies
some axes holds the others at their most common value and says which in its caption. Error bars
are 95% CIs (reports.stats) and appear only where a cell has more than one repeat; what a bar
cannot show (no interval at all, or an unbounded one) the caption says once.
"""
import io

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from xbench.common.backends.traits import TRAITS
from xbench.reports import analysis

matplotlib.use("Agg")  # files only, never a display

TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22"]
COLORS = dict(zip(TRAITS, TAB10, strict=False))  # a backend past the palette: OTHER_COLOR
OTHER_COLOR = "#7f7f7f"
LINESTYLES = ["-", "--", "-.", ":"]
RATE = "epoch-2 rate (samples/s)"
DEVICES = "devices (count)"
CI_NOTE = "Error bars: 95% CI over repeats (only where n > 1)."
# What a point's 95% interval is (interval_kinds): an error bar, none, or unbounded.
BOUNDED, NO_INTERVAL, UNBOUNDED = "bounded", "none", "unbounded"
Point = tuple[str, str]  # (which point, in words; the kind of its interval)


def color(backend):
    return COLORS.get(backend, OTHER_COLOR)


def plain(text):
    """Text from the results shown literally (matplotlib would read $...$ as math)."""
    return str(text).replace("$", r"\$")


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


def axis_text(column, value, batch_mode=None) -> str | None:
    """'2 devices', 'dataset ×4', 'global batch 128', 'model small': a value a figure varies or
    holds fixed, in words (None for a column it never names)."""
    if column == analysis.BATCH:
        return f"{analysis.batch_kind(batch_mode)} batch {value}"
    if column == "dataset_multiple":
        return f"dataset ×{value}"
    if column == "devices":
        return analysis.devices_text(value)
    if column == "model":
        return f"model {value}"
    return None


def fixed_text(values):
    """'Held fixed: model small, dataset ×1, global batch 128. ': what a figure holds fixed."""
    parts = [text for column, value in values.items()
             if (text := axis_text(column, value, values.get("batch_mode")))]
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
    backend_of = dict(zip(cells["series"], cells["backend"], strict=True))
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
    unbounded one is named in the caption (interval_note), never left out as if there were no
    doubt."""
    bars = interval_bars(rows, y)
    if bars is None:
        return None
    bars = np.where(np.isfinite(bars), bars, np.nan)
    return None if np.isnan(bars).all() else bars


def interval_kinds(rows, y) -> list[str]:
    """Per row, what its 95% interval of `y` is: BOUNDED, NO_INTERVAL (one run: a rate's open
    bound is no interval either) or UNBOUNDED (the runs allow any value)."""
    bars = interval_bars(rows, y)
    if bars is None:
        return [NO_INTERVAL] * len(rows)
    return [NO_INTERVAL if np.isnan(bar).any() else UNBOUNDED if np.isinf(bar).any()
            else BOUNDED for bar in bars.T]


def points(rows, x, y, where) -> list[Point]:
    """The drawn points of `y` (a finite value) against `x`, each named by `where(row)`."""
    return [(where(row), kind)
            for (_, row), kind in zip(rows.iterrows(), interval_kinds(rows, y), strict=True)
            if np.isfinite(row[y])]


def interval_note(drawn: list[Point]) -> str:
    """What the error bars cannot show, said once for the figure: that no point has an interval,
    or which points' intervals are unbounded."""
    if drawn and all(kind == NO_INTERVAL for _, kind in drawn):
        return " Every point: one run, so no interval."
    unbounded = list(dict.fromkeys(where for where, kind in drawn if kind == UNBOUNDED))
    if unbounded:
        return " 95% CI unbounded (the runs allow any value) at: " + "; ".join(unbounded) + "."
    return ""


def lines(ax: Axes, cells: pd.DataFrame, x, y, xlabel, ylabel, panel="") -> list[Point]:
    """One line per series of y (mean, with its 95% interval as error bars) against x; the
    points drawn, named with `panel`, for the caption's interval_note."""
    drawn = []
    for series, style, rows in by_series(cells):
        rows = rows.sort_values(x)
        ax.errorbar(rows[x], rows[y], yerr=error_bars(rows, y), capsize=3, label=plain(series),
                    **style)
        drawn += points(rows, x, y, lambda row, series=series: (
            f"{series}, {axis_text(x, row[x], row.get('batch_mode')) or f'{x} {row[x]}'}"
            + (f" ({panel})" if panel else "")))
    values = sorted(cells[x].dropna().unique())
    ax.set_xticks(values, [plain(v) for v in values])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return drawn


def cell_labels(ax: Axes, labels: list[str]) -> None:
    """One small label per cell under its bars, turned so that neighbours do not overlap."""
    ax.set_xticks(range(len(labels)), [plain(label) for label in labels], fontsize=7,
                  rotation=30, ha="right")


def legend(figure, axes):
    """One legend under the panels, each label once."""
    seen = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels, strict=True):
            seen.setdefault(label, handle)
    if seen:
        figure.legend(seen.values(), seen.keys(), loc="outside lower center",
                      ncols=min(len(seen), 4), fontsize="small")
