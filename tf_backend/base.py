"""What the TensorFlow backends share: the set-up every one of them does, and the hooks by which
each says how it starts its processes and which tf.distribute strategy holds its replicas.

TensorFlow is imported only inside methods that run in a launched worker, so the runner can list
and launch these backends without importing it.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from xbench.common.backends.backend import Backend
from xbench.common.grids.cell import Cell
from xbench.common.results.schema import Measurement
from xbench.common.running.job import Job
from xbench.common.running.training_loop import INTER_OP_PER_DEVICE
from xbench.tf_backend.collectives import OneTensorFlowProcess, TensorFlowCollectives

if TYPE_CHECKING:
    import tensorflow as tf


class TensorFlowBackend(Backend):
    """Every TensorFlow backend: threads and visible devices set before TensorFlow starts, the
    replicas of this process held by the strategy `make_strategy` gives, the dataset split over
    them by `distribute`, then tf_backend.train.TensorFlowLoop."""

    # --- hooks ---------------------------------------------------------------------------------

    def start_processes(self) -> TensorFlowCollectives:
        """Join this cell's other processes (Horovod); one process by default."""
        return OneTensorFlowProcess()

    def local_rank(self) -> int:
        """This process's index on its machine (which GPUs it drives)."""
        return 0

    def make_strategy(self, device_kind: str) -> tf.distribute.Strategy:
        """The strategy whose replicas this process trains (TensorFlow's default: one device)."""
        import tensorflow as tf
        return tf.distribute.get_strategy()

    def distribute(self, strategy: tf.distribute.Strategy, make_dataset) -> object:
        """The distributed dataset of this process's global batches (`make_dataset()`): split
        over the strategy's replicas in this process."""
        return strategy.experimental_distribute_dataset(make_dataset())

    # --- the common set-up ---------------------------------------------------------------------

    def set_up(self, cell: Cell, threads_per_device: int
               ) -> tuple[TensorFlowCollectives, tf.distribute.Strategy, str]:
        """Processes, threads, visible devices and strategy of `cell` in this process, and the
        device kind ("cpu" or "cuda")."""
        import tensorflow as tf

        from xbench.tf_backend.train import set_threads

        self.cell = cell
        devices = self.devices_per_process(cell)
        comm = self.start_processes()
        set_threads(threads_per_device * devices, INTER_OP_PER_DEVICE * devices)
        gpus = tf.config.list_physical_devices("GPU")
        kind = self.choose_device(cell, len(gpus), "TensorFlow")
        if kind == "cuda":
            first = self.local_rank() * devices
            tf.config.set_visible_devices(gpus[first:first + devices], "GPU")
        else:
            tf.config.set_visible_devices([], "GPU")
        return comm, self.make_strategy(kind), kind

    def train(self, job: Job) -> Measurement | None:
        from xbench.tf_backend.train import TensorFlowLoop

        comm, strategy, _ = self.set_up(job.cell, job.threads_per_device)
        return TensorFlowLoop(job, comm, self, strategy).run()

    def probe(self, cell: Cell, threads_per_device: int, request: dict) -> dict | None:
        from xbench.tf_backend.probe import probe

        comm, _, kind = self.set_up(cell, threads_per_device)
        return probe(self, comm, kind, request)

    def profile(self, cell: Cell, threads_per_device: int, request: dict) -> dict:
        from xbench.tf_backend.profile import profile

        _, _, kind = self.set_up(cell, threads_per_device)
        return profile(cell, kind, request)

    def is_out_of_memory(self, error: BaseException) -> bool:
        from xbench.tf_backend.device import is_out_of_memory
        return is_out_of_memory(error)

    def bound_tensor_memory(self, megabytes: int) -> bool:
        """TensorFlow under a data-segment limit dies in native code, not with its OOM error
        (SIGSEGV in an allocator, SIGABRT from oneDNN's "could not create a primitive", Python's
        "can't start new thread"): it reserves hundreds of MB of address space for thread stacks
        and arenas, and the limit is met outside any tensor. Its CPU tensor allocator takes a
        cap instead (the BFC allocator) and raises ResourceExhaustedError beyond it; but
        oneDNN's kernels crash (SIGSEGV) when that allocator refuses them, so a memory-limited
        cell runs TensorFlow's Eigen kernels (the row's backend_details say so: cpu_kernels)."""
        os.environ.update(TF_CPU_ALLOCATOR_USE_BFC="true",
                          TF_CPU_BFC_MEM_LIMIT_IN_MB=str(megabytes), TF_ENABLE_ONEDNN_OPTS="0")
        return True
