"""JAX's backends in the traits table: jax-single, jax-dp and jax-multiprocess (Flax models
under jax.jit) and keras-jax (Keras 3 on JAX), in the table's order, and what their texts say of
XLA's compiled step."""
from xbench.common.backends.frameworks import JAX
from xbench.common.backends.launch_scopes import WORKER_PER_DEVICE
from xbench.common.backends.protocol import ALL_REDUCE, Protocol, everywhere
from xbench.common.backends.traits.shared import Traits

# jax-dp and jax-multiprocess: one jax.jit-compiled step over a batch sharded on a mesh of the
# devices, its parameters replicated; XLA's SPMD partitioner inserts the gradients' all-reduce.
XLA_BUCKETS = ("XLA's SPMD partitioner places the gradients' all-reduces in the "
               "compiled step and combines them itself (its all-reduce combiner); jax.jit has no "
               "bucket size to set")
JAX_NO_COMPRESSION = ("the gradients are all-reduced in the type jax.jit's shardings give them "
                      "(float32): JAX has no gradient compression of its own")
XLA_COLLECTIVES = ("the collectives XLA inserted (its combined all-reduce of the gradients) in "
                   "JAX's trace, each from when this process's last device reached it to when "
                   "its last device left it, its operands' bytes; this rank is ready when its "
                   "backward's last op ends")
# jax-single, jax-dp and jax-multiprocess build xbench's specs in Flax.
FLAX_ONLY = ("jax-single, jax-dp and jax-multiprocess train Flax models built from xbench's own "
             "specs, and a model file defines no Flax model (pytorch() and keras() only): "
             "keras-jax trains its keras()")
JIT_BATCHNORM = ("jax.jit computes the model on the whole global batch sharded over the devices: "
                 "BatchNorm normalises over every device's samples together (as SyncBatchNorm "
                 "does, XLA reducing the statistics across the devices), and one copy of the "
                 "running statistics is kept, replicated")
# The gradients' all-reduce inside the one compiled step, combined into one message by XLA's
# all-reduce combiner and scheduled once every gradient is computed: on a CPU (XLA 0.10.x's
# thunk runtime) one all-reduce after backward, as the trace shows (tests/test_jax_backends.py).
# Not checked on GPUs, where XLA's combiner and scheduler differ.
XLA_PROTOCOL = everywhere(Protocol(ALL_REDUCE, reduce_passes=2))
XLA_SYNCS = {"last": "under shard_map each device's micro-batches' gradients summed, then one "
                     "psum (one all-reduce of them all)",
             "each": "under shard_map a psum of every micro-batch's gradients, an "
                     "optimization_barrier before the next, compiled without XLA's all-reduce "
                     "combiners (which merge them into one on a CPU)"}

JAX_TRAITS = [
    Traits("jax-single", JAX, "xbench.jax_backend.single:SingleDeviceJaxBackend",
           spans_devices=False, own_models_only=FLAX_ONLY),
    Traits("jax-dp", JAX, "xbench.jax_backend.dp:ShardedBatchBackend",
           wrapper="jax.jit over a mesh of devices",
           protocol=XLA_PROTOCOL, sync_modes=XLA_SYNCS, no_buckets=XLA_BUCKETS,
           no_compression=JAX_NO_COMPRESSION,
           collectives_counted=XLA_COLLECTIVES, batchnorm_statistics=JIT_BATCHNORM,
           own_models_only=FLAX_ONLY),
    Traits("jax-multiprocess", JAX, "xbench.jax_backend.multiprocess:MultiProcessJaxBackend",
           wrapper="jax.jit over a mesh of processes",
           start=WORKER_PER_DEVICE, protocol=XLA_PROTOCOL, sync_modes=XLA_SYNCS, library="jax",
           no_buckets=XLA_BUCKETS, no_compression=JAX_NO_COMPRESSION,
           collectives_counted=XLA_COLLECTIVES, batchnorm_statistics=JIT_BATCHNORM,
           own_models_only=FLAX_ONLY),
    Traits("keras-jax", JAX, "xbench.jax_backend.keras:KerasDataParallelBackend",
           wrapper="Keras DataParallel",
           protocol=XLA_PROTOCOL, sync_modes=XLA_SYNCS, no_buckets=XLA_BUCKETS,
           no_compression=JAX_NO_COMPRESSION,
           collectives_counted=XLA_COLLECTIVES, batchnorm_statistics=JIT_BATCHNORM),
]
