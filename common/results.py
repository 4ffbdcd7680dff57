"""The results file: one result row (common.schema) per line, JSON Lines.

Each append is one whole line written by one write() under an exclusive lock, then fsynced, so two
grids can share a file and a signal cannot split a row. A line torn by a crash (or a line damaged by
hand) is reported by line number when the file is read, every other row is kept, and the next append
starts on a fresh line.
"""
import fcntl
import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

from common.errors import UserError
from common.schema import row_problem


def new_run_id():
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def check_writable(path):
    """Fail before any cell runs if the results file cannot be written (missing folders are made)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        in_the_way = next((p for p in (path.parent, *path.parent.parents) if p.is_file()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else e.strerror
        raise UserError(f"cannot create the folder {path.parent} for the results file: {reason}; "
                        f"choose another --results path") from None
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise UserError(f"cannot write the results file {path}: {e.strerror}; choose another "
                        f"--results path in a folder you can write to") from None


def append_row(path, row):
    """Append one row as one line: locked, written by a single write() (so a signal cannot split
    it), fsynced. A torn last line left by a crashed writer is ended first, so it stays one
    reported bad line and does not swallow this row."""
    line = (json.dumps(row, default=str) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            if os.write(fd, line) != len(line):
                raise OSError("short write (is the disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock
    except OSError as e:
        raise UserError(f"cannot append to the results file {path}: {e.strerror or e}; the rows "
                        f"already in it are intact; fix the cause and run the same command again "
                        f"(it resumes)") from None


def read_rows(path):
    """(rows, problems): every valid row, and '<path>: line N: what is wrong' for the others
    (common.schema.row_problem is the one judge of a row)."""
    rows, problems = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{path}: line {number}: not valid JSON ({e.msg}); line skipped")
                continue
            problem = row_problem(row)
            if problem:
                problems.append(f"{path}: line {number}: not a result row: {problem}; line skipped")
                continue
            rows.append(row)
    return rows, problems


FLATTENED = {"env": "env_", "backend_details": "detail_"}  # one column per key, prefixed


def flat_table(rows):
    """Rows as flat records for CSV / Parquet / pandas: epoch fields as epoch1_rate, ...;
    env and backend_details one column per key; other lists and objects as JSON text."""
    flat = []
    for row in rows:
        record = {}
        for key, value in row.items():
            if key == "epochs":
                for epoch in value:
                    for field in ("seconds", "samples", "rate", "loss", "accuracy"):
                        record[f"epoch{epoch['epoch']}_{field}"] = epoch.get(field)
                    record[f"epoch{epoch['epoch']}_contended"] = epoch["contention"]["contended"]
            elif key in FLATTENED:
                record.update({FLATTENED[key] + k: _scalar(v) for k, v in value.items()})
            else:
                record[key] = _scalar(value)
        flat.append(record)
    return flat


def _scalar(value):
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def export(rows, path):
    """Write rows to .csv or .parquet (pandas; pyarrow for Parquet)."""
    import pandas as pd
    frame = pd.DataFrame(flat_table(rows))
    path = Path(path)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        raise UserError(f"cannot export to '{path.suffix}': use a .csv or .parquet file name")
    return path
