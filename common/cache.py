"""What xbench keeps of what it found, so that it need not find it again: a model file's facts
(models/), each framework's count of its own models (counted/), this machine's timings for the
dry run's forecasts (timings/), MNIST unpacked (data/). $XBENCH_CACHE, else ~/.cache/xbench, a
folder per kind. An entry is written whole or not at all, and checked when read (its shape, or
its checksum): one damaged by hand or by the disk is found again, never taken for what it was."""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xbench.common.errors import UserError
from xbench.common.json_shapes import shape_problem

CACHE_ENV = "XBENCH_CACHE"


def cache_root() -> Path:
    """The cache's folder as an absolute path, its links followed as far as they lead: a loop
    of links (or a file where a folder should be) is found when the cache is first written,
    never a traceback here."""
    return Path(os.path.realpath(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "xbench"))


def cache_path(kind: str, name: str) -> Path:
    """Where the entry `name` of `kind` is kept."""
    return cache_root() / kind / name


def read_kept(path: Path, shape: Any) -> tuple[Any, str | None]:
    """(the entry at `path`, None), or (None, why it is not one: absent, unreadable or not of
    `shape`)."""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return None, "not kept"
    except (OSError, ValueError) as e:
        return None, f"unreadable ({e})"
    problem = shape_problem(value, shape, path.stem)
    return (None, problem) if problem else (value, None)


def keep(path: Path, value: Any, what: str) -> None:
    """`value` written to `path` whole; a clear error naming `what` where the folder cannot be
    written."""
    with cache_written(what):
        write_whole(path, json.dumps(value).encode())


def write_whole(path: Path, data: bytes) -> None:
    """`data` written to `path` so that another process reads it complete or not at all."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(data)
    partial.replace(path)


@contextlib.contextmanager
def cache_written(what: str) -> Iterator[None]:
    """What fails to write the cache, said in one line: where it is and how to point it
    elsewhere."""
    try:
        yield
    except OSError as e:
        where = (f"{CACHE_ENV} ({os.environ[CACHE_ENV]})" if os.environ.get(CACHE_ENV)
                 else str(cache_root()))
        raise UserError(f"cannot keep what xbench finds of {what} in {where}: "
                        f"{e.strerror or e} ({e.filename}); point {CACHE_ENV} at a folder "
                        f"xbench may write") from None


def source_digest(*packages: str) -> str:
    """A digest of the source of xbench's `packages` (their folders, found without importing
    them): what was counted of xbench's models is kept only while the code that builds them is
    the same."""
    digest = hashlib.sha256()
    for package in packages:
        [folder] = importlib.util.find_spec(package).submodule_search_locations
        for path in sorted(Path(folder).rglob("*.py")):
            digest.update(f"{package}/{path.relative_to(folder)}".encode() + b"\0"
                          + path.read_bytes())
    return digest.hexdigest()[:16]
