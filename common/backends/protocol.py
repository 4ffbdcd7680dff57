"""How a backend's gradients cross between its devices in one step, as data: the reduction, the
passes of a ring it makes, its messages and the knob that sizes them, and what its collectives'
time is part of. Each backend's traits hold one per device type (common.backends.traits); the
report, `xbench predict` and the attribution read these fields, never a backend's name.

The reduction words are the rows' `reduction` values (what each backend records it did).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

ALL_REDUCE = "all-reduce"          # a ring's reduce-scatter, then its all-gather
REDUCE_SCATTER = "reduce-scatter"  # each rank keeps the sum of its shard (parameters sharded)
REDUCE_TO_ONE = "reduce-to-one"    # every replica's gradients copied to one device, summed there
NO_REDUCTION = "none"              # one device: nothing crosses
MIB = 2**20
# When a message of the gradients can start (reports.step_model.timeline forms them so):
BUCKET_READY = "bucket-ready"          # a bucket as soon as its last gradient is ready (DDP)
FUSED_EACH_CYCLE = "fused-each-cycle"  # every cycle, the tensors ready by then, fused (Horovod)
AFTER_BACKWARD = "after-backward"      # every message once backward is over


@dataclass(frozen=True)
class Protocol:
    """One step's gradient traffic between a backend's devices on one device type."""
    reduction: str = NO_REDUCTION
    # Passes of a ring the gradients' reduction makes: an all-reduce two (reduce-scatter, then
    # all-gather), a reduce-scatter one; 0 for none or a reduction through one device.
    reduce_passes: int = 0
    # Passes of a ring gathering sharded parameters, by when the shards are freed again (the
    # `reshard` setting): FSDP gathers before forward and again before backward, once when it
    # keeps them from forward until after backward.
    gathers: Mapping[str, int] = field(default_factory=dict)
    # Every replica's gradients copied to one device and the sum copied back, inside one
    # process: 2(N-1) copies through that device's link, no library between processes.
    through_one_device: bool = False
    # The most one collective carries when the cell sets no bucket (None: one message for all
    # the gradients), and the first one's cap where it differs (DDP: 1 MiB, then 25 MiB).
    message_bytes: int | None = None
    first_message_bytes: int | None = None
    # How the bucket_mb setting reaches its library (None: it has no such knob).
    bucket_knob: str | None = None
    # Whether its collectives' time lies inside the forward and backward passes (or the one
    # compiled call) rather than timed apart: their compute cannot be told from them.
    collectives_in_compute: bool = False
    # When its messages can start (BUCKET_READY, FUSED_EACH_CYCLE, AFTER_BACKWARD), and the
    # cycle of a library that fuses each cycle (seconds).
    launch: str = AFTER_BACKWARD
    cycle_seconds: float = 0.0
    # Whether the cell's bucket_mb also groups the gradients into buckets each launched whole
    # (hvd-torch's DistributedOptimizer groups), not only caps what one message fuses.
    whole_buckets: bool = False

    @property
    def crosses(self) -> bool:
        """Whether anything crosses between devices."""
        return self.reduction != NO_REDUCTION

    @property
    def is_all_reduce(self) -> bool:
        """Whether its reduction is an all-reduce: what bus bandwidth (nccl-tests' busbw) and the
        probe's all-reduce rates are defined for."""
        return self.reduction == ALL_REDUCE

    def ring_passes(self, reshard: str) -> int:
        """Passes of a ring one step makes: its reduction's and its parameter gathers' under
        `reshard`."""
        return self.reduce_passes + self.gathers.get(reshard, 0)

    def caps(self, bucket_bytes: int | None = None) -> tuple[float, float]:
        """(the first message's cap, every other's) in bytes: the cell's buckets where its
        library takes them (`bucket_bytes`), else its library's own (inf: one message for all
        the gradients)."""
        if bucket_bytes and self.bucket_knob:
            return bucket_bytes, bucket_bytes
        cap = self.message_bytes or math.inf
        return self.first_message_bytes or cap, cap

    def messages(self, size: float, bucket_bytes: int | None = None) -> int:
        """How many collectives carry `size` bytes of gradients a step, in its caps."""
        first, cap = self.caps(bucket_bytes)
        if math.isinf(cap):
            return 1
        return 1 + max(0, math.ceil((size - first) / cap))

    def link_bytes(self, size: float, devices: int, reshard: str) -> float:
        """The bytes one device's link carries a step for `size` bytes of gradients over
        `devices`: the reducing device's 2(N-1) copies, or a ring's (N-1)/N of them per pass."""
        if self.through_one_device:
            return 2 * (devices - 1) * size
        return self.ring_passes(reshard) * (devices - 1) / devices * size


def everywhere(protocol: Protocol) -> dict[str, Protocol]:
    """The same protocol on every device type."""
    return {"cpu": protocol, "cuda": protocol}


NONE = Protocol()
RING_ALL_REDUCE = Protocol(ALL_REDUCE, reduce_passes=2)
# What a row's recorded reduction says where its backend is not in the traits table.
BY_REDUCTION = {NO_REDUCTION: NONE, ALL_REDUCE: RING_ALL_REDUCE,
                REDUCE_SCATTER: Protocol(REDUCE_SCATTER, reduce_passes=1),
                REDUCE_TO_ONE: Protocol(REDUCE_TO_ONE, through_one_device=True)}
