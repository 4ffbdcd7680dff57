"""`xbench report --json`: the report as data, strict JSON (no NaN or Infinity: null), for a
notebook or CI (`xbench report --json r.jsonl | jq`).

It holds what the pages show, as the objects they render: every verdict with its interval and
outcome (reports.judging.verdict), the notices and warnings, every section's tables (their values,
reports.rendering.tables.Numbers, with each column's heading and the table's title) and each
figure's data, read from the drawn matplotlib figure itself (each Axes' title and labels, every
labelled line's x and y, error bars, bars with their labels, labelled points), so a figure maker
need not know it is exported.
"""
import dataclasses
import json
import math
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure as Drawing

from xbench.reports.judging import decision
from xbench.reports.judging.verdict import Verdicts
from xbench.reports.judging.verdict import as_json as verdicts_json
from xbench.reports.sections.section import ShownFigure, ShownSection, ShownTable


def plain(value: Any) -> Any:
    """`value` as JSON's types: numbers finite or None, intervals with whether they have one
    and whether it is bounded (an unbounded bound is null), dataclasses and frames as objects,
    tuples and arrays as lists."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Enum):
        return plain(value.value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if hasattr(value, "has_interval"):  # an estimate: an infinite bound is null, so say it
            fields["has_interval"] = value.has_interval
            fields["bounded"] = value.has_interval and all(map(math.isfinite,
                                                               (value.low, value.high)))
        return fields
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray | pd.Series):
        return [plain(v) for v in value]
    if value is pd.NA or value is pd.NaT:
        return None
    return str(value)


def table_json(section: str, shown: ShownTable) -> dict:
    """A table's values (one list per line, in its columns' order), headings and title."""
    values = shown.table.values
    return {"section": section, "name": shown.name, "title": shown.title,
            "columns": [str(c) for c in values.columns],
            "rows": [plain(list(row)) for row in values.itertuples(index=False)],
            "empty": shown.empty if values.empty else None}


def axes_json(ax: Axes) -> dict:
    """What one panel plots: its title and axis labels, its labelled lines, error bars, bars
    (each with its x position and the tick labels, which name the bars) and labelled points."""
    def labelled(artist) -> bool:
        return not str(artist.get_label()).startswith("_")
    return {"title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(),
            "x_ticks": [{"at": plain(at), "label": label.get_text()} for at, label in
                        zip(ax.get_xticks(), ax.get_xticklabels()) if label.get_text()],
            "lines": [{"label": line.get_label(), "x": plain(np.asarray(line.get_xdata())),
                       "y": plain(np.asarray(line.get_ydata()))}
                      for line in ax.get_lines() if labelled(line)],
            "error_bars": [errorbar_json(c) for c in ax.containers
                           if isinstance(c, ErrorbarContainer)],
            "bars": [{"label": c.get_label(), "orientation": getattr(c, "orientation", None),
                      "x": [plain(p.get_x() + p.get_width() / 2) for p in c.patches],
                      "y": [plain(p.get_y() + p.get_height() / 2) for p in c.patches],
                      "values": plain(np.asarray(c.datavalues))}
                     for c in ax.containers if isinstance(c, BarContainer)],
            "points": [{"label": c.get_label(), "xy": plain(np.asarray(c.get_offsets()))}
                       for c in ax.collections if isinstance(c, PathCollection) and labelled(c)]}


def errorbar_json(container: ErrorbarContainer) -> dict:
    """An error-bar series: its points and each bar's two ends as [x, y] (null where a point
    has no bar)."""
    line, _, collections = container.lines
    ends = [[plain(segment[0]), plain(segment[-1])] if len(segment) else None
            for collection in collections if isinstance(collection, LineCollection)
            for segment in collection.get_segments()]
    return {"label": container.get_label(),
            "x": plain(np.asarray(line.get_xdata())) if line is not None else [],
            "y": plain(np.asarray(line.get_ydata())) if line is not None else [],
            "bar_ends": ends}


def figure_json(section: str, figure: ShownFigure) -> dict:
    drawing: Drawing | None = figure.drawing
    return {"section": section, "name": figure.name, "title": figure.title,
            "caption": figure.caption or None, "not_drawn": figure.reason or None,
            "axes": [axes_json(ax) for ax in drawing.axes] if drawing is not None else []}


def report_json(meta: list[str], notices: list[str], verdicts: Verdicts,
                sections: list[ShownSection], decided: list[decision.Decision]) -> dict:
    """The whole report as data, the decision first."""
    return {"meta": meta, "notices": notices, "decision": decision.as_json(decided),
            "verdicts": verdicts_json(verdicts),
            "sections": [{"title": s.title, "answers": s.answers, "paragraphs": s.paragraphs}
                         for s in sections],
            "tables": [table_json(s.title, t) for s in sections for t in s.tables],
            "figures": [figure_json(s.title, f) for s in sections for f in s.figures]}


def dumps(report: dict) -> str:
    """Strict JSON: a NaN or an infinity left anywhere is an error, never written."""
    return json.dumps(plain(report), ensure_ascii=False, allow_nan=False, indent=1) + "\n"
