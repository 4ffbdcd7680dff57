"""Compared with a baseline (with --baseline): each cell also in the baseline's results, its
epoch-2 rate now over then, as `xbench compare` gives it."""
from xbench.reports.rendering.compare import text_table
from xbench.reports.sections.data import Options, ReportData
from xbench.reports.sections.section import Section, Table

COMPARE_TEXT = ("Each cell's epoch-2 rate in these results over its rate in the baseline, with "
                "Fieller's 95% interval: faster or slower only where the interval excludes 1. "
                "Contended runs are compared too and marked.")


def differences(data: ReportData) -> list[str]:
    """What differs between the files (reports.rendering.compare's notes): what a reader of the
    comparison must see."""
    return data.comparison[1]


def asked(options: Options) -> bool:
    return options.baseline is not None


SECTION = Section(
    name="compared",
    title=lambda data: f"Compared with {data.options.baseline.name}",
    answers=differences,
    paragraphs=[COMPARE_TEXT],
    tables=(Table("compare",
                  lambda data: f"Every cell also in {data.options.baseline.name}: NEW / BASE "
                               f"epoch-2 rate",
                  lambda data: text_table(data.comparison[0]), "no cell is in both files"),),
    shown=asked)
