"""The results file: one result row (common.results.schema) per line, JSON Lines.

Each append is one whole line written by one write() under an exclusive lock, then fsynced, so two
grids can share a file and their rows never interleave. A write can still be cut short (SIGKILL or
a power cut in the middle of a large row): a torn line, like any damaged line, is reported by line
number when the file is read and skipped (resume runs its cell again), every other row is kept,
and the next append starts on a fresh line.
"""
import contextlib
import errno
import fcntl
import json
import os
import stat
import sys
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from xbench.common.errors import UserError
from xbench.common.results.outputs import whole_file, writable_file
from xbench.common.results.schema import row_problem
from xbench.common.results.upgrades import upgrade


def new_run_id():
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def check_results_path(path) -> Path:
    """The results file as an absolute path, checked before any cell runs: a regular file (or one
    to be made) that is not a link, in a folder that exists or can be made and written; its log
    folder `<results>.logs` likewise."""
    text = str(path)
    if "\0" in text:
        raise UserError("the --results path contains a NUL character")
    path = Path(os.path.abspath(text))
    for target, kind in ((path, "file"), (Path(f"{path}.logs"), "folder")):
        if target.is_symlink():
            raise UserError(f"{target} is a symbolic link; xbench writes only to a real {kind}: "
                            f"give the path it points to, or another --results path")
        if target.exists() and not (target.is_file() if kind == "file" else target.is_dir()):
            raise UserError(f"{target} exists and is not a regular {kind} (a device, a pipe or "
                            f"a socket cannot hold results); choose another --results path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        in_the_way = next((p for p in (path.parent, *path.parent.parents) if p.is_file()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else e.strerror
        raise UserError(f"cannot create the folder {path.parent} for the results file: {reason}; "
                        f"choose another --results path") from None
    try:
        if path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW))
        else:  # a file made and removed again: nothing is left behind if the grid stops early
            tempfile.TemporaryFile(dir=path.parent).close()
    except OSError as e:
        raise UserError(f"cannot write the results file {path}: {e.strerror}; choose another "
                        f"--results path in a folder you can write to") from None
    return path


