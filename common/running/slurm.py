"""The Slurm launcher: every cell one Slurm job on a cluster's nodes, with Slurm's own commands
(sbatch, srun, squeue, scontrol, scancel, sacct); its batch script is common.running.slurm_job."""
from __future__ import annotations

import math
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xbench.common.children import signals_held
from xbench.common.errors import UserError
from xbench.common.grids.cell import Cell
from xbench.common.running.processes import Ended
from xbench.common.workload import faults

if TYPE_CHECKING:
    from xbench.common.backends.start import Start

SLURM_POLL_SECONDS = 1.0
FINISHED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
REPO = Path(__file__).resolve().parents[2]  # where a job's processes start (python -m xbench...)


@dataclass
class SlurmLauncher:
    """A Slurm cluster: every cell one job (sbatch) of its nodes, whose batch script runs
    common.running.slurm_job on the first node; results land in the cell's folder on the shared
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

    def load(self) -> None:
        """The nodes' load cannot be seen before a job holds them."""

    def close(self) -> None:
        """Nothing to end: each cell's job ended with it."""

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

    def sbatch_command(self, cell: Cell, backend: Start, script: Path, log: Path) -> list[str]:
        minutes = self.time_minutes or math.ceil(cell.timeout / 60)
        command = ["sbatch", "--parsable", f"--job-name=xbench-{cell.backend}",
                   f"--nodes={cell.nodes}", f"--ntasks-per-node={backend.scope.tasks(cell)}",
                   f"--time={minutes}", f"--output={log}", "--open-mode=append",
                   f"--chdir={REPO}"]
        gpus = self.gpus_per_node or (cell.devices if cell.device == "cuda" else 0)
        command += [f"--partition={self.partition}"] * bool(self.partition)
        command += [f"--account={self.account}"] * bool(self.account)
        command += [f"--gpus-per-node={gpus}"] * bool(gpus)
        return [*command, *self.extra.split(), str(script)]

    def run(self, backend: Start, cell: Cell, worker_args: list[str], environment: dict,
            log, token: str, watch=lambda: None) -> Ended:
        """Submit the cell's job and wait for it (`watch()` is called while it runs)."""
        script = Path(worker_args[1]) / "job.sh"
        script.write_text(f"#!/bin/bash\nexec {sys.executable} -m xbench.common.running.slurm_job "
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
