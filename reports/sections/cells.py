"""Cells: every cell's rates, times and test accuracy over its usable repeats, and the runs that
did not finish ok."""
from xbench.reports.numbers.stats import CI_METHOD
from xbench.reports.rendering.tables import (
    ACCURACY,
    RATE_INTERVAL,
    WHO,
    Numbers,
    batch_text,
    column,
    field,
    num,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Section, Table


def cells_table(data: ReportData) -> Numbers:
    """Every cell: n, the epoch-1 and epoch-2 rates (samples / mean epoch time) with the 95%
    interval of the epoch-2 rate, the epoch-2 time's mean and std, test accuracy, the runs."""
    return numbers(data.cells, [
        *WHO, field("multiple", "dataset_multiple", lambda v: f"×{v}"), ("batch", batch_text),
        field("global batch", "global_batch", str),
        field("per-device batch", "per_device_batch", str), field("devices", "devices", str),
        field("threads/device", "threads_per_device"), field("n", "n", str),
        field("epoch-1 rate (samples/s)", "epoch1_rate"),
        field("epoch-2 rate (samples/s)", "epoch2_rate"), RATE_INTERVAL,
        field("epoch-2 time (s)", "epoch2_seconds"), ACCURACY,
        field("test loss (nats per sample or token)", "test_loss", lambda v: num(v, 4)),
        ("runs", column("statuses"))])


def failures_table(data: ReportData) -> Numbers:
    return numbers(data.failures, [("env", column("env")), ("cell", column("cell_key")),
                                   field("repeat", "repeat", str), ("status", column("status")),
                                   ("reason", lambda f: str(f["error"] or "—"))])


SECTION = Section(
    name="cells",
    title="Cells",
    paragraphs=[CI_METHOD + ". Contended runs are left out of every number unless the report "
                "was made with --include-contended; the runs column counts them."],
    tables=(Table("cells", "Every cell: rates, times and test accuracy over its usable repeats",
                  cells_table, NO_ROWS),
            Table("not_ok", "Runs that did not finish ok", failures_table,
                  "every run finished ok")))
