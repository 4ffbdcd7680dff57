"""Where a command writes, checked before its work starts: a folder it can make and write in, a
file it can create, never a file the command reads. A location that cannot take the output is one
line (UserError), never a traceback after minutes of measuring."""
import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from xbench.common.errors import UserError


def writable_folder(folder, what: str) -> Path:
    """`folder`, made if missing, once a file could be written in it; else a UserError saying
    why `what` ('the report') cannot go there."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        in_the_way = next((p for p in (folder, *folder.parents) if p.is_file()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else e.strerror
        raise UserError(f"cannot write {what} to {folder}: {reason}; choose another folder") \
            from None
    return folder


def writable_file(path, what: str) -> Path:
    """`path` once a file could be written in its folder (which must exist) and it is not
    something other than a regular file; else a UserError saying why `what` cannot go there."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise UserError(f"cannot write {what} to {path}: it exists and is not a regular file")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"cannot write {what} to {path}: the file is read-only")
    if not path.parent.is_dir():
        in_the_way = next((p for p in path.parents if p.is_file()), None)
        reason = (f"{in_the_way} is a file, not a folder" if in_the_way
                  else f"the folder {path.parent} does not exist")
        raise UserError(f"cannot write {what} to {path}: {reason}")
    try:
        tempfile.TemporaryFile(dir=path.parent).close()
    except OSError as e:
        raise UserError(f"cannot write {what} to {path}: {e.strerror}") from None
    return path


def not_read(written: Iterable, read: Mapping, option: str, kind: str = "file") -> None:
    """Nothing where no file a command writes (`written`) is one it reads (`read`: each path,
    and what it is to the command); else a UserError naming both, before the work starts:
    writing there would replace what the command reads (the results it draws a trace of, the
    grid file that defines the grid). A file under another name (a relative path, a link, a
    hard link) is the same file; a file not there yet is none of them. `option`: where the user
    chose the output, and `kind` what it takes (a file, a folder)."""
    for path in map(Path, written):
        for source, what in read.items():
            if source is not None and _same_file(path, Path(source)):
                named = "" if str(source) == str(path) else f" ({source})"
                raise UserError(f"{option}: {path} is {what}{named}, which this command reads: "
                                f"writing there would damage it; give {option} another {kind}")


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except (OSError, ValueError):  # either is not there (or cannot be looked at): not one file
        return False


@contextlib.contextmanager
def whole_file(path) -> Iterator[Path]:
    """A temporary name beside `path` to write to, renamed to `path` once written whole: a full
    disk or a file-size limit midway leaves no truncated file under its name, only the error
    (a UserError naming the file), and the temporary name removed."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        yield partial
        os.replace(partial, path)
    except BaseException as e:  # Ctrl-C or a failure midway too: no partial file stays behind
        with contextlib.suppress(OSError):
            partial.unlink()
        if isinstance(e, OSError):
            raise UserError(f"cannot write {path}: {e.strerror or e}; nothing half-written "
                            f"was left under its name") from None
        raise
