"""jax-dp: one process driving N local devices, the batch sharded over a one-axis mesh of them,
parameters and optimizer state replicated, one jax.jit-compiled step with those shardings: XLA's
SPMD partitioner inserts the gradients' all-reduce. On a CPU the N devices are XLA's host-platform
devices (jax_num_cpu_devices), sharing this process's cores, as tf-mirrored's logical CPU devices
do."""
from xbench.jax_backend.base import JaxBackend


class ShardedBatchBackend(JaxBackend):
    name = "jax-dp"

    def details(self):
        devices = self.cell.devices
        return {"parallelism": "jax.jit with shardings (a one-axis mesh, the batch sharded)",
                "reduction": "all-reduce" if devices > 1 else "none",
                "reduction_detail": (f"XLA's all-reduce over the {devices} devices of one "
                                     f"process, inserted by its SPMD partitioner"
                                     if devices > 1 else "a mesh of one device: nothing to "
                                     "reduce")}
