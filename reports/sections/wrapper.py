"""What the parallel machinery costs at one device: each backend against its framework's
single-device reference with no parallel wrapper."""
from xbench.reports import analysis
from xbench.reports.data import ReportData
from xbench.reports.sections.section import Section, Table
from xbench.reports.tables import WHO, batch_text, column, num, ratio_text, table


def wrapper_table(data: ReportData):
    return table(analysis.wrapper_cost(data.cells), [
        *WHO, ("batch", batch_text), ("reference (no wrapper)", column("reference")),
        ("rate (samples/s)", column("epoch2_rate", num)),
        ("reference rate (samples/s)", column("epoch2_rate_ref", num)),
        ("rate / reference, 95% CI", lambda w: ratio_text(w["ratio"]))])


SECTION = Section(
    name="wrapper",
    title="What the parallel machinery costs at one device",
    paragraphs=[
        "Each backend's 1-device rate over its framework's single-device reference with no "
        "parallel wrapper (pt-single, tf-single, jax-single), in the same setup: below 1× the "
        "wrapper costs time even when there is nothing to parallelise."],
    tables=(Table("wrapper", "Rate at one device against no parallel wrapper", wrapper_table,
                  "it needs pt-single, tf-single or jax-single beside the other backends at one "
                  "device (every preset has them)"),))
