"""The one contract every backend follows, and the registry of backends by name.

A backend is a small class (Lightning's strategies are the model): it says whether it can run
here, how its process(es) are launched, and, inside each launched process, how it places and wraps
the model. The framework base classes (pt_backend.base.TorchBackend,
tf_backend.base.TensorFlowBackend) do the common set-up and run the framework's training loop;
a backend class says only what makes it different.

The registry of backends by name is common.backends.registry.
"""
from __future__ import annotations

import abc
import importlib.machinery
import importlib.metadata
import importlib.util
import math
import sys
from typing import TYPE_CHECKING, ClassVar

from xbench.common.errors import Unsupported
from xbench.common.workload import faults
from xbench.common.workload.compression import label as compression_label
from xbench.common.workload.compression import wire_bytes
from xbench.common.workload.data import train_samples
from xbench.common.workload.models import (
    activations_per_sample,
    has_batchnorm,
    parameter_count,
    tensor_shapes,
)

if TYPE_CHECKING:
    from xbench.common.grids.cell import Cell
    from xbench.common.results.schema import Measurement
    from xbench.common.running.job import Job
    from xbench.common.running.placement import Placement



class Backend(abc.ABC):
    """Base class: subclasses set the class attributes and the hooks they need."""

    name: ClassVar[str] = ""
    framework: ClassVar[str] = ""             # "torch" or "tensorflow"
    spans_devices: ClassVar[bool] = True      # False: a single-device reference, 1 device only
    spans_nodes: ClassVar[bool] = False       # True: its ranks can run on several machines
    # How its command is started: once per node ("node": torchrun, or a one-process worker),
    # once per device ("task": a worker per device), or once for the cell ("once": a launcher
    # that starts every rank itself, on every node).
    launch_scope: ClassVar[str] = "node"
    requires: ClassVar[tuple[str, ...]] = ()  # importable modules this backend needs
    install_hint: ClassVar[str] = ""          # what to run when one of them is missing
    # How the library that moves the gradients between replicas tells of its collectives (None:
    # there is none, or none it tells of): the step attribution's waiting and communication
    # (common.measuring.attribution); `collectives_not_counted` says where an untold one's time goes.
    collectives_counted: ClassVar[str | None] = None
    collectives_not_counted: ClassVar[str] = "none: no collective between processes"
    # A process's framework, libraries and data before training (peak RSS of the small model's
    # smoke cells on CPU: 420-460 MB with PyTorch, 690-750 MB with TensorFlow).
    framework_memory_mb: ClassVar[int] = 0
    # The gradient compressions it does (common.workload.compression), and why it does no others.
    compressions: ClassVar[tuple[str, ...]] = ("none",)
    no_compression: ClassVar[str] = "one device: no gradients cross between devices"
    # Whether each rank keeps only a shard of the parameters (the `reshard` setting is its).
    shards_parameters: ClassVar[bool] = False
    # For `xbench predict` (reports.predict): how its gradients cross between devices (the
    # reduction its N-device rows record; see reduction_on), and the most bytes one collective
    # carries (its buckets, fusion buffer or packs; None: every gradient in one), as the library
    # documents them.
    reduction_across_devices: ClassVar[str] = "none"
    collective_message_bytes: ClassVar[int | None] = None

    @classmethod
    def reduction_on(cls, device_type: str) -> str:
        """How its gradients cross between devices of `device_type` ("cpu", "cuda"): what its
        N-device rows record there, known before any ran (xbench predict's what-if)."""
        return cls.reduction_across_devices

    # --- in the runner: can it run here, and how is it launched --------------------------------

    def missing(self) -> str | None:
        """Why this backend cannot run in this installation, or None if it can."""
        absent = [m for m in self.requires if not _importable(m)]
        if absent:
            return f"{', '.join(absent)} not installed; {self.install_hint}"
        return None

    def describe(self) -> str:
        """One line on what this backend will use here (its packages' versions)."""
        return ", ".join(f"{m} {_version(m)}" for m in self.requires)

    def processes(self, cell: Cell) -> int:
        """Processes of the cell on each node (the node's cores are shared out between them)."""
        return 1

    def launch_command(self, cell: Cell, worker_args: list[str], placement: Placement) -> list[str]:
        """The command line run at this backend's launch scope; each rank runs `common.running.worker`.
        `placement`: where the cell's nodes are (common.running.placement.Placement)."""
        return [sys.executable, "-m", "xbench.common.running.worker", *worker_args]

    # --- in each launched process --------------------------------------------------------------

    def devices_per_process(self, cell: Cell) -> int:
        """Devices one process drives: all of them for a one-process backend, else one."""
        return cell.devices // self.processes(cell)

    def memory_estimate(self, cell: Cell) -> int:
        """Bytes of a node's memory the cell's processes there need, before it runs (on a GPU
        the model and activations live on the device; counted here as if on the CPU, the
        conservative case): per process, the framework and data, the sample order and the
        recorded indices, and per device the model with its gradients and Adam's two moments
        and the activations of its batch kept for the backward pass, their gradients and a
        workspace as large."""
        samples = min(train_samples(cell.data, cell.model),
                      cell.max_train_samples or math.inf) * cell.multiple
        per_device = (parameter_count(cell.model) * 4 * 4
                      + cell.per_device_batch * activations_per_sample(cell.model) * 4 * 3)
        per_process = (self.framework_memory_mb * 2**20 + samples * 8 * (cell.epochs + 2)
                       + per_device * self.devices_per_process(cell))
        return int(per_process * self.processes(cell))  # on each node

    # What the backend does with BatchNorm's running statistics across replicas (by its
    # documentation; tests/test_cifar.py checks it): recorded in the rows of models with
    # BatchNorm, since the test accuracy is evaluated with rank 0's statistics.
    batchnorm_statistics = "one replica: its running statistics are its own"

    def batchnorm(self, cell: Cell) -> str | None:
        """batchnorm_statistics where the cell's model has BatchNorm, else None."""
        return self.batchnorm_statistics if has_batchnorm(cell.model) else None

    def unsupported_reason(self, cell: Cell, device_kind: str) -> str | None:
        """Why this backend cannot run `cell` on `device_kind` ("cpu" or "cuda"), or None."""
        return None

    def cannot_launch(self, cell: Cell) -> str | None:
        """Why the runner should not even start `cell` (it asks for what this backend never
        does), or None."""
        if cell.nodes > 1 and not self.spans_nodes:
            return (f"{self.name} runs on one machine: it cannot span {cell.nodes} nodes; "
                    f"pt-ddp, tf-multiworker, hvd-torch and hvd-tf can")
        slow = faults.parse(cell.inject).slow_rank
        ranks = self.processes(cell) * cell.nodes
        if slow is not None and self.devices_per_process(cell) > 1:
            return (f"inject slow-rank: {self.name}'s {cell.devices} replicas share one process, "
                    f"so one of them cannot be slowed alone")
        if slow is not None and slow >= ranks:
            return f"inject slow-rank={slow}: the cell has ranks 0 to {ranks - 1}"
        if cell.reshard != "after-forward" and not self.shards_parameters:
            return (f"reshard {cell.reshard}: {self.name} keeps the whole model on every "
                    f"device, there is nothing to reshard; pt-fsdp shards it")
        if cell.compression not in self.compressions:
            return (f"compression {cell.compression}: {self.name} does "
                    f"{', '.join(self.compressions)}; {self.no_compression}")
        return None

    def choose_device(self, cell: Cell, gpus_seen: int, seen_by: str) -> str:
        """'cuda' or 'cpu' for this cell, given the GPUs the framework sees; Unsupported if the
        cell asks for what this machine lacks, or this backend cannot do it there."""
        if cell.device == "cuda" and gpus_seen == 0:
            raise Unsupported(f"the cell asks for device 'cuda' but {seen_by} sees no CUDA device")
        kind = "cpu" if cell.device == "cpu" or gpus_seen == 0 else "cuda"
        if kind == "cuda" and gpus_seen < cell.devices:  # on this node
            raise Unsupported(f"the cell needs {cell.devices} CUDA devices; {seen_by} sees "
                              f"{gpus_seen}")
        reason = self.unsupported_reason(cell, kind)
        if cell.precision == "tf32" and kind == "cpu":
            reason = ("precision tf32: TF32 is a math mode of NVIDIA GPUs' tensor cores (Ampere "
                      "and later); a CPU computes float32 as float32, which is precision fp32")
        if not self.spans_devices and cell.world > 1:
            reason = f"{self.name} is a single-device reference: it runs on 1 device only"
        if reason:
            raise Unsupported(reason)
        return kind

    def details(self) -> dict:
        """What this backend records of itself in the row: what ran, how it was launched."""
        return {}

    def traffic(self, cell: Cell, reduction: str) -> list[dict]:
        """What crosses between the cell's devices in one optimizer step, all links together
        (`wire` items): by default the gradients as `reduction` (the row's) moves them."""
        devices = cell.world
        size = wire_bytes(tensor_shapes(cell.model), cell.compression, cell.powersgd_rank)
        if reduction == "all-reduce":
            compressed = ("" if cell.compression == "none" else
                          f" ({compression_label(cell.compression, cell.powersgd_rank)})")
            return [wire("gradients", 2 * (devices - 1) * size, "computed",
                         f"ring all-reduce: each of N devices sends 2(N-1)/N of the "
                         f"gradients{compressed}")]
        if reduction == "reduce-to-one":
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
        this backend's collectives ({"all_reduce": {"sizes": [...]}}), see common.measuring.limits; the
        result on rank 0, None on the others."""
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


def _importable(module: str) -> bool:
    """Whether `module` can be found, without importing it or its parent packages (finding
    horovod.tensorflow.mpi_lib by find_spec would import horovod.tensorflow, and TensorFlow
    with it, noise and seconds included)."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for depth in range(2, len(parts) + 1):
            if spec is None or not spec.submodule_search_locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]),
                                                            spec.submodule_search_locations)
    except (ImportError, ValueError):
        return False
    return spec is not None


def _version(module: str) -> str:
    top = module.split(".")[0]
    for distribution in (top, f"{top}-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "?"
