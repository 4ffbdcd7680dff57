"""Cells: every cell's rates, times and test accuracy over its usable repeats, and the runs that
did not finish ok."""
from xbench.reports.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Section, Table
from xbench.reports.stats import CI_METHOD
from xbench.reports.tables import WHO, accuracy_text, batch_text, bounds, column, num, table


def cells_table(data: ReportData):
    """Every cell: n, the epoch-1 and epoch-2 rates (samples / mean epoch time) with the 95%
    interval of the epoch-2 rate, the epoch-2 time's mean and std, test accuracy, the runs."""
    return table(data.cells, [
        *WHO, ("multiple", lambda c: f"×{c['dataset_multiple']}"), ("batch", batch_text),
        ("global batch", column("global_batch")),
        ("per-device batch", column("per_device_batch")), ("devices", column("devices")),
        ("threads/device", column("threads_per_device", num)), ("n", column("n")),
        ("epoch-1 rate (samples/s)", column("epoch1_rate", num)),
        ("epoch-2 rate (samples/s)", column("epoch2_rate", num)),
        ("epoch-2 rate 95% CI", lambda c: bounds(c["epoch2_rate_low"], c["epoch2_rate_high"])),
        ("epoch-2 time (s)", column("epoch2_seconds", num)),
        ("test accuracy, 95% CI", accuracy_text),
        ("test loss (nats per sample or token)", column("test_loss", lambda v: num(v, 4))),
        ("runs", column("statuses"))])


def failures_table(data: ReportData):
    return table(data.failures, [("env", column("env")), ("cell", column("cell_key")),
                                 ("repeat", column("repeat")), ("status", column("status")),
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
