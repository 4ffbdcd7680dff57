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
    memory,
    overhead,
    precision,
    predicted,
    rates,
    scaling,
    steps,
    time_to_accuracy,
    utilisation,
    weak_scaling,
    what_if,
    wrapper,
)
from xbench.reports.sections.section import Section, check

SECTIONS: list[Section] = [
    compared.SECTION,  # with --baseline
    weak_scaling.SECTION,  # with --lab
    rates.SECTION,
    scaling.SECTION,
    wrapper.SECTION,
    steps.SECTION,
    utilisation.SECTION,
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
