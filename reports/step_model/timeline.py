"""One step's collectives as a timeline: when each bucket's gradients are ready during backward,
when its collective runs on the library's one stream, and how much of it the step waits for once
backward is over. What reports.step_model.predict predicts a step's exposed communication with,
instead of a share of overlap.

- Gradients: the 1-device cell's backward as a curve of gradient bytes ready over time
  (common.measuring.timeline records each gradient's ready moment), its times scaled to the
  N-device cell's backward; where nothing recorded one, the bytes ready evenly over backward.
- Messages, as each library forms them (the backend's protocol, `launch`): DDP's buckets in the
  order the gradients are ready, the first closed at its 1 MiB and the rest at the cap, each
  launched when its last gradient is ready; Horovod's fusion, every cycle fusing the tensors
  ready by then up to its threshold, once its background thread is free; MultiWorkerMirrored
  Strategy's packs, DataParallel's and MirroredStrategy's copies and XLA's compiled step: every
  message once backward is over.
- One stream: a message starts at max(its ready moment, the previous one's end) and lasts its
  ring's latencies and bytes over the link at the library's efficiency
  (reports.step_model.step).
- Accumulation (K micro-batches a step): the curve holds every micro-batch's gradients over
  the step's K backward passes (the 1-device cell of the same K recorded them so; where nothing
  did, evenly), all of them crossing where each micro-batch syncs, only the last micro-batch's
  where the step syncs once (`crossing`). The forward passes between the backward passes are
  left out of the timeline: what ran under them counts as exposed, the cautious side.
- Exposed: the last message's end less backward's end, at least 0: one bucket exposes all of
  it, by construction.

Pure functions of numbers: unit-tested on constructed steps (tests/test_timeline.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xbench.common.backends.protocol import AFTER_BACKWARD, FUSED_EACH_CYCLE, Protocol

EVEN_PIECES = 64  # the pieces gradients are cut into where no curve was recorded


@dataclass(frozen=True)
class Gradient:
    """A gradient (or a piece of the gradients): seconds from backward's start to its ready
    moment, and its bytes on the wire."""
    ready: float
    size: float


@dataclass(frozen=True)
class Message:
    """One collective of the step: its bytes, when it could start, when it ran."""
    size: float
    ready: float
    start: float
    end: float


def recorded_curve(gradients: Sequence[dict], backward: float, recorded_backward: float
                   ) -> list[Gradient]:
    """A timeline record's gradients ({"ready", "bytes"} from backward's start) with their
    moments scaled from `recorded_backward` to `backward` seconds."""
    scale = backward / recorded_backward if recorded_backward > 0 else 0.0
    return [Gradient(min(g["ready"] * scale, backward), g["bytes"]) for g in gradients]


def even_curve(size: float, backward: float, pieces: int = EVEN_PIECES) -> list[Gradient]:
    """`size` bytes ready evenly over `backward` seconds, in `pieces` pieces."""
    return [Gradient(backward * (index + 1) / pieces, size / pieces) for index in range(pieces)]


def buckets(curve: Sequence[Gradient], first_cap: float, cap: float) -> list[Gradient]:
    """Gradients in the order they are ready, closed into buckets as DDP closes them: a bucket
    takes gradients until its bytes reach its cap (the first bucket's cap apart); each is ready
    when its last gradient is."""
    found, size, limit = [], 0.0, first_cap
    for gradient in sorted(curve, key=lambda g: g.ready):
        size += gradient.size
        if size >= limit:
            found.append(Gradient(gradient.ready, size))
            size, limit = 0.0, cap
    if size > 0:
        found.append(Gradient(max(g.ready for g in curve), size))
    return found


def on_one_stream(ready: Sequence[Gradient], seconds: Callable[[float], float]) -> list[Message]:
    """Messages queued on one stream in the order they are ready: each starts when it is ready
    and the previous one has ended, and lasts `seconds(bytes)`."""
    found, free = [], 0.0
    for message in sorted(ready, key=lambda m: m.ready):
        start = max(message.ready, free)
        free = start + seconds(message.size)
        found.append(Message(message.size, message.ready, start, free))
    return found


def fused_each_cycle(curve: Sequence[Gradient], cap: float, cycle: float,
                     seconds: Callable[[float], float]) -> list[Message]:
    """Horovod's background thread: at each cycle's tick once it is free, the tensors ready by
    then fused into messages of at most `cap` bytes (a tensor larger than it goes alone), run
    one after another."""
    pending = sorted(curve, key=lambda g: g.ready)
    found, free = [], 0.0
    while pending:
        tick = max(free, pending[0].ready)
        # the cycle's tick at or after it (never before it, whatever the rounding): the first
        # pending tensor is always taken, so each pass takes at least one
        tick = max(math.ceil(tick / cycle - 1e-9) * cycle, tick) if cycle > 0 else tick
        taken, size = 0, 0.0
        while taken < len(pending) and (taken == 0 or (pending[taken].ready <= tick
                                                       and size + pending[taken].size <= cap)):
            size += pending[taken].size
            taken += 1
        ready = pending[taken - 1].ready
        pending = pending[taken:]
        free = tick + seconds(size)
        found.append(Message(size, ready, tick, free))
    return found


def crossing(curve: Sequence[Gradient], micro_batches: int, each: bool) -> list[Gradient]:
    """The gradients that cross in one optimizer step of `micro_batches` micro-batches, from a
    curve of every micro-batch's gradients ready over the step's backward passes, in order:
    all of them where every micro-batch syncs, else only the last micro-batch's (the curve's
    last 1/K by count, carrying 1/K of its bytes: no_sync's, or a sum inside the step)."""
    if micro_batches == 1 or each or not curve:
        return list(curve)
    ordered = sorted(curve, key=lambda g: g.ready)
    last = ordered[len(ordered) - max(len(ordered) // micro_batches, 1):]
    scale = sum(g.size for g in curve) / micro_batches / sum(g.size for g in last)
    return [Gradient(g.ready, g.size * scale) for g in last]


def messages(curve: Sequence[Gradient], backward: float, protocol: Protocol,
             bucket_bytes: int | None, seconds: Callable[[float], float]) -> list[Message]:
    """The step's collectives as the backend's library forms and runs them, from the gradients
    ready over `backward` seconds (`seconds(bytes)`: one message's duration)."""
    if not curve or not protocol.crosses:
        return []
    first_cap, cap = protocol.caps(bucket_bytes)
    if protocol.launch == FUSED_EACH_CYCLE:
        if bucket_bytes and protocol.bucket_knob and protocol.whole_buckets:
            curve = buckets(curve, first_cap, cap)  # each group launched whole, then fused
        return fused_each_cycle(curve, cap, protocol.cycle_seconds, seconds)
    if protocol.launch == AFTER_BACKWARD:
        curve = [Gradient(backward, g.size) for g in curve]
    return on_one_stream(buckets(curve, first_cap, cap), seconds)


def exposed_seconds(found: Sequence[Message], backward: float) -> float:
    """What the step waits for after backward: the last collective's end less backward's end,
    at least 0."""
    return max(max((m.end for m in found), default=backward) - backward, 0.0)


def under_backward(found: Sequence[Message], backward: float) -> float:
    """Seconds of the collectives' running time that fell before backward's end."""
    return sum(max(min(m.end, backward) - m.start, 0.0) for m in found)


def hidden_share(exposed: float, moving: float) -> float | None:
    """1 - exposed / the collectives' own time: the share of it the step did not wait for (None
    where nothing moved)."""
    return min(max(1 - exposed / moving, 0.0), 1.0) if moving > 0 else None
