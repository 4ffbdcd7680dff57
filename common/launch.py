"""Where and how a cell's processes start: on this machine (the local launcher, the default), or
as a Slurm job on a cluster's nodes (the Slurm launcher, with Slurm's own commands: sbatch, srun,
squeue, scontrol, scancel, sacct).

Both hand the backend a `Placement` (one reachable host name per node, and ports) and run what
the backend asks for at its launch scope: once per node (torchrun, or the worker of a one-process
backend), once per device (tf-multiworker's workers), or once for the whole cell (horovodrun, which
starts every rank itself). Either way each rank runs `common.worker`, and the runner turns what it
leaves in the cell's folder into the row.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import psutil

from xbench.common import faults
from xbench.common.cell import Cell
from xbench.common.errors import UserError
from xbench.common.machine import cpu_cores
from xbench.common.placement import PLACEMENT_ENV, Placement
from xbench.common.settings import SETTINGS, SLURM

if TYPE_CHECKING:
    from xbench.common.backend import Backend

KILL_GRACE_SECONDS = 5
PR_SET_PDEATHSIG = 1  # linux/prctl.h
SLURM_POLL_SECONDS = 1.0
WATCH_SECONDS = 0.25  # how often a waiting launcher looks at the cell
TOKEN_BUCKET_SECONDS = 0.004  # a capped link's burst: this long at its rate
LEAST_BURST_BYTES = 128 * 1024  # the least burst: a 64 KiB loopback packet fits twice
FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def free_ports(count: int) -> int:
    """The first of `count` consecutive TCP ports free on this machine now."""
    for _ in range(200):
        first = random.randrange(20000, 60000 - count)
        try:
            with contextlib.ExitStack() as stack:
                for port in range(first, first + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError("found no free range of ports for the cell")


def end_with(driver_pid: int, sig: int = signal.SIGTERM):
    """A preexec_fn: the started process gets `sig` when `driver_pid` dies, even by SIGKILL,
    so nothing runs on orphaned (a launcher such as torchrun ends its ranks on SIGTERM)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec():
        libc.prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != driver_pid:  # the driver died before prctl took effect
            os._exit(1)
    return preexec


@contextlib.contextmanager
def signals_held():
    """Hold Ctrl-C and SIGTERM until the block ends (then they act): a second, impatient Ctrl-C
    must not cut short the ending of a cell's processes."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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


@dataclass
class Ended:
    """How a cell's processes ended: an exit code (negative: a signal), or a timeout (and whose)."""
    returncode: int | None
    timed_out: bool = False
    how: str = ""


class Launcher(Protocol):
    """Where a cell's processes run (LocalLauncher, SlurmLauncher): the cores and memory of a
    node there, and `run`, which starts a cell's processes and waits for them."""
    name: str

    @property
    def cores(self) -> int: ...

    @property
    def node_memory_mb(self) -> int: ...

    @property
    def memory_mb(self) -> int:
        """What a cell may use when it starts."""

    def check(self, cells: list[Cell]) -> None:
        """A clear error, before anything runs, for cells this launcher cannot place."""

    def cannot_run(self, cell: Cell) -> str | None:
        """Why this launcher cannot run `cell` here (its row is then unsupported), or None."""

    def run(self, backend: Backend, cell: Cell, worker_args: list[str], environment: dict,
            log: IO[str], token: str, watch: Callable[[], None] = lambda: None) -> Ended:
        """Start the cell's processes and wait for them (`watch()` is called while they run)."""


def make_launcher(settings: dict) -> Launcher:
    """The launcher the grid's settings ask for (common.settings: launcher, slurm_*; absent
    ones take their defaults)."""
    chosen = {s.key: settings.get(s.key) for s in (SETTINGS["launcher"], *SLURM)}
    chosen = {key: SETTINGS[key].default if value is None else value
              for key, value in chosen.items()}
    if chosen["launcher"] == "slurm":
        return SlurmLauncher(chosen["slurm_partition"], chosen["slurm_account"],
                             chosen["slurm_time"], chosen["slurm_gpus_per_node"],
                             chosen["slurm_args"])
    return LocalLauncher()


def capped_link(command: list[str], rate: str, bytes_per_second: float) -> list[str]:
    """`command` run in a network namespace of its own (unshare), whose loopback, the only link
    its processes have, is capped by a token bucket at `rate` (tc's tbf): a slow network on one
    machine (the link fault, common.faults). The bucket holds a few milliseconds of traffic and
    at least two of the loopback's largest packets (64 KiB and their headers: tbf drops a packet
    larger than its bucket, for good), so the cap holds over any collective's transfer."""
    burst = max(LEAST_BURST_BYTES, int(bytes_per_second * TOKEN_BUCKET_SECONDS))
    script = (f"ip link set lo up && tc qdisc add dev lo root tbf rate {rate} burst {burst} "
              f"latency 100ms && exec \"$@\"")
    return ["unshare", "--net", "--", "sh", "-c", script, "xbench-capped-link", *command]


