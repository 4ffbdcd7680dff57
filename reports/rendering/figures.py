"""What the report's figures share (matplotlib, Agg): how each backend and series is drawn,
panels, lines with their intervals, one legend, and the words under a figure. Each figure itself
is its section's (reports.sections).

Every backend keeps one look in every figure, from its traits alone (never its name): a colour
family per framework, a shade of it per backend, a marker per wrapper (Horovod's backends share
one, in their frameworks' colours). A series' data, environment and nodes change other channels:
hollow markers on synthetic data, a line style per environment, a wider line over more nodes. A
figure that varies some axes holds the others at their most common value and says which in its
caption, and says which runs of the results it draws none of (left_out). Error bars are 95% CIs
(reports.numbers.stats) and appear only where a cell has more than one repeat; an unbounded side is
a dashed arrow to the panel's edge; what a bar cannot show (no interval at all, or which are
unbounded) the caption says once. A point a SUSPECT verdict rests on, or one drawn from contended
runs, is ringed (MARKS) and named in the legend. No figure is wider than the page (MOST_WIDTH).
"""
import io
import math
import re
import zlib
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from xbench.common.backends.traits import TRAITS
from xbench.common.results.schema import STATUSES
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import environment_number

matplotlib.use("Agg")  # files only, never a display

TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22"]
# A colour map per framework, in the order the traits table first names each (one past them
# shares a family again, its markers still apart); grey: a backend the table does not hold.
FAMILIES = ("Blues", "Oranges", "Greens", "Purples", "Reds")
UNKNOWN_FAMILY, UNKNOWN_SHADES = "Greys", 4
DARKEST, LIGHTEST = 0.9, 0.45  # where a family's shades lie on its colour map (0 white, 1 dark)
# A marker per wrapper, in the order the table first names each; those past them mark backends
# the table does not hold. Each has an inside, so that a hollow one is still itself.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "p", "h", "<", ">", "d", "H", "8")
LINESTYLES = ["-", "--", "-.", ":"]  # one per environment
LINEWIDTH = 1.5  # of a series on one node; over N nodes, (1 + log2 N) times it
RATE = "epoch-2 rate (samples/s)"
DEVICES = "devices (count)"
CI_NOTE = "Error bars: 95% CI over repeats (only where n > 1)."
# Points that must not be read plainly: their legend label and their ring (MARKS).
SUSPECT = "SUSPECT (see the verdicts)"
CONTENDED = "contended runs kept"
MARKS = {SUSPECT: {"marker": "o", "s": 260, "facecolors": "none", "edgecolors": "#d62728",
                   "linewidths": 2.0},
         CONTENDED: {"marker": "s", "s": 190, "facecolors": "none", "edgecolors": "#444444",
                     "linewidths": 1.3, "linestyles": ":"}}
MOST_WIDTH = 13.2  # inches: a figure at 100 dpi (and its margins) fits the page unscaled
# What a point's 95% interval is (interval_kinds): an error bar, none, or unbounded.
BOUNDED, NO_INTERVAL, UNBOUNDED = "bounded", "none", "unbounded"
Point = tuple[str, str]  # (which point, in words; the kind of its interval)
# A run that did not end ok, as a caption counts it: "2 failed runs" (the schema's STATUSES).
NOT_OK = {"failed": "failed", "timeout": "timed-out", "oom": "out-of-memory",
          "unsupported": "unsupported"}


@dataclass(frozen=True)
class Look:
    """How one backend is drawn in every figure."""
    color: str   # a shade of its framework's family
    marker: str  # its wrapper's


def shade(family: str, index: int, count: int) -> str:
    """The `index`th of `count` shades of a colour map, darkest first."""
    step = (DARKEST - LIGHTEST) / max(count - 1, 1)
    return to_hex(matplotlib.colormaps[family](DARKEST - index * step))


