"""A cell's process tree: started so that nothing outlives the driver (common.children), found
by the token in its environment, and ended whole (SIGTERM, a grace period, SIGKILL), with Ctrl-C
held meanwhile; its scratch folder, which a later grid removes where the grid that made it was
killed."""
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

KILL_GRACE_SECONDS = 5
SCRATCH_PREFIX = "xbench-cell-"
SCRATCH_OWNER = "xbench-owner.json"  # in a scratch folder: the grid and the cell it belongs to


@dataclass
class Ended:
    """How a cell's processes ended: an exit code (negative: a signal), or a timeout (and whose);
    `status`: the launcher's own word where the processes cannot say it ("unsupported": it could
    not start them as the cell asks; "failed": it lost them), `how` saying why; `cluster`: where
    they ran, as the launcher's engine saw it (the row's `cluster`)."""
    returncode: int | None
    timed_out: bool = False
    how: str = ""
    status: str = ""
    cluster: dict | None = None


def cell_processes(token: str) -> list[int]:
    """PIDs of every process on this machine that carries this cell's XBENCH_CELL token in its
    environment: the whole tree, including processes a launcher moved to a session of its own."""
    marker = f"XBENCH_CELL={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def end_processes(process: subprocess.Popen | None, token: str) -> None:
    """End the cell's processes (`process`, the one a launcher started, where it has one, and
    every process of this machine with the cell's `token`): SIGTERM, a grace period, then SIGKILL
    for what is left (SIGKILL also ends a stopped or hung rank)."""
    def running() -> bool:
        return process is not None and process.poll() is None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = cell_processes(token) + ([process.pid] if running() else [])
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while time.monotonic() < deadline and (running() or cell_processes(token)):
            time.sleep(0.1)
    if process is not None:
        process.wait()


def this_process() -> dict:
    """This process as another can check it is still the same one: host, PID, start time."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time()}


def alive(process: dict) -> bool:
    """Whether the process `this_process()` described lives (one on another machine, through a
    shared folder, cannot be checked: it counts as live); a reused PID is not it."""
    if process.get("host") != socket.gethostname():
        return True
    try:
        return psutil.Process(process["pid"]).create_time() == process["started"]
    except (psutil.Error, KeyError, TypeError):
        return False


@contextlib.contextmanager
def scratch_folder(token: str) -> Iterator[str]:
    """The temporary folder (TMPDIR) of a cell's processes, gone with the cell. It names its grid
    and the cell's token, so that where a SIGKILL of the grid left it, the next grid can prove it
    dead and remove it (`remove_dead_scratch`)."""
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, ignore_cleanup_errors=True) as folder:
        (Path(folder) / SCRATCH_OWNER).write_text(json.dumps({**this_process(), "token": token}))
        yield folder


def remove_dead_scratch() -> list[Path]:
    """Remove the scratch folders whose grid is dead and none of whose cell's processes live (what
    a SIGKILL of a grid left); a folder that does not say whose it is stays. The removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        try:
            owner = json.loads((folder / SCRATCH_OWNER).read_text())
            dead = not alive(owner) and not cell_processes(str(owner["token"]))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
        if dead:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
