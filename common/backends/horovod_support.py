"""What the processes of both Horovod backends (hvd-torch, hvd-tf) share: the compressor, the
row's details and the gather; `hvd` is horovod.torch or horovod.tensorflow, initialised. (How
their processes start and what they need: common.backends.launch_scopes, traits and start.)
"""
import importlib.metadata
import os
from collections.abc import Sequence


def init(hvd, bucket_bytes: int) -> None:
    """hvd.init() with the cell's fusion threshold (`bucket_bytes`; 0: Horovod's own), read by
    hvd.init() alike on every rank. A rank that is not talking through Gloo fails here: xbench's
    horovodrun skips horovodrun's own check that Horovod was built with it
    (common.running.horovodrun)."""
    if bucket_bytes:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(bucket_bytes)
    hvd.init()
    if not hvd.gloo_enabled():
        raise RuntimeError(
            f"Horovod {importlib.metadata.version('horovod')} did not start its ranks over Gloo "
            f"(built with Gloo: {bool(hvd.gloo_built())}); xbench runs Horovod with horovodrun "
            f"--gloo: reinstall Horovod with HOROVOD_WITH_GLOO=1 (scripts/build_horovod.sh)")


def compressor(hvd, compression: str):
    """Horovod's compressor for the cell's `compression` (one of COMPRESSIONS)."""
    return hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none


def buckets(sizes: Sequence[int], megabytes: float) -> list[list[int]]:
    """The gradients of `sizes` bytes (in the model's order), as indices, in buckets of at most
    `megabytes` (2^20 bytes) each, as DDP forms them: in the reverse of their order, which is
    about the order backward makes them (a gradient larger than a bucket is a bucket of its
    own). Each is one Horovod group, launched whole once all of its gradients are ready."""
    limit, groups, size = megabytes * 2**20, [[]], 0
    for index in reversed(range(len(sizes))):
        if groups[-1] and size + sizes[index] > limit:
            groups.append([])
            size = 0
        groups[-1].append(index)
        size += sizes[index]
    return groups


def details(hvd, compression: str):
    """What a row records of Horovod (`hvd`: horovod.torch or horovod.tensorflow, initialised)."""
    controller = "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else None
    compressed = "" if compression == "none" else f", gradients compressed: {compression}"
    reduction = (("none", "Horovod skips its all-reduce at size 1") if hvd.size() == 1 else
                 ("all-reduce", f"Horovod's ring all-reduce over {controller}{compressed}"))
    return {"horovod_version": importlib.metadata.version("horovod"), "controller": controller,
            "gpu_operations": "nccl" if hvd.nccl_built() else None, "hvd_size": hvd.size(),
            "launcher": f"horovodrun --gloo, {hvd.cross_size()} host(s)",
            "reduction": reduction[0], "collective_library": "horovod",
            "reduction_detail": reduction[1]}


class HorovodGather:
    """Mixed into both Horovod collectives classes: what horovod.torch and horovod.tensorflow
    (`hvd`, initialised) offer alike. Each backend adds the collectives whose calls differ."""

    def __init__(self, hvd):
        self.hvd = hvd
        self.rank, self.world = hvd.rank(), hvd.size()

    def gather(self, value):
        """Under one name on every rank: Horovod pairs the ranks' collectives by name, and
        allgather_object names its own by the value's type, so a float on rank 0 and None on
        the others (an accuracy only rank 0 measured) waited for each other for ever."""
        return self.hvd.allgather_object(value, name="xbench.gather")
