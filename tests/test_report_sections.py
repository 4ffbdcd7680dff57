"""The report's sections are one registry (reports.sections): every module there is in it, in
page order, and a section that breaks the contract is refused when it is made, not when a report
is built."""
import importlib
import pkgutil
from html import escape
from pathlib import Path

import pandas as pd
import pytest

from xbench.reports import sections
from xbench.reports.judging.verdict import Family, Kind, ReportWarning, Side, Verdict, Verdicts
from xbench.reports.page.pages import verdicts_html, verdicts_markdown
from xbench.reports.rendering.tables import markdown_text
from xbench.reports.sections import SECTIONS
from xbench.reports.sections.data import Options
from xbench.reports.sections.section import Figure, Section, Table, check
from xbench.reports.step_model.predict import Link

EVERY_TIME = ["Figure 5: rates as in the blog", "Scaling",
              "What the parallel machinery costs at one device", "Where a step's time goes",
              "Against the limit", "Predicted against measured", "Precision",
              "Accumulation", "Compiled or eager", "Time to accuracy", "Accuracy", "Memory",
              "Start-up and first-epoch overhead", "Cells", "Environment"]


def titles(**options) -> list[str]:
    """The static titles of the sections these options show, in page order."""
    shown = [s for s in SECTIONS if s.shown(Options((), **options))]
    return [s.title if isinstance(s.title, str) else "(of the data)" for s in shown]


def test_every_section_module_is_registered_once():
    modules = [name for _, name, _ in pkgutil.iter_modules(sections.__path__)
               if name not in ("section", "data")]  # the contract, what it reads
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


def test_a_verdict_renders_as_what_it_is_whatever_its_words():
    """The pages lay out the verdicts' objects, not their words: a family and a backend named
    with leading spaces and 'WARNING' stay a family heading and a finding, and only a warning
    looks like one."""
    odd = "  WARNING: named so"
    found = Verdicts([Family(odd, [Verdict(Kind.FASTEST, odd, Side(odd, 1, rate=100.0), None,
                                           "not compared")])],
                     warnings=[ReportWarning("few repeats", 1, 2, 3)])
    html = verdicts_html(found)
    assert html.count('<p class="warning">') == 1 and html.count("<li>") == 1
    assert (f'<p class="family"><strong>{escape(odd)}:</strong></p><ul><li>fastest on 1 '
            f'device: only {escape(odd)} ran (100 samples/s)</li></ul>') in html
    lines = verdicts_markdown(found).splitlines()
    assert lines == ["", f"**{markdown_text(odd)}:**",
                     f"- fastest on 1 device: only {markdown_text(odd)} ran (100 samples/s)",
                     "", "**WARNING: 1 of 2 cells have fewer than 3 usable repeats: their "
                         "comparisons stay inconclusive or rest on little; run the grid with "
                         "--repeat 3 or more**"]


def test_a_sections_answers_stand_above_its_fold_and_its_methods_inside():
    """What a section's numbers answer is read without opening anything: above the folded
    "How these were measured", whose paragraphs it does not repeat; summary.md has both."""
    from xbench.reports.page.pages import html_page, markdown_page
    from xbench.reports.sections.section import ShownSection
    shown = ShownSection("Accumulation", ["How it was measured."],
                         answers=["pt-ddp: syncing once is 1.2× faster <b>"])
    page = html_page("t", [], Verdicts([], None, []), [], [shown], {})
    answer = '<p class="answer">pt-ddp: syncing once is 1.2× faster &lt;b&gt;</p>'
    assert page.index(answer) < page.index("<details") < page.index("How it was measured.")
    assert page.count("syncing once") == 1
    summary = markdown_page([], [], Verdicts([], None, []), [shown], linked=False)
    assert summary.index("syncing once") < summary.index("How it was measured.")


def test_verdict_groups_that_would_read_alike_are_headed_apart(tmp_path):
    """One setup trained two ways (compiled and not) is two groups of verdicts: each heading
    says its training, so the terminal never shows two groups under one heading."""
    from tests.report_fixtures import repeated, write_rows
    from xbench.reports.page.build import build_report
    rows = [*repeated("pt-ddp", 1, (98, 100, 102)), *repeated("pt-ddp", 2, (188, 190, 192))]
    compiled = [{**row, "compile": "on", "cell_key": row["cell_key"] + "|compiled"}
                for row in rows]
    _, summary, _ = build_report([write_rows(tmp_path / "r.jsonl", rows + compiled)],
                                 tmp_path / "out", formats=["md"])
    headings = [line for line in summary if line.startswith("  small ×1 mnist, global batch")
                and "(strong scaling)" in line]
    assert headings == ["  small ×1 mnist, global batch 128 (strong scaling), cpu, adam 0.001:",
                        "  small ×1 mnist, global batch 128 (strong scaling), cpu, adam 0.001, "
                        "compiled:"]