def namespaces_refused() -> str | None:
    """Why this process may not run a cell in a capped network namespace here, or None."""
    missing = [c for c in ("unshare", "ip", "tc") if shutil.which(c) is None]
    if missing:
        return (f"a capped link needs {', '.join(missing)} (util-linux, iproute2), which is "
                f"not on PATH here")
    try:
        tried = subprocess.run(capped_link(["true"], "1gbit", 1.25e8), capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"xbench could not start a network namespace here: {e}"
    if tried.returncode != 0:
        return (f"xbench may not create a network namespace with a capped loopback here (it "
                f"needs root, or CAP_NET_ADMIN): {tried.stderr.strip()[:300]}")
    return None


class LocalLauncher:
    """This machine: one node, the default."""
    name = "local"

    def check(self, cells: list[Cell]) -> None:
        """Nothing to check: a cell that cannot run here becomes its row."""

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

    def run(self, backend: Backend, cell: Cell, worker_args: list[str], environment: dict,
            log, token: str, watch=lambda: None) -> Ended:
        """Start the cell here and wait for it (`watch()` is called while it runs)."""
        placement = Placement(("127.0.0.1",), free_ports(cell.world + 1), (socket.gethostname(),))
        command = backend.launch_command(cell, worker_args, placement)
        if backend.launch_scope == "task":
            command = [sys.executable, "-m", "xbench.common.spawn", str(cell.devices), "--", *command]
        injected = faults.parse(cell.inject)
        if injected.link:
            command = capped_link(command, injected.link, injected.link_bytes_per_second)
        log.write(" ".join(command) + "\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env={**environment, PLACEMENT_ENV: placement.to_env()},
                                   cwd=Path(__file__).resolve().parent.parent,
                                   start_new_session=True, preexec_fn=end_with(os.getpid()))
        deadline = time.monotonic() + cell.timeout
        try:
            while (code := process.poll()) is None:
                if time.monotonic() > deadline:
                    return Ended(None, True, f"no result after the cell's timeout of "
                                             f"{cell.timeout} s; every process of the cell was "
                                             f"killed")
                watch()
                time.sleep(WATCH_SECONDS)
            return Ended(code)
        finally:
            with signals_held():
                end_processes(process, token)


@dataclass
class SlurmLauncher:
    """A Slurm cluster: every cell one job (sbatch) of its nodes, whose batch script runs
    common.slurm_job on the first node; results land in the cell's folder on the shared
    filesystem. A time limit is Slurm's (`time_minutes`, default the cell's timeout rounded up)
    as well as xbench's own (the cell's timeout, counted from when the job starts running)."""
    partition: str = ""
    account: str = ""
    time_minutes: int = 0
    gpus_per_node: int = 0
    extra: str = ""
    name = "slurm"

    def cannot_run(self, cell: Cell) -> str | None:
        if faults.parse(cell.inject).link:
            return ("inject link caps the loopback of one machine's network namespace; a Slurm "
                    "cell's ranks talk over the cluster's network: run it with --launcher local")
        return None

    def check(self, cells: list[Cell]) -> None:
        """The partition has the nodes the cells ask for; a clear error before anything is
        submitted."""
        nodes = self.connect()[0]
        largest = max(c.nodes for c in cells)
        if largest > nodes:
            raise UserError(f"--nodes {largest} is more than partition "
                            f"'{self.partition or self._default}' has ({nodes})")

    def connect(self) -> tuple[int, int, int]:
        """Slurm's commands are here and the partition exists: (its nodes, CPUs and MB of memory
        of its smallest node). A clear error otherwise."""
        if hasattr(self, "_found"):
            return self._found
        missing = [c for c in ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
                   if shutil.which(c) is None]
        if missing:
            raise UserError(f"--launcher slurm needs Slurm's commands, and {', '.join(missing)} "
                            f"is not on PATH here; run xbench on a cluster's login node, or use "
                            f"--launcher local")
        partitions = self.partitions()
        if not partitions:
            raise UserError("Slurm answers but lists no partition (sinfo); is the cluster up?")
        self._default = next(iter(partitions))
        wanted = self.partition or self._default
        if wanted not in partitions:
            raise UserError(f"Slurm has no partition '{self.partition}'; it has "
                            f"{', '.join(partitions)}")
        self._found = partitions[wanted]
        return self._found

    @staticmethod
    def partitions() -> dict[str, tuple[int, int, int]]:
        """{partition: (nodes, CPUs and MB of memory of its smallest node)}, the default
        partition first."""
        out = _slurm(["sinfo", "-h", "-o", "%P %D %c %m"]).splitlines()
        found = {}
        for line in sorted(out, key=lambda line: not line.split()[0].endswith("*")):
            name, nodes, cpus, memory = line.split()[:4]
            name = name.rstrip("*")
            have = found.get(name, (0, math.inf, math.inf))
            found[name] = (have[0] + int(nodes), min(have[1], int(cpus.rstrip("+"))),
                           min(have[2], int(memory.rstrip("+"))))
        return found

    @property
    def cores(self) -> int:
        return self.connect()[1]

    @property
    def node_memory_mb(self) -> int:
        return self.connect()[2]

    @property
    def memory_mb(self) -> int:
        return self.node_memory_mb

    def sbatch_command(self, cell: Cell, backend: Backend, script: Path, log: Path) -> list[str]:
        minutes = self.time_minutes or math.ceil(cell.timeout / 60)
        tasks = cell.devices if backend.launch_scope == "task" else 1
        command = ["sbatch", "--parsable", f"--job-name=xbench-{cell.backend}",
                   f"--nodes={cell.nodes}", f"--ntasks-per-node={tasks}",
                   f"--time={minutes}", f"--output={log}", "--open-mode=append",
                   f"--chdir={Path(__file__).resolve().parent.parent}"]
        gpus = self.gpus_per_node or (cell.devices if cell.device == "cuda" else 0)
        command += [f"--partition={self.partition}"] * bool(self.partition)
        command += [f"--account={self.account}"] * bool(self.account)
        command += [f"--gpus-per-node={gpus}"] * bool(gpus)
        return [*command, *self.extra.split(), str(script)]

    def run(self, backend: Backend, cell: Cell, worker_args: list[str], environment: dict,
            log, token: str, watch=lambda: None) -> Ended:
        """Submit the cell's job and wait for it (`watch()` is called while it runs)."""
        script = Path(worker_args[1]) / "job.sh"
        script.write_text(f"#!/bin/bash\nexec {sys.executable} -m xbench.common.slurm_job "
                          f"{' '.join(worker_args)}\n")
        command = self.sbatch_command(cell, backend, script, Path(log.name))
        log.write(" ".join(command) + "\n")
        log.flush()
        job = _slurm(command, env=environment).strip().split(";")[0]
        try:
            return self.wait(job, cell, watch)
        except BaseException:
            with signals_held():
                self.cancel(job)
            raise

    def wait(self, job: str, cell: Cell, watch) -> Ended:
        """Until the job ends: its final state, or xbench's own timeout (then it is cancelled)."""
        started = None
        while True:
            watch()
            state = job_state(job)
            if state["JobState"] in FINISHED:
                return ended(state, cell)
            if state["JobState"] == "RUNNING" and started is None:
                started = time.monotonic()
            if started is not None and time.monotonic() - started > cell.timeout:
                self.cancel(job)
                return Ended(None, True, f"no result after the cell's timeout of {cell.timeout} s "
                                         f"(xbench's own); Slurm job {job} was cancelled")
            time.sleep(SLURM_POLL_SECONDS)

    @staticmethod
    def cancel(job: str) -> None:
        """scancel, then wait until Slurm says the job has ended (at most a minute)."""
        subprocess.run(["scancel", job], capture_output=True, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and job_state(job)["JobState"] not in FINISHED:
            time.sleep(SLURM_POLL_SECONDS)


def _slurm(command: list[str], env: dict | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    if done.returncode != 0:
        raise UserError(f"{' '.join(command[:2])} failed: {done.stderr.strip() or done.stdout}")
    return done.stdout


def job_state(job: str) -> dict:
    """{JobState, ExitCode, Reason, ...} of a Slurm job: from scontrol while Slurm remembers it,
    else from sacct (the cluster's accounting), else UNKNOWN."""
    done = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                          text=True, timeout=60)
    if done.returncode == 0 and done.stdout.strip():
        return dict(field.split("=", 1) for field in done.stdout.split() if "=" in field)
    done = subprocess.run(["sacct", "-j", job, "-X", "-n", "-P", "-o", "State,ExitCode,Reason"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode == 0 and done.stdout.strip():
        state, code, reason = (done.stdout.splitlines()[0].split("|") + ["", "", ""])[:3]
        return {"JobState": state.split()[0], "ExitCode": code, "Reason": reason}
    return {"JobState": "UNKNOWN", "ExitCode": "", "Reason": "Slurm no longer knows the job"}


def ended(state: dict, cell: Cell) -> Ended:
    """Ended from a finished job's state."""
    name, reason = state["JobState"], state.get("Reason", "")
    code, _, sig = state.get("ExitCode", "0:0").partition(":")
    if name == "COMPLETED":
        return Ended(0)
    if name in ("TIMEOUT", "DEADLINE"):
        return Ended(None, True, f"Slurm's time limit ended the job ({reason}); every process of "
                                 f"the cell was killed")
    if name == "CANCELLED":
        return Ended(-signal.SIGTERM, False, f"Slurm cancelled the job ({reason})")
    if sig and sig != "0":
        return Ended(-int(sig), False, f"Slurm job {name} ({reason})")
    return Ended(int(code or 1) or 1, False, f"Slurm job {name} ({reason})")
