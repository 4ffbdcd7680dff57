"""pt-fsdp's collectives told to the step's CollectiveClock (common.measuring.collective_clock):
FSDP2's default all-gather and reduce-scatter, each subclassed to time its calls, set on each
unit by FSDP2's public set_custom_all_gather / set_custom_reduce_scatter.

A collective is launched when called and completed when its Work's future completes, or when
the call returns where FSDP2 waits in it (async_op False): on a CPU gloo's collective then
blocks the rank (the Flight is `blocking`: nothing else of the rank ran meanwhile); on a GPU
the call only queues it on FSDP2's own stream, where the clock's CUDA event after it marks its
end. A reduce-scatter's input is a unit's gradients, all ready by then (FSDP2 calls it from the
unit's post-backward hook): their bytes are what the step reduces, as a DDP bucket's are. An
all-gather's bytes, the unit's parameters, are told as None (the row's traffic counts them), so
that a step's counted bytes stay its gradients' in every backend."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
    DefaultAllGather,
    DefaultReduceScatter,
)

from xbench.common.measuring.collective_clock import CollectiveClock


def timed(clock: CollectiveClock, call: Callable[[], object], size: int | None,
          input_tensor: torch.Tensor, async_op: bool):
    """`call()` (a collective of `size` bytes on `input_tensor`) told to `clock`: its Work."""
    op = clock.launch(size, blocking=input_tensor.device.type == "cpu" and not async_op)
    work = call()
    if work is None or not async_op:
        clock.complete(op)
    else:
        work.get_future().then(lambda _: clock.complete(op))
    return work


class TimedAllGather(DefaultAllGather):
    def __init__(self, clock: CollectiveClock):
        super().__init__()
        self.clock = clock

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        call = partial(super().__call__, output_tensor, input_tensor, group, async_op)
        return timed(self.clock, call, None, input_tensor, async_op)


class TimedReduceScatter(DefaultReduceScatter):
    def __init__(self, clock: CollectiveClock):
        super().__init__()
        self.clock = clock

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        size = input_tensor.numel() * input_tensor.element_size()
        self.clock.ready(size)  # the unit's gradients, every one ready
        call = partial(super().__call__, output_tensor, input_tensor, group, op, async_op)
        return timed(self.clock, call, size, input_tensor, async_op)
