"""The contract of what runs in a backend's processes.

A backend is a small class (Lightning's strategies are the model): inside each launched process,
it places and wraps the model and trains. What it is (its traits) and how its processes start
are framework-free and apart (common.backends.traits, launch_scopes, start). The framework
base classes (pt_backend.base.TorchBackend, tf_backend.base.TensorFlowBackend) do the common
set-up and run the framework's training loop; a backend class says only what makes it different.
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

from xbench.common.backends.protocol import ALL_REDUCE, REDUCE_TO_ONE
from xbench.common.backends.start import Start
from xbench.common.backends.traits import TRAITS, Traits
from xbench.common.errors import Unsupported
from xbench.common.workload.compression import label as compression_label
from xbench.common.workload.compression import wire_bytes

if TYPE_CHECKING:
    from xbench.common.grids.cell import Cell
    from xbench.common.results.schema import Measurement
    from xbench.common.running.job import Job
    from xbench.common.workload.model import Model


class Backend(abc.ABC):
    """Base class of what runs in a backend's processes: subclasses set `name` and the hooks
    they need; `traits` is the backend's entry in the table (common.backends.traits)."""

    name: ClassVar[str] = ""
    traits: ClassVar[Traits]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            cls.traits = TRAITS[cls.name]

    @property
    def start(self) -> Start:
        """How the runner starts it (what a process needs of that: devices per process)."""
        return Start(self.traits)

    def devices_per_process(self, cell: Cell) -> int:
        """Devices this process drives: all of the node's for a one-process backend, else one."""
        return self.start.devices_per_process(cell)

    def choose_device(self, cell: Cell, gpus_seen: int, seen_by: str) -> str:
        """'cuda' or 'cpu' for this cell, given the GPUs the framework sees; Unsupported if the
        cell asks for what this machine lacks, or this backend cannot do it there."""
        if cell.device == "cuda" and gpus_seen == 0:
            raise Unsupported(f"the cell asks for device 'cuda' but {seen_by} sees no CUDA device")
        kind = "cpu" if cell.device == "cpu" or gpus_seen == 0 else "cuda"
        if kind == "cuda" and gpus_seen < cell.devices:  # on this node
            raise Unsupported(f"the cell needs {cell.devices} CUDA devices; {seen_by} sees "
                              f"{gpus_seen}")
        reason = self.start.unsupported_on(cell, kind)
        if reason:
            raise Unsupported(reason)
        return kind

    def details(self) -> dict:
        """What this backend records of itself in the row: what ran, how it was launched."""
        return {}

    def traffic(self, cell: Cell, model: Model, reduction: str) -> list[dict]:
        """What crosses between the cell's devices in one optimizer step, all links together
        (`wire` items): by default the gradients of the cell's `model` as `reduction` (the
        row's) moves them, as many times a step as the cell syncs them (accumulate_sync each:
        once per micro-batch)."""
        devices = cell.world
        size = cell.syncs_per_step * wire_bytes(model.tensor_shapes(self.traits.framework.name),
                                                cell.compression, cell.powersgd_rank)
        if reduction == ALL_REDUCE:
            compressed = ("" if cell.compression == "none" else
                          f" ({compression_label(cell.compression, cell.powersgd_rank)})")
            return [wire("gradients", 2 * (devices - 1) * size, "computed",
                         f"ring all-reduce: each of N devices sends 2(N-1)/N of the "
                         f"gradients{compressed}")]
        if reduction == REDUCE_TO_ONE:
            return [wire("gradients", 2 * (devices - 1) * size, "computed",
                         "N-1 copies to the reducing device, the sum copied back to N-1")]
        return []

    @abc.abstractmethod
    def train(self, job: Job) -> Measurement | None:
        """Train `job.cell` inside a launched process: the measurement on the reporting rank,
        None on the others. Raises `common.errors.Unsupported` when this machine cannot run it."""

    def probe(self, cell: Cell, threads_per_device: int, request: dict) -> dict | None:
        """For `xbench probe`, inside a launched process set up as for training `cell`: the
        framework's matmul rates (`request` {"matmul": {...}}) or its all-reduce times through
        this backend's collectives ({"all_reduce": {"sizes": [...]}}), see common.measuring.peaks;
        the result on rank 0, None on the others."""
        raise Unsupported(f"{self.name} has no probe")

    def profile(self, cell: Cell, threads_per_device: int, request: dict) -> dict:
        """For `xbench profile`, inside a launched process set up as for training `cell` on one
        device: the seconds of each pass of the units and of the step (common.running.profile)."""
        raise Unsupported(f"{self.name} has no profile")

    def is_out_of_memory(self, error: BaseException) -> bool:
        """True if `error` is this framework's out-of-memory error."""
        return isinstance(error, MemoryError)

    def bound_tensor_memory(self, megabytes: int) -> bool:
        """Called before the framework is imported in a cell with memory_limit_mb: True if the
        framework's own allocator now holds its tensors to `megabytes` (and raises its
        out-of-memory error beyond); False if the worker's data-segment limit (RLIMIT_DATA) is
        the bound, as it is for a framework that raises MemoryError when it is reached."""
        return False


def wire(what: str, size: float, how: str, basis: str) -> dict:
    """One item of Backend.traffic: bytes per step, 'counted' where the framework let xbench count
    them, 'computed' from the model and the backend's documented protocol otherwise."""
    return {"what": what, "bytes": int(size), "how": how, "basis": basis}
