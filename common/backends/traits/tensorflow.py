"""TensorFlow's backends in the traits table: the single-device reference, MirroredStrategy and
MultiWorkerMirroredStrategy, in the table's order (hvd-tf, Horovod over TensorFlow, is with
Horovod's rows: common.backends.traits.horovod), and what their texts say of TensorFlow."""
from xbench.common.backends.frameworks import TENSORFLOW
from xbench.common.backends.launch_scopes import WORKER_PER_DEVICE
from xbench.common.backends.protocol import (
    ALL_REDUCE,
    REDUCE_TO_ONE,
    RING_ALL_REDUCE,
    Protocol,
    everywhere,
)
from xbench.common.backends.traits.shared import SUMMED_IN_STEP, Traits

# tf_backend.step: Keras' optimizer sums what it is given over the strategy's replicas.
STRATEGY_EACH = ("the first K-1 micro-batches' gradients all-reduced by the replica context's "
                 "all_reduce inside the step, the last one's by the optimizer's own reduction "
                 "(the sum already crossed added divided by the replicas)")
# Seen with TF 2.21 on a CPU, running each backend's jit_compile=True step (tf_backend.train);
# tests/test_knobs.py reads tf-multiworker's refusal. tf-single compiles.
XLA_RING = ("XLA compiles MultiWorkerMirroredStrategy's collectives only with NCCL or AUTO, and "
            "on a CPU its all-reduce is RING: \"Only compiling NCCL/auto collective is "
            "supported, got: ring\" (TF 2.21)")
XLA_MIRRORED = ("XLA compiles a tf.function for one device, and MirroredStrategy's step reads "
                "every replica's variables: \"Trying to access resource conv2d/kernel/replica_1 "
                "located in device CPU:1 from device CPU:0\" (TF 2.21, logical CPU devices)")
# Seen with Keras 3.15 / TF 2.21 (tests/test_cifar.py): BatchNormalization's moving statistics
# are MirroredVariables with aggregation NONE, which do not stay mirrored.
MIRRORED_BATCHNORM = ("Keras keeps BatchNorm's running statistics in MirroredVariables with "
                      "aggregation NONE: each replica updates its own copy from its own samples, "
                      "and a read outside the replicas (evaluation) returns the first replica's "
                      "copy, not their mean")
STRATEGIES_DO_NOT_COMPRESS = ("TensorFlow's distribution strategies have no gradient compression "
                              "(their CommunicationOptions choose only the collective "
                              "implementation)")

TENSORFLOW_TRAITS = [
    Traits("tf-single", TENSORFLOW, "xbench.tf_backend.single:SingleDeviceTensorFlowBackend",
           spans_devices=False),
    # NcclAllReduce on GPUs; on a CPU, ReductionToOneDevice (NCCL has no CPU kernel).
    Traits("tf-mirrored", TENSORFLOW, "xbench.tf_backend.mirrored:MirroredBackend",
           wrapper="MirroredStrategy",
           protocol={"cpu": Protocol(REDUCE_TO_ONE, through_one_device=True),
                     "cuda": RING_ALL_REDUCE},
           no_buckets="MirroredStrategy's reduction to one device (a CPU) has no "
                   "packs, and its NcclAllReduce takes a number of packs, not their size",
           sync_modes={"last": SUMMED_IN_STEP,
                       "each": STRATEGY_EACH},
           no_compile=XLA_MIRRORED,
           no_compression=STRATEGIES_DO_NOT_COMPRESS,
           collectives_counted="the reduction over the replicas in the trace: NcclAllReduce on "
                               "GPUs; on a CPU the sums on the first device (AddN) and the copies "
                               "between devices",
           batchnorm_statistics=MIRRORED_BATCHNORM),
    # bytes_per_pack 0 (TensorFlow packs): one message
    Traits("tf-multiworker", TENSORFLOW, "xbench.tf_backend.multiworker:MultiWorkerMirroredBackend",
           wrapper="MultiWorkerMirroredStrategy",
           start=WORKER_PER_DEVICE, library="tensorflow",
           sync_modes={"last": SUMMED_IN_STEP,
                       "each": STRATEGY_EACH},
           no_compile=XLA_RING,
           # bytes_per_pack 0, its default: one message
           protocol=everywhere(Protocol(ALL_REDUCE, reduce_passes=2, bucket_knob=(
               "MultiWorkerMirroredStrategy's CommunicationOptions(bytes_per_pack)"))),
           no_compression=STRATEGIES_DO_NOT_COMPRESS,
           collectives_counted="TensorFlow's CollectiveReduceV2 ops in the trace, each from its "
                               "launch to its end; this worker is ready when its backward's "
                               "last op ends",
           batchnorm_statistics=MIRRORED_BATCHNORM),
]
