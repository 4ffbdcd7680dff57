"""What the runner needs to start a backend's cell, from its traits alone (no framework): whether
it can run in this installation, how its processes start and how many, what they need of a
node's memory, and why it cannot run a cell (on any device, or on a device kind): the dry run
asks the same questions the run does. A question of the cell's model is given the model, which
the asker resolved once for the cell (common.workload.resolve).
"""
from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import math
from typing import TYPE_CHECKING

from xbench.common.backends.traits import (
    HOROVOD_EXTENSIONS,
    TRAITS,
    Traits,
    in_words,
    spanning_nodes,
)
from xbench.common.workload import faults
from xbench.common.workload.data import train_samples
from xbench.common.workload.precision import LOWER

if TYPE_CHECKING:
    from xbench.common.grids.cell import Cell
    from xbench.common.running.placement import Placement
    from xbench.common.workload.model import Model

WORKER = "xbench.common.running.worker"  # what every rank runs, with the job's arguments


class Start:
    """A backend as the runner starts it (`traits`: common.backends.traits; `scope`: how its
    processes start, common.backends.launch_scopes)."""

    def __init__(self, traits: Traits):
        self.traits, self.scope = traits, traits.start
        self.name, self.framework = traits.name, traits.framework.name

    @classmethod
    def of(cls, name: str) -> Start:
        return cls(TRAITS[name])

    # --- this installation -----------------------------------------------------------------

    def missing(self) -> str | None:
        """Why this backend cannot run in this installation, or None if it can."""
        absent = [m for m in self.traits.requires if not _importable(m)]
        if absent:
            hint = self.traits.install_hint or self.traits.framework.install_hint
            return f"{', '.join(absent)} not installed; {hint}"
        return None

    def what(self) -> str:
        """What this backend is, in one line: its framework, its wrapper and its processes."""
        traits, title = self.traits, self.traits.framework.title
        if not traits.spans_devices:
            return (f"{title} on one device, no wrapper: the reference {title}'s wrappers are "
                    f"measured against")
        nodes = "; spans nodes" if traits.spans_nodes else "; one machine"
        return f"{title} with {traits.wrapper}: {self.scope.started}{nodes}"

    def needs(self) -> str:
        """What it needs installed, and whether it is here (else how to install it)."""
        needed, missing = ", ".join(self.traits.requires), self.missing()
        return f"needs {needed}: " + (missing or f"installed ({self.describe()})")

    def describe(self) -> str:
        """One line on what this backend will use here (its packages' versions)."""
        if self.traits.extension:
            return horovod_described()
        return ", ".join(f"{m} {_version(m)}" for m in self.traits.requires)

    # --- its processes -----------------------------------------------------------------------

    def processes(self, cell: Cell) -> int:
        """Processes of the cell on each node (the node's cores are shared out between them)."""
        return self.scope.processes(cell)

    def devices_per_process(self, cell: Cell) -> int:
        """Devices one process drives: all of them for a one-process backend, else one."""
        return cell.devices // self.processes(cell)

    def launch_command(self, cell: Cell, worker_args: list[str],
                       placement: Placement) -> list[str]:
        """The command line its launch scope's engine runs; each rank runs
        common.running.worker. `placement`: where the cell's nodes are
        (common.running.placement)."""
        return self.scope.command(cell, ["-m", WORKER, *worker_args], placement)

    def memory_estimate(self, cell: Cell, model: Model) -> int:
        """Bytes of a node's memory the cell's processes there need, before it runs: per
        process, the framework and data, the sample order and the recorded indices, and per
        device the model with its gradients and Adam's two moments and the activations of its
        batch kept for the backward pass, their gradients and a workspace as large. A cell
        asked to run on GPUs keeps those on the devices; a cell whose device is `auto` is
        counted as if on the CPU, the conservative case."""
        samples = min(train_samples(cell.data, model),
                      cell.max_train_samples or math.inf) * cell.multiple
        per_device = 0 if cell.device == "cuda" else (
            model.parameters(self.traits.framework.name) * 4 * 4
            + cell.per_device_batch * model.activations_per_sample() * 4 * 3)
        per_process = (self.traits.framework.memory_mb * 2**20 + samples * 8 * (cell.epochs + 2)
                       + per_device * self.devices_per_process(cell))
        return int(per_process * self.processes(cell))  # on each node

    def batchnorm(self, model: Model) -> str | None:
        """What it does with BatchNorm's statistics where the cell's `model` has BatchNorm."""
        has_batchnorm = model.has_batchnorm(self.traits.framework.name)
        return self.traits.batchnorm_statistics if has_batchnorm else None

    # --- what it cannot run --------------------------------------------------------------------

    def cannot_launch(self, cell: Cell, model: Model) -> str | None:
        """Why the runner should not even start `cell` of `model` (it asks for what this
        backend never does, on any device), or None."""
        traits = self.traits
        if cell.nodes > 1 and not traits.spans_nodes:
            return (f"{self.name} runs on one machine: it cannot span {cell.nodes} nodes; "
                    f"{', '.join(spanning_nodes())} can")
        injected = faults.parse(cell.inject)
        slow, ranks = injected.slow_rank, self.scope.ranks(cell)
        if injected.link and ranks == 1:
            return self._nothing_crosses(cell, injected.link)
        if slow is not None and self.devices_per_process(cell) > 1:
            return (f"inject slow-rank: {self.name}'s {cell.devices} replicas share one process, "
                    f"so one of them cannot be slowed alone")
        if slow is not None and slow >= ranks:
            return f"inject slow-rank={slow}: the cell has ranks 0 to {ranks - 1}"
        if cell.reshard != "after-forward" and not traits.shards_parameters:
            sharding = [t.name for t in TRAITS.values() if t.shards_parameters]
            return (f"reshard {cell.reshard}: {self.name} keeps the whole model on every "
                    f"device, there is nothing to reshard; {', '.join(sharding)} shards it")
        if cell.bucket_mb and not traits.bucket_knob:
            return f"bucket_mb {cell.bucket_mb:g}: {self.name} has no buckets: {traits.no_buckets}"
        if cell.accumulate > 1 and cell.accumulate_sync not in traits.sync_modes:
            return (f"accumulate_sync {cell.accumulate_sync}: {self.name} syncs "
                    f"{in_words(list(traits.sync_modes), 'or')} only: {traits.no_sync_mode}")
        if cell.compile == "on" and traits.framework.always_compiled:
            return f"compile on: {traits.framework.always_compiled}"
        if cell.compile == "on" and traits.no_compile:
            return f"compile on: {traits.no_compile}"
        if cell.compression not in traits.compressions:
            return (f"compression {cell.compression}: {self.name} does "
                    f"{', '.join(traits.compressions)}; {traits.no_compression}")
        why_not = model.why_not_served(traits.framework.name, traits.own_models_only)
        if why_not:
            return why_not
        return self._input_refused(cell)

    def _nothing_crosses(self, cell: Cell, link: str) -> str:
        """Why a capped link cannot act on `cell`, a cell of one process: the cap slows the
        loopback between its processes, and its gradients never leave the one."""
        crossing = in_words([t.name for t in TRAITS.values() if t.library], "or")
        where = (f"{self.name}'s {cell.devices} replicas share one process: its gradients cross "
                 f"between them in memory, never over the loopback the link caps"
                 if cell.devices > 1 else f"{self.name} on 1 device is one process, whose "
                 f"gradients cross to no other: the loopback the link caps carries none")
        return (f"inject link={link}: {where} (the gradients of {crossing} on 2 devices or "
                f"more cross it)")

    def _input_refused(self, cell: Cell) -> str | None:
        """The input settings its framework's batches have no use for."""
        framework = self.traits.framework
        if not framework.uses_dataloader and (
                cell.host_memory != "pageable" or cell.loader_workers):
            return (f"host_memory and loader_workers are PyTorch DataLoader settings; "
                    f"{framework.input} forms {framework.name}'s batches with its own threads")
        if not cell.set_epoch and not self.traits.distributed_sampler:
            if not framework.uses_dataloader:
                return ("--no-set-epoch asks what PyTorch's DistributedSampler does without "
                        "set_epoch; TensorFlow's input pipelines have no sampler epoch to leave "
                        "out")
            samplers = [t.name for t in TRAITS.values() if t.distributed_sampler]
            return (f"{self.name} draws with a plain shuffling loader (one process needs no "
                    f"DistributedSampler), which shuffles anew each epoch by itself: there is "
                    f"no set_epoch to leave out; --no-set-epoch is for {', '.join(samplers)}")
        return None

    def unsupported_on(self, cell: Cell, device_kind: str) -> str | None:
        """Why this backend cannot run `cell` on `device_kind` ("cpu" or "cuda"), or None."""
        traits = self.traits
        if not traits.spans_devices and cell.world > 1:
            return f"{self.name} is a single-device reference: it runs on 1 device only"
        framework = traits.framework
        if cell.precision in LOWER and cell.precision not in framework.mixed_precisions:
            return f"precision {cell.precision}: {framework.no_mixed_precision}"
        if device_kind == "cuda":
            return None
        if cell.precision == "tf32":
            return ("precision tf32: TF32 is a math mode of NVIDIA GPUs' tensor cores (Ampere "
                    "and later); a CPU computes float32 as float32, which is precision fp32")
        if traits.several_devices_need_gpus and cell.devices > 1:
            return (f"{self.name} with {cell.devices} devices needs {cell.devices} CUDA GPUs; "
                    f"{traits.several_devices_need_gpus}")
        if cell.compression in traits.gpu_only:
            return traits.gpu_only[cell.compression]
        if cell.host_memory != "pageable":
            return (f"host_memory {cell.host_memory} pins batches in page-locked memory for fast "
                    f"copies to a CUDA device; on the CPU there is no copy to speed up, and "
                    f"PyTorch pins memory only where CUDA is")
        return None


def horovod_described() -> str:
    """The installed Horovod and the frameworks it was built for (no framework imported: its
    compiled extensions are looked for)."""
    try:
        version = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        return "horovod not installed"
    built = [name for name, module in HOROVOD_EXTENSIONS.items() if _importable(module)]
    return f"horovod {version} built for {', '.join(built) or 'no framework'}"


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
