"""The report's sections, in page order: `xbench report` walks SECTIONS and shows each whose
`shown` accepts the options (the contract: reports.sections.section).

A new section is one module here, holding its text, tables and figures and ending with
`SECTION = Section(...)`, and one line in SECTIONS where it goes on the page. The registry is
checked as it is imported: every section has a title and text, every table says why it may be
empty, and no two sections, tables or figures share a name.
"""
from xbench.reports.sections import (
    accumulation,
    accuracy,
    cells,
    compared,
    compiled,
    environment,
    figure5,
    lab,
    limits,
    memory,
    overhead,
    precision,
    predicted,
    scaling,
    steps,
    time_to_accuracy,
    what_if,
    wrapper,
)
from xbench.reports.sections.section import Section, check

SECTIONS: list[Section] = [
    compared.SECTION,  # with --baseline
    lab.SECTION,  # with --lab
    figure5.SECTION,
    scaling.SECTION,
    wrapper.SECTION,
    steps.SECTION,
    limits.SECTION,
    predicted.SECTION,
    what_if.SECTION,  # with --link
    precision.SECTION,
    accumulation.SECTION,
    compiled.SECTION,
    time_to_accuracy.SECTION,
    accuracy.SECTION,
    memory.SECTION,
    overhead.SECTION,
    cells.SECTION,
    environment.SECTION,
]
check(SECTIONS)