def registered_looks() -> dict[str, Look]:
    """Every backend of the traits table: its framework's family, a shade each in the table's
    order, its wrapper's marker."""
    frameworks = list(dict.fromkeys(t.framework.name for t in TRAITS.values()))
    wrappers = list(dict.fromkeys(t.wrapper for t in TRAITS.values()))
    looks = {}
    for number, framework in enumerate(frameworks):
        family = [t for t in TRAITS.values() if t.framework.name == framework]
        for index, traits in enumerate(family):
            looks[traits.name] = Look(shade(FAMILIES[number % len(FAMILIES)], index, len(family)),
                                      MARKERS[wrappers.index(traits.wrapper) % len(MARKERS)])
    return looks


LOOKS = registered_looks()
SPARE_MARKERS = [m for m in MARKERS if m not in {look.marker for look in LOOKS.values()}] or MARKERS


def look(backend: str) -> Look:
    """`backend`'s look; one the traits table does not hold (a row of another xbench) gets a grey
    and a marker no wrapper has, both from a checksum of its name: the same in every figure and
    every report."""
    if backend in LOOKS:
        return LOOKS[backend]
    checksum = zlib.crc32(str(backend).encode())
    return Look(shade(UNKNOWN_FAMILY, checksum % UNKNOWN_SHADES, UNKNOWN_SHADES),
                SPARE_MARKERS[checksum // UNKNOWN_SHADES % len(SPARE_MARKERS)])


def color(backend: str) -> str:
    return look(backend).color


def series_style(backend: str, synthetic: bool, env: str, nodes: int) -> dict:
    """matplotlib's style of one series: its backend's colour and marker, hollow on synthetic
    data, its environment's line style, wider over more nodes."""
    drawn = look(backend)
    return {"color": drawn.color, "marker": drawn.marker,
            "fillstyle": "none" if synthetic else "full",
            "linestyle": LINESTYLES[environment_number(env) % len(LINESTYLES)],
            "linewidth": LINEWIDTH * (1 + math.log2(max(int(nodes), 1)))}


def without_faults(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with no injected fault: a fault's cell is slow on purpose, and would join its
    twin's line (a series is its backend, data, environment and nodes)."""
    if cells.empty:
        return cells
    return cells[cells["training"] == cells["training_without_fault"]]


def left_out(runs: pd.DataFrame, faults: bool = True) -> str:
    """' Left out: 3 contended runs, 1 run with an injected fault.': which of `runs` a figure
    draws none of, and how many (nothing where it drew from all): a run that did not end ok, by
    its status; an ok one that is not usable (contended, unless --include-contended:
    reports.numbers.rows); with `faults` (the figure draws without_faults), a usable run with an
    injected fault."""
    if runs.empty:
        return ""
    ok, usable = runs["status"] == "ok", runs["usable"].astype(bool)
    statuses = [*STATUSES, *sorted(set(runs["status"]) - set(STATUSES))]
    counts = [(ok & ~usable, "contended", ""),
              (usable & (runs["training"] != runs["training_without_fault"]) & faults, "",
               "with an injected fault"),
              *[(runs["status"] == status, NOT_OK.get(status, status), "")
                for status in statuses if status != "ok"]]
    parts = [" ".join(word for word in (str(count), before, "run" if count == 1 else "runs",
                                        after) if word)
             for chosen, before, after in counts if (count := int(chosen.sum()))]
    return " Left out: " + ", ".join(parts) + "." if parts else ""


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
    """`count` panels of `width` x `height` inches, at most `columns` a row and as many as fit
    MOST_WIDTH (a panel at most that wide), the rest wrapped into rows below."""
    width = min(width, MOST_WIDTH)
    columns = max(1, min(columns, int(MOST_WIDTH // width)))
    rows = (count + columns - 1) // columns
    columns = min(count, columns)
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for extra in axes[count:]:
        extra.set_visible(False)
    return figure, axes[:count]


def by_series(cells):
    """(series, style, rows) per line, backends in the traits table's order."""
    backend_of = dict(zip(cells["series"], cells["backend"], strict=True))
    for series in sorted(backend_of, key=lambda s: (analysis.backend_order(backend_of[s]), s)):
        rows = cells[cells["series"] == series]
        first = rows.iloc[0]
        yield series, series_style(first["backend"], first["dataset"] == "synthetic",
                                   first["env"], first["nodes"]), rows


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
        return (" 95% CI unbounded (the runs allow any value; drawn as a dashed arrow to the "
                "panel's edge) at: " + "; ".join(unbounded) + ".")
    return ""


def open_ends(ax: Axes, xs, ys, rows, y, color) -> None:
    """Each unbounded side of a point's 95% interval drawn as what it is, a dashed arrow from
    the point to the panel's edge (an error bar would end in a cap, as if bounded there)."""
    bars = interval_bars(rows, y)
    if bars is None:
        return
    for x, value, sides in zip(xs, ys, bars.T, strict=True):
        if np.isnan(sides).any() or not np.isfinite(value):
            continue  # no interval at all: the caption says so
        for side, edge in zip(sides, (0.0, 1.0), strict=True):
            if np.isinf(side):
                ax.annotate("", xy=(x, edge), xycoords=ax.get_xaxis_transform(),
                            xytext=(x, value), textcoords="data",
                            arrowprops={"arrowstyle": "-|>", "color": color, "linestyle": "--",
                                        "shrinkA": 0, "shrinkB": 0})


def marked(rows, suspect) -> dict[str, np.ndarray]:
    """{mark's legend label: which of `rows` have it}: a cell in `suspect` (reports.sections.data's
    suspect: an impossible ratio or beyond the machine's limits) or a scaling row above 100%
    efficiency; a cell drawn from runs marked contended (kept by --include-contended)."""
    keys = rows["cell_key"] if "cell_key" in rows else pd.Series("", index=rows.index)
    is_suspect = keys.isin(suspect)
    if "suspect" in rows:
        is_suspect |= rows["suspect"].astype("boolean").fillna(False).astype(bool)
    contended = (rows["contended_runs"].fillna(0) > 0 if "contended_runs" in rows
                 else pd.Series(False, index=rows.index))
    return {SUSPECT: is_suspect.to_numpy(bool), CONTENDED: contended.to_numpy(bool)}


def mark(ax: Axes, xs, ys, rows, suspect) -> None:
    """A ring around each point of `rows` (drawn at xs, ys) that must not be read plainly, one
    look per reason (MARKS), each named once in the legend."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    for label, chosen in marked(rows, suspect).items():
        chosen = chosen & np.isfinite(ys)
        if chosen.any():
            ax.scatter(xs[chosen], ys[chosen], label=label, zorder=5, **MARKS[label])


def wrapped(text, width_inches: float, fontsize: float = 12) -> str:
    """`text` in lines that fit `width_inches` at `fontsize` points, broken after a '/', '_',
    '-' or space where it can be (a model's path), so that neighbouring titles never meet."""
    most = max(12, int(width_inches * 0.8 * 72 / (fontsize * 0.62)))  # the axes: 80%
    rows, row = [], ""
    for piece in re.split(r"(?<=[/_\s-])", plain(text)):
        while len(piece) > most:
            rows, row, piece = [*rows, row + piece[:most - len(row)]], "", piece[most - len(row):]
        if len(row) + len(piece.rstrip()) > most:
            rows, row = [*rows, row.rstrip()], ""
        row += piece
    return "\n".join(r for r in [*rows, row.rstrip()] if r)


def lines(ax: Axes, cells: pd.DataFrame, x, y, xlabel, ylabel, panel="",
          suspect=frozenset()) -> list[Point]:
    """One line per series of y (mean, with its 95% interval as error bars, an unbounded side
    as an arrow) against x, its SUSPECT (cell keys in `suspect`) and contended points marked;
    the points drawn, named with `panel`, for the caption's interval_note."""
    drawn = []
    for series, style, rows in by_series(cells):
        rows = rows.sort_values(x)
        ax.errorbar(rows[x], rows[y], yerr=error_bars(rows, y), capsize=3, label=plain(series),
                    **style)
        open_ends(ax, rows[x], rows[y], rows, y, style["color"])
        mark(ax, rows[x], rows[y], rows, suspect)
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