def append_row(path, row):
    """Append one row as one line: under an exclusive lock, by a single write(), then fsynced.
    A torn last line left by a crashed writer is ended first, so it stays one reported bad line
    and does not swallow this row. If the line cannot be written whole (a full disk, a file size
    limit), what was written of it is cut off again and the row is kept in a side file, named in
    the error, so that no trained cell is lost."""
    line = (json.dumps(row, default=str) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        raise UserError(f"cannot open the results file {path}: {e.strerror}; "
                        f"{keep_unwritten(path, line)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            if os.write(fd, line) != len(line):
                raise OSError(errno.ENOSPC, "a short write (is the disk full?)")
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise UserError(f"cannot append to the results file {path}: {e.strerror or e}; the "
                            f"rows already in it are intact; "
                            f"{keep_unwritten(path, line)}") from None
    finally:
        os.close(fd)  # closing releases the lock


def unsaved_path(path) -> Path:
    """Where a row the results file `path` could not take is kept first: beside it."""
    return Path(f"{path}.unsaved.jsonl")


def keep_unwritten(path, line):
    """Save a row the results file could not take: beside it, else in the temporary folder, else
    on standard error. Returns what to tell the user."""
    for side in (unsaved_path(path),
                 Path(tempfile.gettempdir()) / f"xbench-unsaved-{os.getpid()}.jsonl"):
        try:
            with open(side, "ab") as f:
                f.write(line.lstrip(b"\n"))
                f.flush()
                os.fsync(f.fileno())
            return (f"the row was kept in {side}: once the cause is fixed, append it to the "
                    f"results (cat {side} >> {path}) or run the same command again (it resumes)")
        except OSError:
            continue
    sys.stderr.write(line.decode())
    return "the row could not be saved anywhere and was printed on standard error above"


def read_rows(path, seen: set | None = None):
    """(rows, problems): every valid row, and '<path>: line N: what is wrong' for the others
    (common.results.schema.row_problem is the one judge of a row). A row is one run of one cell,
    identified by (run id, cell key, repeat): a copy of a row (a file appended to itself, the
    same file given twice: pass the same `seen` across files) is dropped and counted, never
    read as a repeat."""
    rows, problems = read_json_lines(path, row_problem, "a result row", upgrade)
    seen = set() if seen is None else seen
    unique = []
    for row in rows:
        identity = row_identity(row)
        if identity not in seen:
            seen.add(identity)
            unique.append(row)
    if len(unique) < len(rows):
        problems.append(f"{path}: {len(rows) - len(unique)} duplicate row(s) dropped: the same "
                        f"run id, cell and repeat as a row read before (a copy is not a repeat)")
    return unique, problems


def row_identity(row: dict) -> tuple[str, str, int]:
    """What names one run of one cell: its run id, cell key and repeat."""
    return row["run_id"], row["cell_key"], row["repeat"]


def results_files(folder: Path) -> list[Path]:
    """The regular *.jsonl files in `folder` (a pipe or a device named so is never opened)."""
    return sorted(p for p in Path(folder).glob("*.jsonl") if p.is_file())


def open_regular(path, reads: str, **options) -> IO:
    """`path` opened as open() does with `options`, where it is a regular file; a UserError
    otherwise, decided before a byte is read: a pipe would never end and a device (/dev/zero)
    never stop. `reads` says what xbench reads only from files (for the message)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UserError(f"{path} is not a regular file (a pipe, a device or a folder): xbench "
                        f"reads {reads} only from files")
    os.set_blocking(descriptor, True)
    return open(descriptor, **options)


def read_json_lines(path, problem_of, kind, convert=lambda value: value):
    """(values, problems) of a JSON Lines file: each line's value (`convert`ed) where
    `problem_of(value)` finds nothing wrong, and '<path>: line N: what is wrong' for the others
    (blank lines skipped). Only a regular file is read: a pipe would never end."""
    values, problems = [], []
    with open_regular(path, "results and probes", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{path}: line {number}: not valid JSON ({e.msg}); line skipped")
                continue
            except (RecursionError, ValueError) as e:  # ValueError: an integer of 4,300+ digits
                what = "nested too deeply" if isinstance(e, RecursionError) else "a number too long"
                problems.append(f"{path}: line {number}: {what} to be {kind}; line skipped")
                continue
            value = convert(value)
            problem = problem_of(value)
            if problem:
                problems.append(f"{path}: line {number}: not {kind}: {problem}; line skipped")
                continue
            values.append(value)
    return values, problems


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
                    for field in ("seconds", "samples", "rate", "loss", "accuracy",
                                  "input_seconds"):
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


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame):
    """A copy of `frame` whose text cells a spreadsheet will not run as formulas: a cell that
    starts with = + - @ or a tab gets a leading apostrophe (OWASP's advice for CSV injection)."""
    frame = frame.copy()
    for column in frame.columns:
        if any(isinstance(v, str) for v in frame[column]):
            frame[column] = [f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_START) else v
                             for v in frame[column]]
    return frame


EXPORT_SUFFIXES = (".csv", ".parquet")


def check_export_target(path) -> Path:
    """The export's file, checked before anything is read: a known suffix, a folder that takes
    it."""
    path = Path(path)
    if path.suffix not in EXPORT_SUFFIXES:
        raise UserError(f"cannot export to '{path.suffix}': use a .csv or .parquet file name")
    return writable_file(path, "the export")


def export(rows, path):
    """Write rows to .csv or .parquet (pandas; pyarrow for Parquet)."""
    import pandas as pd
    frame = pd.DataFrame(flat_table(rows))
    path = check_export_target(path)
    with whole_file(path) as partial:
        if path.suffix == ".csv":
            csv_safe(frame).to_csv(partial, index=False)
        else:
            frame.to_parquet(partial, index=False)
    return path
