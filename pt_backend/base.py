"""What the processes of the PyTorch backends share: the set-up every one of them does, and the
hooks by which each says how it joins its processes, places and wraps the model, and wraps the
optimizer.

torch is imported only inside the methods, which run in a launched worker: importing a backend's
module imports no framework.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from xbench.common.backends.backend import Backend
from xbench.common.backends.collectives import Collectives, OneProcess
from xbench.common.grids.cell import Cell
from xbench.common.measuring.collective_clock import CollectiveClock
from xbench.common.results.schema import Measurement
from xbench.common.running.job import Job
from xbench.common.running.training_loop import INTER_OP_PER_DEVICE
from xbench.common.workload.compression import gradient_wire_bytes

if TYPE_CHECKING:
    import torch


class TorchBackend(Backend):
    """Every PyTorch backend: one process per device where it starts several (its
    `start_processes` joins them), the model placed on the process's first device and wrapped by
    `wrap_model`, the optimizer by `wrap_optimizer`, then pt_backend.train.TorchLoop."""

    # --- hooks ---------------------------------------------------------------------------------

    def start_processes(self, device_kind: str) -> Collectives:
        """Join this cell's other processes (a process group, Horovod); one process by default."""
        return OneProcess()

    def stop_processes(self) -> None:
        """Leave what `start_processes` joined."""

    def local_rank(self) -> int:
        """This process's index on its machine (which GPUs it drives)."""
        return 0

    def wrap_model(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model as this backend parallelises it (the loop trains the wrapper)."""
        return model

    def whole_parameters(self, model: torch.nn.Module) -> list[torch.Tensor]:
        """Every parameter of the model whole, on every rank (where the ranks hold shards, a
        collective that gathers them; by default each rank holds them whole)."""
        return list(model.parameters())

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer,
                       model: torch.nn.Module) -> torch.optim.Optimizer:
        """The optimizer, wrapped where the backend averages gradients itself."""
        return optimizer

    def watch_collectives(self, wrapped: torch.nn.Module, model: torch.nn.Module,
                          optimizer: torch.optim.Optimizer, clock: CollectiveClock) -> None:
        """Have the library tell `clock` when each gradient is ready and when each of its
        collectives is launched and completed."""

    def watch_gradients(self, model: torch.nn.Module, clock: CollectiveClock) -> None:
        """Tell `clock` when each gradient is ready, with the bytes it puts on the wire (under
        the cell's compression): the last one ready is this rank's compute for the collectives
        done. (The collectives themselves the library times: watch_collectives.)"""
        compression, rank = self.cell.compression, self.cell.powersgd_rank
        for parameter in model.parameters():
            parameter.register_post_accumulate_grad_hook(
                lambda ready: clock.ready(
                    gradient_wire_bytes(tuple(ready.shape), compression, rank)))

    def micro_batch(self, wrapped: torch.nn.Module, syncs: bool) -> AbstractContextManager:
        """Around one micro-batch's forward and backward: where it does not sync (accumulate_sync
        last, all but the last micro-batch), the library's way of keeping its gradients local;
        nothing by default (a backend that reduces in every backward, or one device)."""
        return nullcontext()

    def sync_micro_batch(self, optimizer: torch.optim.Optimizer) -> None:
        """After a micro-batch's backward that synced, before the step's last: wait for its
        collectives where backward itself does not."""

    def wait_for_gradients(self, optimizer: torch.optim.Optimizer,
                           clock: CollectiveClock) -> None:
        """After backward: wait for the gradients' collectives where backward itself does not."""

    def update(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> None:
        """The optimizer's step on the (averaged) gradients, through fp16's loss scaler (which
        unscales them and skips a step whose gradients overflowed; disabled, a plain step)."""
        scaler.step(optimizer)

    # --- the common set-up ---------------------------------------------------------------------

    def set_up(self, cell: Cell, threads_per_device: int) -> tuple[Collectives, torch.device]:
        """Threads, device and processes of `cell` in this process (stop_processes undoes it)."""
        import torch

        self.cell = cell
        devices = self.devices_per_process(cell)
        torch.set_num_threads(threads_per_device * devices)
        if torch.get_num_interop_threads() != INTER_OP_PER_DEVICE * devices:  # settable once
            torch.set_num_interop_threads(INTER_OP_PER_DEVICE * devices)
        kind = self.choose_device(cell, torch.cuda.device_count(), "torch")
        comm = self.start_processes(kind)
        if kind == "cuda":
            device = torch.device("cuda", self.local_rank() * devices)
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
        return comm, device

    def train(self, job: Job) -> Measurement | None:
        from xbench.pt_backend.train import TorchLoop

        try:
            comm, device = self.set_up(job.cell, job.threads_per_device)
            return TorchLoop(job, comm, self, device).run()
        finally:
            self.stop_processes()

    def probe(self, cell: Cell, threads_per_device: int, request: dict) -> dict | None:
        from xbench.pt_backend.probe import probe

        try:
            comm, device = self.set_up(cell, threads_per_device)
            return probe(self, comm, device, request)
        finally:
            self.stop_processes()

    def profile(self, cell: Cell, threads_per_device: int, request: dict) -> dict:
        from xbench.pt_backend.profile import profile

        try:
            _, device = self.set_up(cell, threads_per_device)
            return profile(cell, device, request)
        finally:
            self.stop_processes()

    def is_out_of_memory(self, error: BaseException) -> bool:
        from xbench.pt_backend.train import is_out_of_memory
        return is_out_of_memory(error)
