"""jax-dp: one process driving N local devices, the batch sharded over a one-axis mesh of them,
parameters and optimizer state replicated, one jax.jit-compiled step with those shardings: XLA's
SPMD partitioner inserts the gradients' all-reduce. On a CPU the N devices are XLA's host-platform
devices (jax_num_cpu_devices), sharing this process's cores, as tf-mirrored's logical CPU devices
do."""
from xbench.jax_backend.base import JaxBackend


class ShardedBatchBackend(JaxBackend):
    name = "jax-dp"

    def details(self):
        return self.mesh_details("jax.jit with shardings (a one-axis mesh, the batch sharded)",
                                 "one process")
