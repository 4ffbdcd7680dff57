"""The plain-text table printed at the end of a grid (devices: per node)."""
from xbench.common.grids.settings import SETTINGS

COLUMNS = (("backend", 14), ("model", 5), ("mult", 4), ("batch", 5), ("nodes", 5), ("dev", 3),
           ("rep", 3),
           ("status", 11), ("ep1 s", 7), ("ep2 s", 7), ("ep2 samples/s", 13), ("test acc", 8),
           ("test loss", 9))
SHOWN = {"backend", "model", "dataset_multiple", "global_batch", "nodes", "devices"}
VARYING = "settings that differ"  # the last column, where the rows' other settings differ


def format_rows(rows):
    """One line per row; where rows differ in a setting the columns do not show (compression,
    inject, optimizer...), a last column names each row's value of it, so no two lines of
    different cells look alike."""
    varying = varying_settings(rows)
    header = "  ".join(f"{name:>{width}}" for name, width in COLUMNS)
    lines = [header + (f"  {VARYING}" if varying else "")]
    for row in rows:
        epochs = {e["epoch"]: e for e in row.get("epochs") or []}
        first, second = epochs.get(1, {}), epochs.get(2, {})
        values = (row["backend"], row["model"], row["dataset_multiple"], row["global_batch"],
                  row["nodes"], row["devices"], row["repeat"], row["status"],
                  _num(first.get("seconds"), 2), _num(second.get("seconds"), 2),
                  _num(second.get("rate"), 0), _num(row.get("test_accuracy"), 4),
                  _num(row.get("test_loss"), 4))
        line = "  ".join(f"{str(v):>{w}}" for v, (_, w) in zip(values, COLUMNS))
        differing = " ".join(f"{field}={row.get(field)}" for field in varying)
        lines.append(line + (f"  {differing}" if varying else ""))
    return "\n".join(lines)


def varying_settings(rows) -> list[str]:
    """The row fields of settings, beyond the columns, whose value is not the same in every row."""
    fields = [s.row_name for s in SETTINGS.values() if s.row_name and s.row_name not in SHOWN]
    return [field for field in fields if len({repr(row.get(field)) for row in rows}) > 1]


def _num(value, digits):
    return "-" if value is None else f"{value:,.{digits}f}"
