"""What the report's tables share (text ready for HTML and Markdown: numbers, intervals, ratios,
`table()` of a frame, Markdown), cells.csv, and the text summary with its notices. Each
section's own tables are its module's (reports.sections); those `xbench predict` prints too are
reports.rendering.predict_tables'."""
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any

import pandas as pd

from xbench.common.measuring.attribution import PARTS
from xbench.common.terminal import printable, wrap_words
from xbench.reports.judging.verdict import Interval
from xbench.reports.numbers import analysis

MIB = 2 ** 20
SUMMARY_LIMIT = 10  # lines per section of the printed summary; summary.md has every line


def num(value, digits=None):
    """A number for people: thousands separators for big ones, 3 significant digits for small."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, str):
        return value
    if digits is not None:
        return f"{value:,.{digits}f}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def estimate(mean, half) -> Interval:
    """A mean with its interval of half-width `half` (NaN bounds where there is none: one
    repeat)."""
    if half is None or math.isnan(half):
        return Interval(float(mean))
    return Interval(float(mean), float(mean - half), float(mean + half))


def estimate_text(digits=None) -> Callable[[Interval], str]:
    """How an `estimate` reads: '0.9812 [0.9790, 0.9834]', or the mean alone (words, where a
    column has them instead, as they are)."""
    def show(value: Interval | str) -> str:
        if isinstance(value, str):
            return value
        return num(value.value, digits) + (f" {bounds(value.low, value.high, digits)}"
                                           if value.has_interval else "")
    return show


def interval(mean, half, digits=None):
    """'[mean - half, mean + half]', '—' where there is no interval (one repeat)."""
    if half is None or math.isnan(half):
        return "—"
    return f"[{num(mean - half, digits)}, {num(mean + half, digits)}]"


def with_interval(mean, half, digits=None):
    """'0.9812 [0.9790, 0.9834]', or the mean alone where there is no interval (one repeat)."""
    spread = interval(mean, half, digits)
    return num(mean, digits) + ("" if spread == "—" else f" {spread}")


def bounds(low, high, digits=None):
    """'[low, high]' of an interval, '—' where there is none."""
    if any(v is None or math.isnan(v) for v in (low, high)):
        return "—"
    return f"[{num(low, digits)}, {num(high, digits)}]"


def ratio_text(ratio, percent=False):
    """A reports.numbers.stats.Ratio as '1.23× [1.10, 1.37]' (or in percent)."""
    show = (lambda v: f"{v:.0%}") if percent else (lambda v: f"{v:.2f}×")
    if math.isnan(ratio.value):
        return "—"
    if not ratio.has_interval:
        return show(ratio.value)
    low, high = (show(v) if math.isfinite(v) else ("−∞" if v < 0 else "∞")
                 for v in (ratio.low, ratio.high))
    return f"{show(ratio.value)} [{low}, {high}]"


def batch_text(cell):
    return f"{analysis.batch_kind(cell['batch_mode'])} {cell['batch']}"


def column(field, show=str):
    return lambda row: show(row[field])


@dataclass(frozen=True)
class Column:
    """A table's column: its heading, its value of a row (a number, NaN where missing; a
    reports.numbers.stats.Ratio or reports.judging.verdict.Interval where it has an interval; words
    where it is words) and how that value reads on the pages (`show`)."""
    heading: str
    value: Callable[[pd.Series], Any]
    show: Callable[[Any], str] = str


def field(heading: str, name: str, show: Callable[[Any], str] = num) -> Column:
    """A column of one field of the row, read as `show` says (a number by default)."""
    return Column(heading, lambda row: row[name], show)


@dataclass(frozen=True)
class Numbers:
    """A table as values, one row a line (`values`, objects as the columns made them), and how
    each column reads (`shows`, by heading; text where none is given): the pages show `text()`,
    `xbench report --json` writes the values."""
    values: pd.DataFrame
    shows: dict[str, Callable[[Any], str]]

    def text(self) -> pd.DataFrame:
        """The table as the pages show it: every value read as its column says."""
        shows = [self.shows.get(c, str) for c in self.values.columns]
        return pd.DataFrame([[show(v) for show, v in zip(shows, row)]
                             for row in self.values.itertuples(index=False)],
                            columns=self.values.columns)


def numbers(frame, columns: list[Column | tuple]) -> Numbers:
    """A table of `frame`, one line per row; a column given as (heading, function of a row ->
    text), as `table` takes them, is words."""
    columns = [c if isinstance(c, Column) else Column(*c) for c in columns]
    return Numbers(pd.DataFrame([[c.value(row) for c in columns] for _, row in frame.iterrows()],
                                columns=[c.heading for c in columns], dtype=object),
                   {c.heading: c.show for c in columns})


def table(frame, columns):
    """A table of text: `columns` is [(heading, function of a row -> text)], one line per row
    (the tables xbench predict and profile print; the report's sections make `numbers`)."""
    return pd.DataFrame([[get(row) for _, get in columns] for _, row in frame.iterrows()],
                        columns=[heading for heading, _ in columns])


WHO = [("env", column("env")), ("backend", column("series")), ("model", column("model"))]
CELL = [*WHO, ("batch", batch_text), ("devices", column("devices"))]
CELL_VALUES = [*WHO, ("batch", batch_text), field("devices", "devices", str)]  # for `numbers`


def cells_csv(cells, limits, attributed):
    """cells.csv: the cells as numbers, for other tools (with each part of a step where the rows
    attribute it, and MFU and bandwidths where a probe gives them)."""
    frame = cells[["env", "cell_key", *(c for c in analysis.CONFIG if c not in ("env", "series")),
                   "training", "threads_per_device", "n", "runs", "statuses"]].copy()
    for epoch in (1, 2):
        frame[f"epoch{epoch}_rate"] = cells[f"epoch{epoch}_rate"]
        frame[f"epoch{epoch}_rate_ci95_low"] = cells[f"epoch{epoch}_rate_low"]
        frame[f"epoch{epoch}_rate_ci95_high"] = cells[f"epoch{epoch}_rate_high"]
        frame[f"epoch{epoch}_seconds_mean"] = cells[f"epoch{epoch}_seconds"]
    frame["test_accuracy_mean"] = cells["test_accuracy"]
    frame["test_accuracy_ci95"] = cells["test_accuracy_ci"]
    parts = attributed[["env", "cell_key", *[f"{part}_step" for part in PARTS], "adds_up",
                        "moving_seconds"]].rename(
        columns={f"{part}_step": f"{part}_seconds_per_step" for part in PARTS})
    return (frame.merge(parts, on=["env", "cell_key"], how="left")
            .merge(limits[["env", "cell_key", "mfu", "mfu_low", "mfu_high", "mfu_suspect",
                           "achieved_busbw",
                           "bandwidth_suspect", "probe_busbw"]], on=["env", "cell_key"],
                   how="left"))


def mfu_text(c, name: str) -> str:
    """'41.2% [39.0%, 43.5%]'; SUSPECT above 100% (of either ceiling: never a result)."""
    def percent(value):
        return "—" if value is None or math.isnan(value) else f"{value:.1%}"
    if c["mfu_suspect"] and math.isfinite(c[name]):
        return f"SUSPECT: {percent(c[name])} (above 100% of a ceiling), not a result"
    bounds = (c[f"{name}_low"], c[f"{name}_high"])
    return percent(c[name]) + (f" [{percent(bounds[0])}, {percent(bounds[1])}]"
                               if all(map(math.isfinite, bounds)) else "")


def limits_table(limits):
    def percent(value):
        return "—" if value is None or math.isnan(value) else f"{value:.1%}"

    def gigabytes(value):
        return num(value * 1e-9)

    return table(limits, [
        *WHO, ("batch", batch_text), ("devices", column("devices")),
        ("rate (samples/s)", column("epoch2_rate", num)),
        ("peak (from xbench probe)", lambda c: c["peak_basis"] or "— (no probe of it)"),
        ("MFU, 95% CI of the rate", lambda c: mfu_text(c, "mfu")),
        ("data-sheet peak", lambda c: c["sheet_basis"] or "— (CPUs: the probe's only)"),
        ("MFU of the data sheet", lambda c: mfu_text(c, "sheet_mfu")),
        ("library", lambda c: c["library"] if isinstance(c["library"], str) else "—"),
        ("achieved busbw (GB/s), of the collectives alone",
         lambda c: f"SUSPECT: {gigabytes(c['achieved_busbw'])} is above the probe's, not a "
                   f"result" if c["bandwidth_suspect"] else gigabytes(c["achieved_busbw"])),
        ("probe busbw (GB/s), slowest-fastest", lambda c: "—" if math.isnan(c["probe_busbw"])
         else f"{gigabytes(c['probe_busbw'])} ({gigabytes(c['probe_busbw_low'])}-"
              f"{gigabytes(c['probe_busbw_high'])})"),
        ("achieved / probe", lambda c: "—" if c["bandwidth_suspect"]
         else percent(c["bandwidth_share"]))])


ACCURACY = Column("test accuracy, 95% CI",
                  lambda cell: estimate(cell["test_accuracy"], cell["test_accuracy_ci"]),
                  estimate_text(4))


RATE_INTERVAL = Column("epoch-2 rate 95% CI",
                       lambda c: Interval(c["epoch2_rate"], c["epoch2_rate_low"],
                                          c["epoch2_rate_high"]),
                       lambda rate: bounds(rate.low, rate.high))


def accuracy_text(cell) -> str:
    """The mean test accuracy over the repeats, with its interval."""
    return ACCURACY.show(ACCURACY.value(cell))


MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]#|~])")
BLOCK_START = re.compile(r"^(\d+(?=[.)](\s|$))|)([-+=>.)])")


