"""The contract of a report section: what it is called, what it says, its tables and figures,
and when it is shown. Each is checked when it is made (at import), so a section with no text or
a table that cannot say why it is empty never reaches a report.

Text that depends on the results is a function of the report's data
(reports.sections.data.ReportData); the rest is written out. `Shown*` is what walking a section
gives the pages (reports.page.pages).
"""
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import pandas as pd
from matplotlib.figure import Figure as Drawing

from xbench.reports.rendering.tables import Numbers
from xbench.reports.sections.data import Options, ReportData

Text = str | Callable[[ReportData], str]
Made = tuple[str, Drawing] | str  # (caption, figure), or why it is not drawn and what would draw it

NO_ROWS = "no cell of these results has a usable run"


def said(text: Text, data: ReportData) -> str:
    """The text itself, or what its function says of `data`."""
    return text(data) if callable(text) else text


def present(text: Text) -> bool:
    """Whether there is text: words, or a function that will say them."""
    return callable(text) or (isinstance(text, str) and bool(text.strip()))


def refuse(problem: str) -> NoReturn:
    raise ValueError(f"report section contract: {problem}")


@dataclass(frozen=True)
class Table:
    """A table: `make` gives its values with how each column reads
    (reports.rendering.tables.Numbers), or its text (a DataFrame of str); `empty` says why it would
    be empty and what would fill it."""
    name: str
    title: Text
    make: Callable[[ReportData], Numbers | pd.DataFrame]
    empty: Text

    def __post_init__(self):
        if not (self.name and present(self.title) and callable(self.make)
                and present(self.empty)):
            refuse(f"table {self.name!r} needs a name, a title, a maker and why it may be empty")


@dataclass(frozen=True)
class Figure:
    """A figure: `make` gives (caption, matplotlib Figure), or why it is not drawn. `name` is its
    files' name (NAME.png, NAME.svg) and its anchor on the page."""
    name: str
    title: str
    make: Callable[[ReportData], Made]

    def __post_init__(self):
        if not (self.name and present(self.title) and callable(self.make)):
            refuse(f"figure {self.name!r} needs a name, a title and a maker")


def always(options: Options) -> bool:
    """A section every report has, whatever the options."""
    return True


@dataclass(frozen=True)
class Section:
    """One heading of the report: what its numbers answer (`answers`: a function of the data
    giving its sentences, where the section states any: shown first, never folded), its
    paragraphs (how it was measured: each text, or one function of the data giving all of
    them), then its figures, then its tables; `shown` says whether the options ask for it."""
    name: str
    title: Text
    paragraphs: Sequence[Text] | Callable[[ReportData], list[str]]
    figures: tuple[Figure, ...] = ()
    tables: tuple[Table, ...] = ()
    shown: Callable[[Options], bool] = always
    answers: Callable[[ReportData], list[str]] | None = None

    def __post_init__(self):
        written = callable(self.paragraphs) or (
            bool(self.paragraphs) and all(map(present, self.paragraphs)))
        if not (self.name and present(self.title) and written and callable(self.shown)):
            refuse(f"section {self.name!r} needs a name, a title and text")

    def text(self, data: ReportData) -> list[str]:
        """The paragraphs, said of `data`."""
        if callable(self.paragraphs):
            return list(self.paragraphs(data))
        return [said(paragraph, data) for paragraph in self.paragraphs]


def check(sections: Sequence[Section]) -> None:
    """Refuse a registry with two sections, two tables or two figures of one name (a figure's
    name is a file's)."""
    for kind, names in (
            ("section", [s.name for s in sections]),
            ("table", [t.name for s in sections for t in s.tables]),
            ("figure", [f.name for s in sections for f in s.figures])):
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            refuse(f"{kind} names used twice: {', '.join(twice)}")


@dataclass(frozen=True)
class ShownTable:
    """A table made: its values (`table`: text where its maker gives text) and, as the pages
    show it, `frame`."""
    name: str
    title: str
    table: Numbers
    empty: str

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.text()


@dataclass(frozen=True)
class ShownFigure:
    """A figure drawn (`drawing`, with its caption) or not (`reason`)."""
    name: str
    title: str
    caption: str = ""
    drawing: Drawing | None = None
    reason: str = ""


@dataclass(frozen=True)
class ShownSection:
    """A section walked: its `answers` (above its fold on the page), its `paragraphs` (how it
    was measured: folded), its figures and tables."""
    title: str
    paragraphs: list[str]
    figures: list[ShownFigure] = field(default_factory=list)
    tables: list[ShownTable] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)


def walk(section: Section, data: ReportData, draw: bool) -> ShownSection:
    """What `section` shows of `data` (its figures made only where `draw`); where every run
    was left out as contended, that is why each table is empty and each figure undrawn."""
    because = all_contended(data)
    figures = []
    for figure in section.figures if draw else ():
        made = figure.make(data)
        figures.append(ShownFigure(figure.name, figure.title, reason=because or made)
                       if isinstance(made, str) else ShownFigure(figure.name, figure.title, *made))
    return ShownSection(said(section.title, data), section.text(data), figures,
                        [ShownTable(t.name, said(t.title, data), valued(t.make(data)),
                                    because or said(t.empty, data)) for t in section.tables],
                        section.answers(data) if section.answers else [])


def all_contended(data: ReportData) -> str | None:
    """The reason nothing is usable where every run that ended ok was marked contended (a
    section's own guess at why it is empty would be wrong), else None."""
    frame = data.frame
    if frame.empty or frame["usable"].any():
        return None
    contended = int(((frame["status"] == "ok") & frame["contended"]).sum())
    return (f"{NO_ROWS}: all {contended} run(s) that ended ok were marked contended (other "
            f"processes took their cores); --include-contended uses them") if contended else None


def valued(made: Numbers | pd.DataFrame) -> Numbers:
    """A maker's table as values: a table of text is its own values."""
    return made if isinstance(made, Numbers) else Numbers(made, {})
