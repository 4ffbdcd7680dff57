"""What each backend is, in one framework-free table: the registry of backends by name.

Every reader that is not one of a backend's own processes reads a backend here: the grid's checks,
the runner and the dry run (how its processes start, what it supports on which device kind), `xbench
backends`, and the report and `xbench predict` (how its gradients cross, in which messages). None
of them imports a framework or a backend's module. A backend's own processes run the class named by
`rank` (common.backends.backend.Backend), which says only what happens inside them.

The texts below say why, as each library documents it; the tests check them against what the
smoke grid's rows record.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from xbench.common.backends.frameworks import JAX, TENSORFLOW, TORCH, Framework
from xbench.common.backends.protocol import (
    ALL_REDUCE,
    BUCKET_READY,
    BY_REDUCTION,
    FUSED_EACH_CYCLE,
    MIB,
    NONE,
    REDUCE_SCATTER,
    REDUCE_TO_ONE,
    RING_ALL_REDUCE,
    Protocol,
    everywhere,
)
from xbench.common.workload.compression import COMPRESSIONS

# How the runner starts a cell's processes on a node (common.backends.start).
ONE_PROCESS = "one process"
TORCHRUN = "torchrun"
WORKER_PER_DEVICE = "a worker per device"
HOROVODRUN = "horovodrun"
HOROVOD_BUILD_HINT = ("build Horovod for this environment with `make setup` (it runs "
                      "scripts/build_horovod.sh .venv/bin/python)")
# The compiled extension, not just the Python package: a Horovod built without a framework lacks
# its extension.
HOROVOD_EXTENSIONS = {"PyTorch": "horovod.torch.mpi_lib_v2",
                      "TensorFlow": "horovod.tensorflow.mpi_lib"}
ONE_REPLICA = "one replica: its running statistics are its own"
NO_COLLECTIVE = "none: no collective between processes"
# --accumulate's sync modes (common.grids.settings): how each backend crosses once a step or after
# every micro-batch.
ONE_DEVICE_SYNC = "one device: nothing crosses"
ALONE = {"last": ONE_DEVICE_SYNC, "each": ONE_DEVICE_SYNC}
# TensorFlow's and JAX's steps are one call: the K micro-batches' gradients are summed inside it.
SUMMED_IN_STEP = "the micro-batches' gradients summed inside the step's one call, then reduced once"
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
XLA_HOROVOD = ("XLA has no kernel for Horovod's ops: \"Detected unsupported operations when "
               "trying to compile graph on XLA_CPU_JIT: HorovodAllreduce\" (Horovod 0.28.1)")
# Seen with Keras 3.15 / TF 2.21 (tests/test_cifar.py): BatchNormalization's moving statistics
# are MirroredVariables with aggregation NONE, which do not stay mirrored.
MIRRORED_BATCHNORM = ("Keras keeps BatchNorm's running statistics in MirroredVariables with "
                      "aggregation NONE: each replica updates its own copy from its own samples, "
                      "and a read outside the replicas (evaluation) returns the first replica's "
                      "copy, not their mean")
STRATEGIES_DO_NOT_COMPRESS = ("TensorFlow's distribution strategies have no gradient compression "
                              "(their CommunicationOptions choose only the collective "
                              "implementation)")
HOROVOD_BATCHNORM = ("Horovod broadcasts rank 0's state once, at the start; then each rank keeps "
                     "its own running statistics, from its own samples only, and evaluation uses "
                     "rank 0's")
HOROVOD_COMPRESSIONS = ("none", "fp16")
HOROVOD_NO_COMPRESSION = "Horovod's compressors are hvd.Compression.none and fp16"
# Horovod's fusion: every cycle (1 ms), the tensors ready by then fused into a buffer of 128 MiB
# (HOROVOD_FUSION_THRESHOLD), its defaults since 0.21.0 (release notes: "Changed default cycle
# time from 5ms to 1ms and fusion threshold from 64MB to 128MB", #2468); xbench runs 0.28.1.
HOROVOD = Protocol(ALL_REDUCE, reduce_passes=2, message_bytes=128 * MIB,
                   bucket_knob="Horovod's fusion threshold (HOROVOD_FUSION_THRESHOLD)",
                   launch=FUSED_EACH_CYCLE, cycle_seconds=1e-3)
# hvd-torch also groups the gradients into buckets of bucket_mb, each launched whole
# (pt_backend.hvd: DistributedOptimizer's groups), as DDP's are.
HOROVOD_GROUPS = replace(HOROVOD, whole_buckets=True)
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


@dataclass(frozen=True)
class Traits:
    """One backend, as every reader outside its processes needs it."""
    name: str
    framework: Framework
    rank: str                     # "module:Class" that each of its processes runs
    # What spreads the training over devices (the figures give each one marker; several
    # frameworks' backends may share one, Horovod's do).
    wrapper: str = "none: one device"
    start: str = ONE_PROCESS      # how its processes start (ONE_PROCESS, TORCHRUN, ...)
    spans_devices: bool = True    # False: a single-device reference, 1 device only
    # Each rank draws its shard with a DistributedSampler, set_epoch each epoch (the lab's
    # question 5); a PyTorch backend of one process shuffles with a plain loader, as its users'
    # code does.
    distributed_sampler: bool = False
    # How its gradients cross between devices of each device type (common.backends.protocol;
    # its N-device rows record the reduction), by default nothing crosses.
    protocol: Mapping[str, Protocol] = field(default_factory=lambda: everywhere(NONE))
    library: str | None = None    # the collective library between its processes (the probe's)
    compressions: tuple[str, ...] = ("none",)  # the gradient compressions it does
    no_compression: str = "one device: no gradients cross between devices"
    gpu_only: Mapping[str, str] = field(default_factory=dict)  # compression -> why GPUs only
    # Why it has no bucket knob (its protocol's bucket_knob says how bucket_mb reaches the ones
    # that have), in words for a refusal.
    no_buckets: str = "one device, no gradients cross between devices"
    several_devices_need_gpus: str = ""  # why N > 1 devices run only on GPUs, if they do
    shards_parameters: bool = False  # each rank keeps a shard (the `reshard` setting is its)
    # How the library that moves the gradients tells of its collectives (None: there is none,
    # or none it tells of), and where an untold collective's time goes.
    collectives_counted: str | None = None
    collectives_not_counted: str = NO_COLLECTIVE
    # What it does with BatchNorm's running statistics across replicas (its documentation;
    # tests/test_cifar.py checks it); the test accuracy is evaluated with rank 0's.
    batchnorm_statistics: str = ONE_REPLICA
    extension: str | None = None  # a compiled extension it needs besides its framework
    # How it accumulates K micro-batches with each --accumulate-sync mode ({mode: how}), and
    # why it has no other mode.
    sync_modes: Mapping[str, str] = field(default_factory=lambda: ALONE)
    no_sync_mode: str = ""
    no_compile: str = ""          # why --compile on cannot run it, where its framework can
    # Why it trains only xbench's own models where it does (a model file's cells unsupported);
    # "": it trains its framework's function of a model file.
    own_models_only: str = ""
    install_hint: str = ""        # default: its framework's

    @property
    def requires(self) -> tuple[str, ...]:
        """Importable modules it needs."""
        return (self.framework.module, *([self.extension] if self.extension else []))

    @property
    def spans_nodes(self) -> bool:
        """Whether its ranks can run on several machines (every launcher of many processes)."""
        return self.start != ONE_PROCESS

    @property
    def compiler(self) -> str | None:
        """What --compile on does to its step (None: its framework always compiles, or it
        cannot be compiled)."""
        return None if self.no_compile else self.framework.compiler

    @property
    def bucket_knob(self) -> str | None:
        """How the bucket_mb setting reaches its library (the same on every device type), None
        where it has no such knob."""
        return next(iter(self.protocol.values())).bucket_knob

    def protocol_on(self, device_type: str) -> Protocol:
        """How its gradients cross between devices of `device_type` ("cpu", "cuda"), known
        before any ran (xbench predict's what-if)."""
        return self.protocol[device_type]


TRAITS: dict[str, Traits] = {t.name: t for t in [
    Traits("pt-single", TORCH, "xbench.pt_backend.single:SingleDeviceTorchBackend",
           spans_devices=False),
    Traits("pt-dp", TORCH, "xbench.pt_backend.dp:DataParallelBackend", wrapper="DataParallel",
           protocol=everywhere(Protocol(REDUCE_TO_ONE, through_one_device=True,
                                        collectives_in_compute=True)),
           no_buckets="DataParallel sums the replicas' gradients on device 0 inside "
                   "autograd, with no bucketed collective",
           no_compression="DataParallel sums the replicas' gradients on device 0 inside "
                          "autograd: it has no communication hook to compress them",
           several_devices_need_gpus="DataParallel has no multi-device CPU mode, and running on "
                                     "one device instead would misreport the cell",
           sync_modes={"each": "DataParallel reduces the replicas' gradients onto device 0 "
                               "inside every backward"},
           no_sync_mode="DataParallel reduces the gradients inside autograd on every backward: it "
                        "has no no_sync() to skip a micro-batch's reduction",
           collectives_not_counted="not counted: on N GPUs DataParallel scatters the batch, "
                                   "replicates the module and gathers the outputs inside its "
                                   "forward, and reduces the gradients onto the first GPU inside "
                                   "its backward: their time is in those parts",
           batchnorm_statistics="DataParallel copies the module from the first GPU every step: "
                                "each replica normalises with its own share of the batch, and "
                                "only the first GPU's running statistics are updated and kept"),
    Traits("pt-ddp", TORCH, "xbench.pt_backend.ddp:DistributedDataParallelBackend",
           wrapper="DistributedDataParallel",
           start=TORCHRUN, distributed_sampler=True,
           # bucket_cap_mb, 25; with none given, the first bucket is capped at 1 MiB
           # (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES) to start the all-reduces early
           protocol=everywhere(Protocol(ALL_REDUCE, reduce_passes=2, message_bytes=25 * MIB,
                                        first_message_bytes=MIB, launch=BUCKET_READY,
                                        bucket_knob="DistributedDataParallel's bucket_cap_mb")),
           sync_modes={"last": "DDP's no_sync() on the first K-1 micro-batches",
                       "each": "DDP's bucketed all-reduce in every micro-batch's backward"},
           library="torch.distributed", compressions=COMPRESSIONS,  # its communication hooks
           gpu_only={"powersgd": "PowerSGD's hook chains each bucket's all-reduces in "
                                 "callbacks; on gloo the chains of DDP's two buckets interleave "
                                 "in another order on each rank, and gloo aborts ('Received data "
                                 "size doesn't match expected size', torch 2.13 on 2 CPU "
                                 "ranks): powersgd runs on GPUs (NCCL) only"},
           collectives_counted="DDP: each bucket's all-reduce timed by a communication hook "
                               "from its launch to its future's completion; the gradients' own "
                               "hooks tell when each is ready, and its bytes",
           batchnorm_statistics="DistributedDataParallel (broadcast_buffers=True, its default) "
                                "broadcasts rank 0's running statistics to every rank before "
                                "each forward: each rank normalises with its own samples' "
                                "statistics, and the statistics kept (and evaluated with) are "
                                "rank 0's"),
    Traits("pt-fsdp", TORCH, "xbench.pt_backend.fsdp:FullyShardedBackend",
           wrapper="FSDP", start=TORCHRUN,
           distributed_sampler=True,
           # its gathers: before forward and again before backward, or once when it keeps the
           # parameters from forward until after backward (reshard after-backward)
           protocol=everywhere(Protocol(REDUCE_SCATTER, reduce_passes=1,
                                        gathers={"after-forward": 2, "after-backward": 1},
                                        collectives_in_compute=True)),
           library="torch.distributed", shards_parameters=True,
           no_compile="torch.compile of the FSDP2-sharded model compiled no graph here (torch "
                      "2.13 on CPU over gloo: AOTAutograd counted 0 graphs, Dynamo breaking at "
                      "FSDP2's hooks), so a compiled cell would be an eager one by another name; "
                      "compiling each unit apart is not done yet",
           sync_modes={"last": "FSDP2's set_requires_gradient_sync(False) on the first K-1 "
                               "micro-batches (whole gradients kept between them)",
                       "each": "a reduce-scatter in every micro-batch's backward"},
           no_buckets="FSDP2 gathers and reduce-scatters each fully_shard unit's "
                   "parameters as one, its units are its buckets",
           no_compression="FSDP reduce-scatters the gradients in their own type (a "
                          "MixedPrecisionPolicy's reduce_dtype, not set here); xbench's "
                          "compression is DDP's communication hooks and Horovod's compressors",
           collectives_not_counted="not counted apart: FSDP's all-gathers run inside the forward "
                                   "and backward passes and its reduce-scatters inside backward, "
                                   "so their time, waiting for the slowest rank included, is in "
                                   "those parts",
           batchnorm_statistics="FSDP shards parameters, not buffers, and broadcasts none: each "
                                "rank keeps the running statistics of its own samples, and the "
                                "statistics evaluated with are rank 0's"),
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
    Traits("hvd-torch", TORCH, "xbench.pt_backend.hvd:HorovodTorchBackend",
           wrapper="Horovod", start=HOROVODRUN,
           distributed_sampler=True, protocol=everywhere(HOROVOD_GROUPS), library="horovod",
           sync_modes={"last": "DistributedOptimizer(backward_passes_per_step=K)",
                       "each": "the optimizer's synchronize() after every micro-batch"},
           compressions=HOROVOD_COMPRESSIONS, no_compression=HOROVOD_NO_COMPRESSION,
           collectives_counted="Horovod: each gradient's (or bucket's) all-reduce from its "
                               "launch by the optimizer's hook to when its handle is seen done "
                               "(polled every 0.2 ms); the gradients' own hooks tell when each "
                               "is ready",
           batchnorm_statistics=HOROVOD_BATCHNORM, extension=HOROVOD_EXTENSIONS["PyTorch"],
           install_hint=HOROVOD_BUILD_HINT),
    Traits("hvd-tf", TENSORFLOW, "xbench.tf_backend.hvd:HorovodTensorFlowBackend",
           wrapper="Horovod",
           start=HOROVODRUN, protocol=everywhere(HOROVOD), library="horovod",
           sync_modes={"last": SUMMED_IN_STEP,
                       "each": "Horovod's all-reduce of every micro-batch's gradients inside the "
                               "step"},
           no_compile=XLA_HOROVOD,
           compressions=HOROVOD_COMPRESSIONS, no_compression=HOROVOD_NO_COMPRESSION,
           collectives_counted="Horovod's all-reduce ops in the trace, each from its launch to "
                               "its end; this rank is ready when its backward's last op ends",
           batchnorm_statistics=HOROVOD_BATCHNORM, extension=HOROVOD_EXTENSIONS["TensorFlow"],
           install_hint=HOROVOD_BUILD_HINT),
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
]}


def references() -> dict[str, str]:
    """{framework: its single-device reference}: the backend of each framework with no parallel
    wrapper (what the others cost at one device is measured against it)."""
    return {t.framework.name: t.name for t in TRAITS.values() if not t.spans_devices}


def having(test: Callable[[Traits], object]) -> list[str]:
    """The backends whose traits pass `test`, in the table's order."""
    return [t.name for t in TRAITS.values() if test(t)]


def in_words(names: list[str], last: str = "and") -> str:
    """'a', 'a and b', 'a, b and c' (or `last` another word): backends named in a sentence."""
    return f" {last} ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "none"


def served(capability: Callable[[Traits], object]) -> str:
    """'pt-ddp: X; hvd-torch and hvd-tf: Y': what each backend that has a `capability` (its
    value, not None or empty) has of it, backends of the same value together."""
    found: dict[object, list[str]] = {}
    for traits in TRAITS.values():
        if capability(traits):
            found.setdefault(capability(traits), []).append(traits.name)
    return "; ".join(f"{in_words(names)}: {value}" for value, names in found.items())


def profiled() -> list[str]:
    """The single-device references whose model's units `xbench profile` times."""
    return [name for name in references().values() if TRAITS[name].framework.units_timed]


def spanning_nodes() -> list[str]:
    """The backends whose ranks can run on several machines."""
    return [t.name for t in TRAITS.values() if t.spans_nodes]


def one_per_library() -> list[str]:
    """One backend per collective library between processes (the first in the table): what the
    probe measures each library's all-reduce through."""
    found: dict[str, str] = {}
    for traits in TRAITS.values():
        if traits.library:
            found.setdefault(traits.library, traits.name)
    return list(found.values())


def protocol_of(backend: str, device_type: str | None, recorded: str | None) -> Protocol:
    """How a row's gradients crossed: its backend's protocol on its device type, unless the row
    recorded another reduction (a backend of one device records none; a backend not in this
    table is known only by what it recorded)."""
    traits = TRAITS.get(backend)
    known = traits.protocol.get(device_type) if traits else None
    if known and (not isinstance(recorded, str) or recorded == known.reduction):
        return known
    return BY_REDUCTION.get(recorded, NONE) if isinstance(recorded, str) else NONE
