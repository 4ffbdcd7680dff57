"""A step's collectives alone: how long they take with nothing to overlap, the denominator of
the hidden share and the time under compute (common.measuring.basis).

Two clean sources, never a moving time measured beside backward (on a CPU a collective in
flight beside backward waits for a core, and its moving time says so, not how long it takes):

- `AFTER_BACKWARD`: where every collective of the steps that carry them was launched once
  backward was over, those collectives ran with nothing to overlap, on the same steps as the
  exposed communication they are set against (their moving time, from when the last rank was
  ready to their end). Nothing of them was hidden.
- `REPLAYED`: otherwise, once training is over, every rank replays the step's collectives (the
  bytes of each, in order, as its library reduced them in the last epoch) through the cell's
  own collectives (its library, its processes, its link, capped or not), launched together as
  the step launches them (the library queues or fuses them as it does then), each round after a
  barrier, a round's time from the last rank's launch (the shortest rank's: the others' hold
  how much later it left the barrier, common.measuring.peaks.last_launch_seconds),
  `ALONE_REPEATS` rounds after one to warm up, as `xbench probe` times a collective.

Framework-free: a framework loop gives the buffer its library reduces and its device's sync.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from xbench.common.measuring.peaks import last_launch_seconds

if TYPE_CHECKING:
    from xbench.common.backends.collectives import Collectives

# Between a replay's groups (a step's syncs): longer than a capped link's token bucket takes
# to refill (common.running.link_cap: 4 ms), as a micro-batch's compute is.
SYNC_PAUSE_SECONDS = 0.01
ALONE_REPEATS = 5
AFTER_BACKWARD = "after backward"
REPLAYED = "replayed"
SOURCES = {AFTER_BACKWARD: "every collective of the steps that carry them ran after backward, "
                           "with nothing to overlap: their moving time on those steps",
           REPLAYED: "the step's collectives replayed after training through the cell's own "
                     "library and processes, nothing to overlap (from the last rank's launch, "
                     f"fastest of {ALONE_REPEATS} rounds)"}


def step_messages(ranks: Sequence[dict]) -> list[int]:
    """The bytes of each collective of a step, in order, as rank 0's timeline of the last epoch
    holds them (every rank reduces the same messages); [] where a message's bytes were not
    told or no timeline was kept."""
    timeline = ranks[0].get("timeline") if ranks else None
    sizes = [c["bytes"] for c in (timeline or {}).get("collectives", [])]
    return sizes if sizes and None not in sizes else []


def all_after_backward(ranks: Sequence[dict]) -> bool:
    """Whether every rank's every collective of its timeline's steps was launched after
    backward (the timeline's `after_backward.all`)."""
    timelines = [rank.get("timeline") for rank in ranks]
    return bool(timelines) and all(t and t.get("after_backward") and t["after_backward"]["all"]
                                   for t in timelines)


def replay(comm: Collectives, make_buffer: Callable[[int], Any], sync: Callable[[], None],
           sizes: list[int], syncs: int = 1, repeats: int = ALONE_REPEATS) -> dict:
    """Every rank calls this with the same `sizes`: the step's collectives, a buffer of each
    size, launched together (`Collectives.sum_all`) in `syncs` groups (a step that syncs after
    each of its micro-batches: its messages are each sync's in turn), timed `repeats` rounds
    after a warm-up one. Each group is timed on its own, after a barrier and a pause
    (SYNC_PAUSE_SECONDS): in the step a micro-batch's compute separated them, and what a link
    holds between its transfers (a queue drained, a capped link's token bucket refilled) is
    the step's, not a back-to-back replay's. The record: seconds (the fastest round, each
    group from the last rank's launch, summed: other work on the machine, and a library's
    cycle and polling, only add to a round), its lowest and highest, the rounds, messages and
    bytes, and the source."""
    buffers = [make_buffer(size) for size in sizes]
    per_sync = len(buffers) // syncs if syncs > 1 and len(buffers) % syncs == 0 else len(buffers)
    groups = [buffers[i:i + per_sync] for i in range(0, len(buffers), per_sync)]

    def group_seconds(group: list) -> float:
        comm.barrier()
        if len(groups) > 1:
            time.sleep(SYNC_PAUSE_SECONDS)
        started = time.perf_counter()
        comm.sum_all(group)
        sync()
        return time.perf_counter() - started
    [group_seconds(group) for group in groups]  # the warm-up round
    mine = [group_seconds(group) for _ in range(repeats) for group in groups]
    each = last_launch_seconds(comm.gather(mine))  # round by round, group by group
    rounds = np.asarray(each, dtype=float).reshape(repeats, len(groups)).sum(axis=1)
    return {"seconds": float(rounds.min()), "low": float(rounds.min()),
            "high": float(rounds.max()), "repeats": repeats, "messages": len(sizes),
            "bytes": int(sum(sizes)), "source": REPLAYED}
