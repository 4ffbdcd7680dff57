"""PyTorch's backends in the traits table: the single-device reference, DataParallel,
DistributedDataParallel, FSDP2 and replicate (on FSDP2's machinery), in the table's order
(hvd-torch, Horovod over PyTorch, is with Horovod's rows: common.backends.traits.horovod)."""
from xbench.common.backends.frameworks import TORCH
from xbench.common.backends.launch_scopes import TORCHRUN
from xbench.common.backends.protocol import (
    ALL_REDUCE,
    BUCKET_READY,
    MIB,
    REDUCE_SCATTER,
    REDUCE_TO_ONE,
    Protocol,
    everywhere,
)
from xbench.common.backends.traits.shared import Traits
from xbench.common.workload.compression import COMPRESSIONS

# FSDP2's gathers: before forward and again before backward, or once when it keeps the
# parameters from forward until after backward (reshard after-backward). On a CPU gloo's
# reduce-scatter is an all-reduce of the whole buffer, of which each rank keeps its shard
# (ProcessGroupGloo::reduce_scatter_tensor_coalesced, torch 2.13): two passes of a ring, and
# every collective blocks the rank (timed apart from its compute, pt_backend.fsdp_collectives);
# NCCL's is one pass, on a stream of its own that the compute waits for.
FSDP_GATHERS = {"after-forward": 2, "after-backward": 1}
FSDP_PROTOCOL = {"cpu": Protocol(REDUCE_SCATTER, reduce_passes=2, gathers=FSDP_GATHERS),
                 "cuda": Protocol(REDUCE_SCATTER, reduce_passes=1, gathers=FSDP_GATHERS,
                                  collectives_in_compute=True)}

PYTORCH_TRAITS = [
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
           protocol=FSDP_PROTOCOL,
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
           collectives_counted="FSDP2: each unit's all-gathers and reduce-scatters timed by "
                               "its own collectives, subclassed (pt_backend.fsdp_collectives), "
                               "from their call to their end; on a CPU each blocks the rank (its "
                               "whole time communication, waiting for a slower rank included, "
                               "but the last one's); a unit's gradients are ready, and their "
                               "bytes told, when it reduce-scatters them",
           batchnorm_statistics="FSDP shards parameters, not buffers, and broadcasts none: each "
                                "rank keeps the running statistics of its own samples, and the "
                                "statistics evaluated with are rank 0's"),
    Traits("pt-replicate", TORCH, "xbench.pt_backend.replicate:ReplicateBackend",
           wrapper="replicate", start=TORCHRUN, distributed_sampler=True,
           # One all-reduce per unit, launched once the unit's backward is done; the protocol has
           # no words for a message per unit (nor for FSDP's), so the step model sees one
           # message after backward. On a CPU that is what the step pays: gloo's all-reduce
           # blocks backward until it completes; on GPUs it runs on a stream of its own.
           protocol={"cpu": Protocol(ALL_REDUCE, reduce_passes=2, collectives_in_compute=True),
                     "cuda": Protocol(ALL_REDUCE, reduce_passes=2)},
           library="torch.distributed", compressions=("none", "fp16", "bf16"),
           no_compression="replicate compresses only as FSDP2's reduce dtype (fp16, bf16); it "
                          "has no communication hook for PowerSGD's factors (FSDP2's all-reduce "
                          "hook runs after its all-reduce and cannot replace it)",
           no_buckets="replicate all-reduces each unit's gradients as one message once its "
                      "backward is done: its units are its buckets, and it has no "
                      "bucket_cap_mb",
           no_compile="torch.compile of the replicated model compiled no graph here (torch "
                      "2.13 on CPU over gloo: AOTAutograd counted 0 graphs, Dynamo breaking at "
                      "FSDP2's hooks, as for fully_shard), so a compiled cell would be an eager "
                      "one by another name",
           sync_modes={"last": "replicate's set_requires_gradient_sync(False) on the first K-1 "
                               "micro-batches (their gradients summed locally)",
                       "each": "each unit's all-reduce in every micro-batch's backward"},
           collectives_counted="replicate: each unit's all-reduce timed from the start of its "
                               "post-backward (its gradients ready) to FSDP2's all-reduce hook, "
                               "called after it on its stream, with its bytes; on a CPU gloo's "
                               "all-reduce blocks backward until it completes, so the units' "
                               "all-reduces before the last one's lie inside the backward part",
           batchnorm_statistics="replicate (FSDP2's machinery) replicates parameters, not "
                                "buffers, and broadcasts none: each rank keeps the running "
                                "statistics of its own samples, and the statistics evaluated "
                                "with are rank 0's"),
]
