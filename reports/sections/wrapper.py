"""What the parallel machinery costs at one device: each backend against its framework's
single-device reference with no parallel wrapper."""
from xbench.common.backends.traits import in_words, references
from xbench.reports.numbers import analysis
from xbench.reports.rendering.tables import (
    WHO,
    Numbers,
    batch_text,
    column,
    field,
    numbers,
    ratio_text,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Section, Table


def wrapper_table(data: ReportData) -> Numbers:
    return numbers(analysis.wrapper_cost(data.cells), [
        *WHO, ("batch", batch_text), ("reference (no wrapper)", column("reference")),
        field("rate (samples/s)", "epoch2_rate"),
        field("reference rate (samples/s)", "epoch2_rate_ref"),
        field("rate / reference, 95% CI", "ratio", ratio_text)])


REFERENCES = list(references().values())  # each framework's, no parallel wrapper

SECTION = Section(
    name="wrapper",
    title="What the parallel machinery costs at one device",
    paragraphs=[
        "Each backend's 1-device rate over its framework's single-device reference with no "
        f"parallel wrapper ({', '.join(REFERENCES)}), in the same setup: below 1× the "
        "wrapper costs time even when there is nothing to parallelise."],
    tables=(Table("wrapper", "Rate at one device against no parallel wrapper", wrapper_table,
                  f"it needs {in_words(REFERENCES, 'or')} beside the other backends at one "
                  f"device (every preset has them)"),))
