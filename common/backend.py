"""The one contract every backend follows, and the registry of backends by name.

A backend is a small class (Lightning's strategies are the model): it says whether it can run here,
how its process(es) are launched, and, inside each launched process, how to train one cell.
The registry holds import paths, not classes, so that `common` never imports a framework: the
class is imported only when a cell of that backend is asked for.
"""
import abc
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import time
from dataclasses import dataclass

from common.errors import UserError, did_you_mean

BACKENDS = {
    "pt-dp": "pt_backend.dp:DataParallelBackend",
    "pt-ddp": "pt_backend.ddp:DistributedDataParallelBackend",
    "tf-mirrored": "tf_backend.mirrored:MirroredBackend",
    "hvd-torch": "pt_backend.hvd:HorovodTorchBackend",
    "hvd-tf": "tf_backend.hvd:HorovodTensorFlowBackend",
}


@dataclass
class Job:
    """What each launched process is given: the cell, its data, its share of the cores, and the
    wall-clock time (`time.time()`) at which the runner launched it (start-up is counted from it)."""
    cell: object
    data: object
    threads: int
    launched_at: float

    def startup_seconds(self):
        return time.time() - self.launched_at


class Backend(abc.ABC):
    """Base class: subclasses set the class attributes and implement `train`."""

    name = ""
    framework = ""            # "torch" or "tensorflow"
    requires = ()             # importable modules this backend needs
    install_hint = ""         # what to run when one of them is missing

    def missing(self):
        """Why this backend cannot run in this installation, or None if it can."""
        absent = [m for m in self.requires if not _importable(m)]
        if absent:
            return f"{', '.join(absent)} not installed; {self.install_hint}"
        return None

    def describe(self):
        """One line on what this backend will use here (its packages' versions)."""
        return ", ".join(f"{m} {_version(m)}" for m in self.requires)

    def processes(self, cell):
        """Processes one cell runs in (threads are shared out between them)."""
        return 1

    def launch_command(self, cell, worker_args):
        """The command line that starts this cell's process(es); each runs `common.worker`."""
        return [sys.executable, "-m", "common.worker", *worker_args]

    @abc.abstractmethod
    def train(self, job):
        """Train `job.cell` inside a launched process.

        Returns the measurements (a dict of result-row fields) on the reporting rank and None on
        the others. Raise `common.errors.Unsupported` when this machine cannot run the cell.
        """

    def is_out_of_memory(self, error):
        """True if `error` is this framework's out-of-memory error."""
        return isinstance(error, MemoryError)


def _importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(module):
    top = module.split(".")[0]
    for distribution in (top, f"{top}-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "?"


def get_backend(name):
    """The backend registered under `name` (a clear error for unknown names)."""
    if name not in BACKENDS:
        raise UserError(f"unknown backend '{name}'{did_you_mean(name, BACKENDS)}; "
                        f"choose from {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def cpu_cores():
    """Cores this process may use (respects taskset / cgroup affinity)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_process(processes):
    """N processes share the cores: max(1, cores // N) threads each."""
    return max(1, cpu_cores() // processes)