def markdown_text(value):
    """Text from the results as inert Markdown: HTML escaped, the characters that make emphasis,
    code, links, images, headings or table cells backslash-escaped, a list or quote marker at its
    start escaped, line breaks as spaces (so no text can open a fence, a heading, a link or an
    image, or end its table cell), control characters shown as their escapes (printable)."""
    flat = MARKDOWN_SPECIALS.sub(r"\\\1", escape(printable(" ".join(str(value).split())),
                                                 quote=False))
    return BLOCK_START.sub(r"\1\\\3", flat)


def markdown(frame):
    """A GitHub-flavoured Markdown table of inert text (markdown_text)."""
    if frame.empty:
        return "_(none)_"
    lines = ["| " + " | ".join(markdown_text(c) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(markdown_text(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def evidence_problems(cells):
    """What the rows' evidence says went wrong: replicas that ended with different weights,
    samples trained by more than one replica, and backends or device counts of one cell that
    trained on different samples (their global batches' digests differ). Every ok run counts,
    contended or not: what a run trained on does not depend on what else ran."""
    lines = []
    for _, cell in cells.iterrows():
        if not cell["replicas_agree"]:
            lines.append(f"EVIDENCE: {cell['cell_key']}: its replicas ended with different "
                         f"weights: they did not train one model")
        if cell["shard_overlap"]:
            lines.append(f"EVIDENCE: {cell['cell_key']}: {cell['shard_overlap']} samples were "
                         f"trained by more than one replica in an epoch")
    for _, group in (cells.groupby(analysis.SAME_WORK, dropna=False) if len(cells) else []):
        digests = {d for ds in group["global_digests"] for d in ds}
        if len(digests) > 1:
            lines.append(f"EVIDENCE: {', '.join(sorted(set(group['series'])))} on "
                         f"{group.iloc[0]['model']} global batch {group.iloc[0]['global_batch']}: "
                         f"not every run trained on the same samples in the same global batches "
                         f"({len(digests)} different sample digests)")
    return lines


def notices(frame, cells, problems, where):
    """What a reader must know before trusting the numbers: no rows, contended runs used,
    single runs, several environments, synthetic data, damaged lines in the results files."""
    lines = []
    if frame.empty:
        lines.append("No rows to report" + (f" match --where {where!r}" if where else "")
                     + ": the report is empty.")
    lines += contended_included(frame)
    measured = analysis.measured(cells)
    single = int((measured["n"] == 1).sum())
    if single:
        lines.append(f"{single} of {len(measured)} measured cells ran once (n = 1): "
                     f"no spread, no confidence interval; run grids with --repeat 3 or more "
                     f"before trusting differences.")
    lines += evidence_problems(cells)
    environments = frame["env"].nunique()
    if environments > 1:
        lines.append(f"Rows come from {environments} environments (machines or versions differ): "
                     f"they are never averaged together; their series are marked [env X] and the "
                     f"Environment table says what each is.")
    if (frame["dataset"] == "synthetic").any():
        lines.append("Some rows are on SYNTHETIC data (marked 'synthetic'): their rates are real, "
                     "their accuracy is meaningless.")
    if problems:
        lines.append(f"{len(problems)} problem(s) in the results files; what could be read is "
                     f"reported:")
        lines += problems[:SUMMARY_LIMIT]
        if len(problems) > SUMMARY_LIMIT:
            lines.append(f"... and {len(problems) - SUMMARY_LIMIT} more")
    return lines


def contended_included(frame) -> list[str]:
    """Where runs marked contended are used (--include-contended): how many, and which, by cell
    and run; the decision's table marks them too."""
    used = frame[frame["status"].eq("ok") & frame["contended"] & frame["usable"]] \
        if len(frame) else frame
    if used.empty:
        return []
    named = [f"{key} (run {', '.join(map(str, sorted(runs['repeat'])))})"
             for key, runs in used.groupby("cell_key", sort=False)]
    shown = named[:SUMMARY_LIMIT] + ([f"and {len(named) - SUMMARY_LIMIT} more cell(s)"]
                                     if len(named) > SUMMARY_LIMIT else [])
    every = len(used) == int((frame["status"].eq("ok") & frame["usable"]).sum())
    return ["CONTENDED RUNS INCLUDED (--include-contended): "
            + (f"every run that ended ok ({len(used)}, of {len(named)} cell(s)) was"
               if every else f"{len(used)} run(s) of {len(named)} cell(s) were")
            + " timed while other processes took their cores, and the decision, the verdicts "
              "and the tables use them (the decision marks them)"
            + ("." if every else ": " + "; ".join(shown) + ".")]


def summary(frame, verdict_lines, failures, sources):
    """The text summary (a list of lines): the verdicts, and the runs that were not ok."""
    ok = int((frame["status"] == "ok").sum())
    rows = f"{len(frame)} row{'' if len(frame) == 1 else 's'}"
    lines = [f"{rows} ({ok} ok, {len(frame) - ok} not ok) from {', '.join(sources)}",
             "Verdicts (95% intervals; a comparison is stated only where its interval supports "
             "it):", *["  " + line for line in verdict_lines]]
    lines.append(f"Runs not ok: {len(failures)}" + (": " + ", ".join(
        f"{n} {s}" for s, n in failures["status"].value_counts().items()) if len(failures) else ""))
    lines += [f"  {f['cell_key']} r{f['repeat']}: {f['status']}: {first_line(f['error'])}"
              for _, f in failures.iterrows()]
    crashed = frame[frame["crashes"] > 0]
    if len(crashed):  # a framework's crash, run again (the retries setting): said, never hidden
        lines.append(f"Runs that crashed and ran again: {len(crashed)} (each crash is in its "
                     f"row's 'crashes', with its log)")
        lines += [f"  {c['cell_key']} r{c['repeat']}: {c['crashes']} crash(es), then "
                  f"{c['status']}" for _, c in crashed.iterrows()]
    return lines


def first_line(text, width=140):
    """The first line of a reason, cut between words (never mid-word) where it is longer."""
    line = (str(text or "no reason recorded").strip().splitlines() or [""])[0]
    return line if len(line) <= width else wrap_words(line, width - 2)[0] + " …"


def shorten(lines):
    """The printed summary: each indented list (under a heading, or a heading's own: '  X:')
    cut to SUMMARY_LIMIT lines, said where; a heading, a decision's sentence and what it left
    out (reports.judging.decision.lines: '→ ...', 'left out: ...') are never cut."""
    out, run, cut = [], 0, 0
    for line in [*lines, None]:
        indented = line is not None and line.startswith("  ")
        heading = indented and not line.startswith("   ") and line.endswith(":")
        essential = heading or indented and line.lstrip().startswith(("→", "left out:"))
        run = 0 if heading or not indented else run + 1
        if cut and (essential or not indented):
            out.append(f"  ... {cut} more (see summary.md)")
            cut = 0
        if line is None:
            break
        if run <= SUMMARY_LIMIT or essential:
            out.append(line)
        else:
            cut += 1
    return out
