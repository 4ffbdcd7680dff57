"""The plain-text table printed at the end of a grid (devices: per node)."""

COLUMNS = (("backend", 14), ("model", 5), ("mult", 4), ("batch", 5), ("nodes", 5), ("dev", 3),
           ("rep", 3),
           ("status", 11), ("ep1 s", 7), ("ep2 s", 7), ("ep2 samples/s", 13), ("test acc", 8))


def format_rows(rows):
    lines = ["  ".join(f"{name:>{width}}" for name, width in COLUMNS)]
    for row in rows:
        epochs = {e["epoch"]: e for e in row.get("epochs") or []}
        first, second = epochs.get(1, {}), epochs.get(2, {})
        values = (row["backend"], row["model"], row["dataset_multiple"], row["global_batch"],
                  row["nodes"], row["devices"], row["repeat"], row["status"], _num(first.get("seconds"), 2),
                  _num(second.get("seconds"), 2), _num(second.get("rate"), 0),
                  _num(row.get("test_accuracy"), 4))
        lines.append("  ".join(f"{str(v):>{w}}" for v, (_, w) in zip(values, COLUMNS)))
    return "\n".join(lines)


def _num(value, digits):
    return "-" if value is None else f"{value:,.{digits}f}"
