"""`xbench report`: results files -> figures, tables, summary.md, cells.csv and one HTML page.

Reads only the results files (through common.results.store) and needs no ML framework: pandas, numpy
and matplotlib. `build_report` is the whole pipeline: it walks the registered sections
(reports.sections) over the results' data (reports.sections.data) and writes what the two pages
(reports.page.pages) make of them; the command line only parses options and prints.
"""
from datetime import datetime, timezone
from pathlib import Path

from xbench.common.errors import UserError
from xbench.common.results.outputs import whole_file
from xbench.common.results.store import csv_safe
from xbench.reports.judging import decision, goodput
from xbench.reports.judging.verdict import Verdicts, lines
from xbench.reports.page import pages
from xbench.reports.page.json_report import dumps, report_json
from xbench.reports.rendering import tables
from xbench.reports.rendering.figures import render
from xbench.reports.sections import SECTIONS
from xbench.reports.sections.data import Options, ReportData
from xbench.reports.sections.section import ShownSection, walk
from xbench.reports.step_model.predict import Link

FORMATS = ("html", "md", "png", "svg", "csv")
DRAWN = {"html", "png", "svg"}  # the formats that need the figures drawn
PAGE_FILES = {"html": "index.html", "md": "summary.md", "csv": "cells.csv"}
JSON_FILE = "report.json"  # with --json


def parse_formats(text):
    """'html,md' -> ['html', 'md'] (a UserError for anything else)."""
    chosen = [f.strip().lower() for f in text.split(",")]
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown:
        raise UserError(f"--format takes a comma list of {', '.join(FORMATS)}; "
                        f"got {text!r}")
    return chosen


def files_written(out, formats, as_json: bool) -> list[Path]:
    """Every file the report may write into `out` in these formats (a figure's only where its
    section draws it): known before any row is read, so that none can be a file it reads."""
    names = [PAGE_FILES[f] for f in formats if f in PAGE_FILES] + [JSON_FILE] * as_json
    names += [f"{figure.name}.{kind}" for section in SECTIONS for figure in section.figures
              for kind in ("png", "svg") if kind in formats]
    return [Path(out) / name for name in names]


def build_report(paths, out, formats=FORMATS, where: str | None = None,
                 include_contended: bool = False, baseline: Path | None = None,
                 lab: bool = False, link: Link | None = None, node_link: Link | None = None,
                 as_json: bool = False):
    """Write the report of the results files `paths` into `out` (`as_json`: report.json too,
    the report as data: reports.page.json_report).

    Returns (notices, summary lines, {kind: path written}); notices say what is wrong or must be
    known (damaged lines, mixed environments, synthetic data), and never stop the report.
    """
    data = ReportData(Options(tuple(Path(p) for p in paths), where, include_contended,
                              Path(baseline) if baseline else None, lab, link, node_link))
    notices = tables.notices(data.frame, data.cells, data.problems, where)
    found = data.verdicts
    decided = decision.decisions(data.frame, data.cells, found, data.limits)
    shown = [walk(section, data, draw=bool(DRAWN & set(formats)) or as_json)
             for section in SECTIONS if section.shown(data.options)]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written, pngs = write_figures(shown, out, formats)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    meta = [f"Results: {', '.join(map(str, data.options.paths))}"
            + (f"; rows where {where}" if where else ""),
            f"Generated {generated} by xbench report."]
    if "html" in formats:
        written["html"] = out / PAGE_FILES["html"]
        with whole_file(written["html"]) as partial:
            partial.write_text(pages.html_page("xbench report", meta, found, notices,
                                              shown, pngs, decided), encoding="utf-8")
    if "md" in formats:
        written["md"] = out / PAGE_FILES["md"]
        with whole_file(written["md"]) as partial:
            partial.write_text(pages.markdown_page(meta, notices, found, shown,
                                                  linked="png" in formats, decided=decided),
                               encoding="utf-8")
    if as_json:
        written["json"] = out / JSON_FILE
        with whole_file(written["json"]) as partial:
            partial.write_text(dumps(report_json(meta, notices, found, shown, decided)),
                               encoding="utf-8")
    if "csv" in formats:
        written["csv"] = out / PAGE_FILES["csv"]
        with whole_file(written["csv"]) as partial:
            csv_safe(tables.cells_csv(data.cells, data.limits, data.attributed)).to_csv(
                partial, index=False)
    return notices, summary_lines(data, found, decided), written


def write_figures(shown: list[ShownSection], out: Path, formats) -> tuple[dict, dict]:
    """({file name: path} of the PNG and SVG files written, {figure name: PNG bytes} for the
    page): every figure the sections drew."""
    written, pngs = {}, {}
    for figure in (f for section in shown for f in section.figures if f.drawing is not None):
        if {"html", "png"} & set(formats):
            pngs[figure.name] = render(figure.drawing, "png")
        if "png" in formats:
            written[f"{figure.name}.png"] = out / f"{figure.name}.png"
            with whole_file(written[f"{figure.name}.png"]) as partial:
                partial.write_bytes(pngs[figure.name])
        if "svg" in formats:
            written[f"{figure.name}.svg"] = out / f"{figure.name}.svg"
            with whole_file(written[f"{figure.name}.svg"]) as partial:
                partial.write_bytes(render(figure.drawing, "svg"))
    return written, pngs


def summary_lines(data: ReportData, found: Verdicts,
                  decided: list[decision.Decision]) -> list[str]:
    """The printed summary: the decision first, then the rows, the verdicts, the runs not ok,
    the times to target."""
    printed = ["Decision:",
               *["  " + line for line in decision.lines(decided) or ["no ok run to rank"]]]
    printed += tables.summary(data.frame, lines(found), data.failures,
                              [p.name for p in data.options.paths])
    if not data.targets.empty:
        printed += ["Time to target (median [interval]):",
                    *["  " + line for line in goodput.goodput_lines(data.targets)]]
    return printed
