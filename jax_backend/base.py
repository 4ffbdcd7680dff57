"""What the JAX backends share: the set-up every one of them does before JAX starts (its
platform, the host platform's device count, the cores its CPU thread pool may use), and the hooks
by which each says how it joins its processes and which devices its mesh spans.

JAX is imported only inside methods that run in a launched worker, so the runner can list and
launch these backends without importing it: the modules they import there (networks, train,
probe) import JAX at their top. What those modules share with this one, the mesh and the float32
math, is jax_backend.mesh, which imports none of them: no module here imports another back.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from xbench.common.backends.backend import Backend
from xbench.common.backends.collectives import Collectives, OneProcess
from xbench.common.grids.cell import Cell
from xbench.common.results.schema import Measurement
from xbench.common.running.job import Job
from xbench.common.running.placement import first_sibling, rank_cores
from xbench.jax_backend.mesh import MATMUL_PRECISION, platform

if TYPE_CHECKING:
    import jax

    from xbench.jax_backend.networks import Network


class JaxBackend(Backend):
    """Every JAX backend: one jax.jit-compiled step over a mesh of `mesh_devices`, the batch
    sharded over it, parameters and optimizer state replicated (jax_backend.train.JaxLoop)."""

    # --- hooks ---------------------------------------------------------------------------------

    def start_processes(self, device: str) -> Collectives:
        """Join this cell's other processes (jax.distributed); one process by default. Called
        before JAX's devices are first listed; `device`: the cell's ("cpu", "cuda", "auto")."""
        return OneProcess()

    def stop_processes(self) -> None:
        """Leave what `start_processes` joined."""

    def local_rank(self) -> int:
        """This process's index on its machine (which cores and GPUs it takes)."""
        return 0

    def gpus_on_node(self, seen: int) -> int:
        """The GPUs this node gives the cell, from the `seen` ones JAX shows this process."""
        return seen

    def network(self, cell: Cell, devices: list[jax.Device]) -> Network:
        """What the loop trains over a mesh of `devices`: the spec's model in Flax by default."""
        from xbench.jax_backend.networks import FlaxNetwork
        return FlaxNetwork(cell, devices)

    def mesh_devices(self, kind: str) -> list[jax.Device]:
        """The devices of the cell's one-axis mesh, in the order the batch is split over them:
        this process's first N of `kind` by default."""
        import jax
        return jax.local_devices(backend=platform(kind))[:self.cell.devices]

    # --- the common set-up ---------------------------------------------------------------------

    def set_up(self, cell: Cell, threads_per_device: int) -> tuple[Collectives, str]:
        """Configure JAX for `cell` in this process, before it starts: the platform, as many
        host-platform devices as the process drives on a CPU, its share of the node's cores
        (XLA's CPU thread pool has no size setting: it takes the cores the process may use), and
        float32's matmul precision; then join the processes and choose the device kind."""
        import jax

        self.cell = cell
        devices = self.devices_per_process(cell)
        if cell.device == "cpu":
            jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", devices)
        if cell.precision in MATMUL_PRECISION:
            jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION[cell.precision])
        self.cores = self.take_cores(threads_per_device * devices)
        comm = self.start_processes(cell.device)
        gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
        self.kind = self.choose_device(cell, self.gpus_on_node(len(gpus)), "JAX")
        return comm, self.kind

    def take_cores(self, wanted: int) -> list[int]:
        """Limit this process to its share of the cores it may use (the processes of a node
        split them evenly, whole physical cores first, as pin_ranks does), at most `wanted` of
        them: XLA's CPU thread pool has no size setting and takes the cores the process may use
        (the row records them: cpu_affinity)."""
        allowed = sorted(os.sched_getaffinity(0))
        sharing = self.start.processes(self.cell)
        cores = rank_cores(allowed, sharing, self.local_rank() % sharing,
                           first_sibling)[:max(1, wanted)]
        os.sched_setaffinity(0, cores)
        return cores

    def train(self, job: Job) -> Measurement | None:
        from xbench.jax_backend.train import JaxLoop

        try:
            comm, kind = self.set_up(job.cell, job.threads_per_device)
            return JaxLoop(job, comm, self, kind).run()
        finally:
            self.stop_processes()

    def probe(self, cell: Cell, threads_per_device: int, request: dict) -> dict | None:
        from xbench.jax_backend.probe import probe

        try:
            comm, kind = self.set_up(cell, threads_per_device)
            return probe(self, comm, kind, request)
        finally:
            self.stop_processes()

    def mesh_details(self, parallelism: str, mesh: str) -> dict:
        """What the row records of a one-process mesh of the cell's devices (`mesh`: whose)."""
        devices = self.cell.devices
        return {"parallelism": parallelism, "reduction": "all-reduce" if devices > 1 else "none",
                "reduction_detail": (f"XLA's all-reduce over the {devices} devices of {mesh}, "
                                     f"inserted by its SPMD partitioner" if devices > 1 else
                                     "a mesh of one device: nothing to reduce")}

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, MemoryError) or "RESOURCE_EXHAUSTED" in str(error)
