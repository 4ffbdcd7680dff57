"""A cell's process tree: started so that nothing outlives the driver (common.children), found
by the token in its environment, and ended whole (SIGTERM, a grace period, SIGKILL), with Ctrl-C
held meanwhile."""
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

KILL_GRACE_SECONDS = 5


@dataclass
class Ended:
    """How a cell's processes ended: an exit code (negative: a signal), or a timeout (and whose)."""
    returncode: int | None
    timed_out: bool = False
    how: str = ""


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


def end_processes(process: subprocess.Popen, token: str) -> None:
    """End the cell's processes: SIGTERM, a grace period, then SIGKILL for what is left
    (SIGKILL also ends a stopped or hung rank)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = cell_processes(token)
        if process.poll() is None:
            targets.append(process.pid)
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while time.monotonic() < deadline and (process.poll() is None or cell_processes(token)):
            time.sleep(0.1)
    process.wait()
