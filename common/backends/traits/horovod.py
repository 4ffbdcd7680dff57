"""Horovod's backends in the traits table, over PyTorch (hvd-torch) and over TensorFlow (hvd-tf):
what they share (the compiled extension each needs, how to build it, Horovod's fusion, its
compressors and its BatchNorm) beside their rows, in the table's order."""
from xbench.common.backends.frameworks import TENSORFLOW, TORCH
from xbench.common.backends.launch_scopes import HOROVODRUN
from xbench.common.backends.protocol import ALL_REDUCE, FUSED_EACH_CYCLE, MIB, Protocol, everywhere
from xbench.common.backends.traits.shared import SUMMED_IN_STEP, Traits

HOROVOD_BUILD_HINT = ("build Horovod for this environment with `make setup` (it runs "
                      "scripts/build_horovod.sh .venv/bin/python)")
# The compiled extension, not just the Python package: a Horovod built without a framework lacks
# its extension.
HOROVOD_EXTENSIONS = {"PyTorch": "horovod.torch.mpi_lib_v2",
                      "TensorFlow": "horovod.tensorflow.mpi_lib"}
XLA_HOROVOD = ("XLA has no kernel for Horovod's ops: \"Detected unsupported operations when "
               "trying to compile graph on XLA_CPU_JIT: HorovodAllreduce\" (Horovod 0.28.1)")
HOROVOD_BATCHNORM = ("Horovod broadcasts rank 0's state once, at the start; then each rank keeps "
                     "its own running statistics, from its own samples only, and evaluation uses "
                     "rank 0's")
HOROVOD_COMPRESSIONS = ("none", "fp16")
HOROVOD_NO_COMPRESSION = "Horovod's compressors are hvd.Compression.none and fp16"
# Horovod's fusion: every cycle (1 ms), the tensors ready by then fused into a buffer of 128 MiB
# (HOROVOD_FUSION_THRESHOLD), its defaults since 0.21.0 (release notes: "Changed default cycle
# time from 5ms to 1ms and fusion threshold from 64MB to 128MB", #2468); xbench runs 0.28.1.
# With bucket_mb both backends also group the gradients into buckets of that size, each
# launched whole, as DDP's are (common.backends.horovod_support.buckets: hvd-torch's
# DistributedOptimizer groups, hvd-tf's grouped all-reduces).
HOROVOD = Protocol(ALL_REDUCE, reduce_passes=2, message_bytes=128 * MIB,
                   bucket_knob="Horovod's fusion threshold (HOROVOD_FUSION_THRESHOLD)",
                   launch=FUSED_EACH_CYCLE, cycle_seconds=1e-3, whole_buckets=True)

HOROVOD_TRAITS = [
    Traits("hvd-torch", TORCH, "xbench.pt_backend.hvd:HorovodTorchBackend",
           wrapper="Horovod", start=HOROVODRUN,
           distributed_sampler=True, protocol=everywhere(HOROVOD), library="horovod",
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
]
