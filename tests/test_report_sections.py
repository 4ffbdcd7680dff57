"""The report's sections are one registry (reports.sections): every module there is in it, in
page order, and a section that breaks the contract is refused when it is made, not when a report
is built."""
import importlib
import pkgutil
from pathlib import Path

import pandas as pd
import pytest

from xbench.reports import sections
from xbench.reports.data import Options
from xbench.reports.predict import Link
from xbench.reports.sections import SECTIONS
from xbench.reports.sections.section import Figure, Section, Table, check

EVERY_TIME = ["Figure 5: rates as in the blog", "Scaling",
              "What the parallel machinery costs at one device", "Where a step's time goes",
              "Against the limit", "Predicted against measured", "Precision",
              "Time to accuracy", "Accuracy", "Memory", "Start-up and first-epoch overhead",
              "Cells", "Environment"]


def titles(**options) -> list[str]:
    """The static titles of the sections these options show, in page order."""
    shown = [s for s in SECTIONS if s.shown(Options((), **options))]
    return [s.title if isinstance(s.title, str) else "(of the data)" for s in shown]


def test_every_section_module_is_registered_once():
    modules = [name for _, name, _ in pkgutil.iter_modules(sections.__path__)
               if name != "section"]
    registered = [importlib.import_module(f"xbench.reports.sections.{name}").SECTION
                  for name in modules]
    assert sorted(registered, key=SECTIONS.index) == SECTIONS
    check(SECTIONS)


def test_the_sections_are_in_page_order_and_the_options_add_theirs():
    assert titles() == EVERY_TIME
    link = Link("test", 1e9, 0.0, "by hand")
    predicted = EVERY_TIME.index("Predicted against measured") + 1
    assert titles(lab=True, link=link, baseline=Path("base.jsonl")) == [
        "(of the data)", "The course lab", *EVERY_TIME[:predicted],
        "Predicted on other hardware", *EVERY_TIME[predicted:]]


def empty(data) -> pd.DataFrame:
    return pd.DataFrame()


def test_a_section_that_breaks_the_contract_is_refused_when_made():
    table = Table("t", "A table", empty, "it needs nothing")
    with pytest.raises(ValueError, match="section 'bare' needs a name, a title and text"):
        Section("bare", "Bare", [])
    with pytest.raises(ValueError, match="section 'blank' needs a name, a title and text"):
        Section("blank", "Blank", [" "], tables=(table,))
    with pytest.raises(ValueError, match="table 't' needs .* why it may be empty"):
        Table("t", "A table", empty, "")
    with pytest.raises(ValueError, match="figure 'f' needs a name, a title and a maker"):
        Figure("f", "", lambda data: "not drawn")
    twice = Section("twice", "Twice", ["Text."], tables=(table,))
    with pytest.raises(ValueError, match="table names used twice: t"):
        check([twice, Section("again", "Again", ["Text."], tables=(table,))])
    with pytest.raises(ValueError, match="section names used twice: twice"):
        check([twice, twice])
