"""The local launcher: a cell's processes on this machine (the default)."""
from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from xbench.common.children import adopting, end_adopted, end_with, signals_held
from xbench.common.grids.cell import Cell
from xbench.common.machine import cpu_cores
from xbench.common.running.busy_machine import Load, look_at_load
from xbench.common.running.link_cap import capped_link, namespaces_refused
from xbench.common.running.placement import PLACEMENT_ENV, Placement
from xbench.common.running.processes import Ended, end_processes
from xbench.common.workload import faults

if TYPE_CHECKING:
    from xbench.common.backends.start import Start

WATCH_SECONDS = 0.25  # how often a waiting launcher looks at the cell
REPO = Path(__file__).resolve().parents[2]  # where a cell's processes start (python -m xbench...)


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of `count` consecutive TCP ports free on this machine's `host` now ("": on
    every address of it)."""
    for _ in range(200):
        first = random.randrange(20000, 60000 - count)
        if ports_free(first, count, host):
            return first
    raise RuntimeError("found no free range of ports for the cell")


def ports_free(first: int, count: int, host: str = "127.0.0.1") -> bool:
    """Whether the `count` TCP ports from `first` are free on `host` now."""
    try:
        with contextlib.ExitStack() as stack:
            for port in range(first, first + count):
                sock = stack.enter_context(socket.socket())
                sock.bind((host, port))
        return True
    except OSError:
        return False


class LocalLauncher:
    """This machine: one node, the default."""
    name = "local"

    def check(self, cells: list[Cell]) -> None:
        """Nothing to check: a cell that cannot run here becomes its row."""

    def close(self) -> None:
        """Nothing to end: each cell's processes ended with it."""

    def load(self) -> Load:
        return look_at_load()

    def cannot_run(self, cell: Cell) -> str | None:
        if faults.parse(cell.inject).link is None:
            return None
        if not hasattr(self, "_refused"):
            self._refused = namespaces_refused()
        return self._refused and f"inject link: {self._refused}"

    @property
    def cores(self) -> int:
        return cpu_cores()

    @property
    def node_memory_mb(self) -> int:
        return psutil.virtual_memory().total // 2**20

    @property
    def memory_mb(self) -> int:
        """What a cell may use now: the memory available on this machine."""
        return psutil.virtual_memory().available // 2**20

    def run(self, backend: Start, cell: Cell, worker_args: list[str], environment: dict,
            log, token: str, watch=lambda: None) -> Ended:
        """Start the cell here and wait for it (`watch()` is called while it runs)."""
        placement = Placement(("127.0.0.1",), free_ports(cell.world + 1), (socket.gethostname(),))
        command = [*backend.scope.local_wrapper(cell),
                   *backend.launch_command(cell, worker_args, placement)]
        injected = faults.parse(cell.inject)
        if injected.link:
            command = capped_link(command, injected.link, injected.link_bytes_per_second)
        log.write(" ".join(command) + "\n")
        log.flush()
        with adopting() as before:  # what a rank starts in a session of its own stays in reach
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       env={**environment, PLACEMENT_ENV: placement.to_env()},
                                       cwd=REPO,
                                       start_new_session=True, preexec_fn=end_with(os.getpid()))
            try:
                return self.wait(process, cell, watch)
            finally:
                with signals_held():
                    end_processes(process, token)
                    end_adopted(before)

    @staticmethod
    def wait(process: subprocess.Popen, cell: Cell, watch) -> Ended:
        """Until the cell's processes end or its timeout passes (`watch()` called meanwhile)."""
        deadline = time.monotonic() + cell.timeout
        while (code := process.poll()) is None:
            if time.monotonic() > deadline:
                return Ended(None, True, f"no result after the cell's timeout of {cell.timeout} "
                                         f"s; every process of the cell was killed")
            watch()
            time.sleep(WATCH_SECONDS)
        return Ended(code)
