"""The table printed at the end of a grid (devices: per node), sized to its content and within
the terminal's width (common.terminal)."""
from xbench.common.grids.settings import SETTINGS
from xbench.common.terminal import table, width, wrap
from xbench.common.workload.model_file import short_name

SHOWN = {"backend", "model", "dataset_multiple", "global_batch", "nodes", "devices"}
VARYING = "settings that differ"  # the last column, where the rows' other settings differ
CONTENDED = "contended"  # a column where a row was marked contended
# said once above the table, where every row has the same value, rather than on every line
SAID_ONCE = ("model", "mult", "batch", "nodes", "dev", "rep")
# left out first, in this order, where the terminal is too narrow for every column
OPTIONAL = ("test loss", "ep1 s", "test acc")


def format_rows(rows: list[dict], columns: int | None = None) -> str:
    """One line per row within `columns` (the terminal's by default): what every row shares
    said once above it; where rows differ in a setting the columns do not show (compression,
    inject, optimizer...), a last column names each row's value of it, so no two lines of
    different cells look alike; a contended column where a row was marked contended."""
    columns = columns or width()
    if not rows:
        return "no rows"
    varying = varying_settings(rows)
    values = [row_values(row, varying) for row in rows]
    if not any(row.get("contended") for row in rows):
        values = [{k: v for k, v in row.items() if k != CONTENDED} for row in values]
    same = [h for h in SAID_ONCE if len({row[h] for row in values}) == 1]
    headings = [h for h in values[0] if h not in same]
    lines = [wrap("every row: " + ", ".join(f"{h} {values[0][h]}" for h in same), columns)
             ] if same else []
    lines.append(table(headings, [[row[h] for h in headings] for row in values], columns,
                       OPTIONAL))
    contended = sum(bool(row.get("contended")) for row in rows)
    if contended:
        lines.append(wrap(f"{contended} of {len(rows)} rows contended (other work took their "
                          f"cores): reports leave them out unless --include-contended", columns))
    return "\n".join(lines)


def row_values(row: dict, varying: list[str]) -> dict[str, str]:
    """A row's values as the table shows them, by heading (a model file by its file name)."""
    epochs = {e["epoch"]: e for e in row.get("epochs") or []}
    first, second = epochs.get(1, {}), epochs.get(2, {})
    contended = row.get("contended")
    values = {"backend": row["backend"], "model": short_name(row["model"]),
              "mult": row["dataset_multiple"], "batch": row["global_batch"],
              "nodes": row["nodes"], "dev": row["devices"], "rep": row["repeat"],
              "status": row["status"], "ep1 s": _num(first.get("seconds"), 2),
              "ep2 s": _num(second.get("seconds"), 2),
              "ep2 samples/s": _num(second.get("rate"), 0),
              "test acc": _num(row.get("test_accuracy"), 4),
              "test loss": _num(row.get("test_loss"), 4),
              CONTENDED: "-" if contended is None else "yes" if contended else "no"}
    if varying:
        values[VARYING] = " ".join(f"{field}={row.get(field)}" for field in varying)
    return {heading: str(value) for heading, value in values.items()}


def varying_settings(rows) -> list[str]:
    """The row fields of settings, beyond the columns, whose value is not the same in every row."""
    fields = [s.row_name for s in SETTINGS.values() if s.row_name and s.row_name not in SHOWN]
    return [field for field in fields if len({repr(row.get(field)) for row in rows}) > 1]


def _num(value, digits):
    return "-" if value is None else f"{value:,.{digits}f}"
