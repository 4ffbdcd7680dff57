"""jax-multiprocess: one process per device (launched as tf-multiworker's workers are, on one
machine or a cluster's nodes), joined by jax.distributed.initialize; the mesh spans every
process's device, each process places its own share of every global batch
(jax.make_array_from_process_local_data), and the one compiled step all-reduces the gradients
across the processes: gloo on a CPU, NCCL on GPUs."""
import pickle

import numpy as np

from xbench.common.backends.collectives import Collectives
from xbench.common.running.placement import Placement, local_task_index, task_index
from xbench.jax_backend.base import JaxBackend
from xbench.jax_backend.mesh import one_axis_mesh, platform


class MultiProcessJaxBackend(JaxBackend):
    name = "jax-multiprocess"

    def start_processes(self, device):
        """Each process is given its own GPU of the node (the one of its local rank) where the
        cell may run on GPUs; XLA's CPU collectives between the processes are gloo's."""
        import jax
        placement = Placement.from_env()
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"{placement.hosts[0]}:{placement.port}",
            num_processes=self.cell.world, process_id=task_index(),
            local_device_ids=None if device == "cpu" else [self.local_rank()])
        return JaxProcesses()

    def stop_processes(self):
        """Every rank leaves together (the loop ends on a barrier), before the worker exits: a
        coordinator gone first would fail the others."""
        import jax
        jax.distributed.shutdown()

    def local_rank(self):
        return local_task_index()

    def gpus_on_node(self, seen):
        """Each process sees only the GPU it was given: the node gives one per process."""
        return seen * self.start.processes(self.cell)

    def mesh_devices(self, kind):
        import jax
        return jax.devices(platform(kind))

    def details(self):
        library = "gloo" if self.kind == "cpu" else "nccl"
        several = self.cell.world > 1
        return {"parallelism": "jax.jit with shardings over every process's device "
                               "(jax.distributed)",
                "launcher": "one worker per device, jax.distributed.initialize",
                "collective_library": f"jax {library}",
                "reduction": "all-reduce" if several else "none",
                "reduction_detail": (f"XLA's all-reduce across the processes ({library}), "
                                     f"inserted by its SPMD partitioner" if several else
                                     "a mesh of one process's device: nothing to reduce")}


class JaxProcesses(Collectives):
    """The cell's processes through JAX itself: `sum` an all-reduce compiled over a mesh of every
    process's device (the collective the training step's gradients cross in), `barrier` and
    `gather` JAX's multi-host utilities. Every process must call them in the same order, as the
    training loop does. A picklable value is gathered as bytes, padded to a power of two so that
    few shapes are compiled."""

    def __init__(self):
        import jax
        from jax.experimental import multihost_utils
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P
        self.jax, self.utils = jax, multihost_utils
        self.rank, self.world = jax.process_index(), jax.process_count()
        mesh = one_axis_mesh(jax.devices(), "process")
        self.sharded = NamedSharding(mesh, P("process"))
        self.total = jax.jit(lambda x: x.sum(axis=0), out_shardings=NamedSharding(mesh, P()))

    def barrier(self):
        self.utils.sync_global_devices("xbench")

    def sum(self, values):
        """`values` (a numpy array) summed over the processes by XLA's all-reduce: placed as
        this process's row of a (processes, ...) array, summed, read back. JAX computes in 32
        bits: 64-bit values (the epoch's loss and right sums) are gathered and added exactly on
        the host instead."""
        values = np.asarray(values)
        if values.dtype.itemsize > 4:
            return np.sum(self.gather(values), axis=0)
        rows = self.jax.make_array_from_process_local_data(self.sharded, values[None])
        return np.asarray(self.total(rows).addressable_data(0)).astype(values.dtype)

    def gather(self, value):
        data = np.frombuffer(pickle.dumps(value), np.uint8)
        sizes = np.asarray(self.utils.process_allgather(np.asarray([len(data)], np.int64)))
        padded = np.zeros(1 << int(sizes.max() - 1).bit_length(), np.uint8)
        padded[:len(data)] = data
        every = np.asarray(self.utils.process_allgather(padded))
        return [pickle.loads(every[rank, :int(size)].tobytes())
                for rank, size in enumerate(sizes.reshape(-1))]
