"""Why a step takes what it takes: every step of every rank split into parts that add up.

Each rank keeps, per step, the moments its loop and its backend can see (`StepMarks`): when the
loop asked for the batch and got it, when its forward, backward and optimizer ended, and, where
the backend's gradients cross between ranks, when this rank's own compute for the collective was
done (`ready`) and when it stopped waiting for the collective (`end`), as the library that does it
reports (DDP's and Horovod's gradient hooks and the end of their wait, TensorFlow's profiler
trace). Times are seconds from the epoch's origin, taken on every rank right after the barrier
that starts the epoch, so that ranks' times compare.

A step's window, from asking for its batch to the end of its bookkeeping, is then partitioned
(`partition`): each moment belongs to exactly one part, so the parts add up to the window by
construction. The collective's wait is split where the last rank became ready: before it, this
rank was waiting for the slowest rank; after it, for the communication itself. What the windows
of an epoch's steps do not cover (set-up of the epoch's iterator, the final synchronisation) is
the residual: an epoch whose residual is more than `ADDS_UP` of its time is marked.

Framework-free: the framework loops record the moments; the arithmetic is here, once.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# The parts of a step, in the order they are shown.
PARTS = ("input", "forward", "backward", "optimizer", "waiting", "communication", "host")
MEANING = {
    "input": "waiting for the input pipeline's next batch",
    "forward": "the forward pass and the loss",
    "backward": "the backward pass's own compute",
    "optimizer": "the optimizer's update",
    "waiting": "waiting for the slowest rank to reach the collective",
    "communication": "exposed communication: the step waits for the collective after every "
                     "rank's compute is done",
    "host": "host overhead: everything else in the step (copies, dispatch, bookkeeping)",
}
COMPUTE = ("forward", "backward", "optimizer")
# "off": the loop keeps only each step's window and its input wait (what a row's step times and
# input seconds need), and no library is asked about its collectives: the plain loop that
# benchmarks/attribution_cost.py times the instruments against. Never off in a grid's rows.
INSTRUMENTED = os.environ.get("XBENCH_ATTRIBUTION", "on") != "off"
# A step's opaque call (a tf.function): the marks see only its ends, so it is split as the calls
# of the steps a tracer saw were (`call_shares`).
CALL = "call"
ADDS_UP = 0.05  # the residual (epoch time the step windows do not cover) allowed
# Which label wins where intervals overlap: a compute op counted in a trace over the collective's
# wait (the rank is busy, not waiting), the collective's wait over the coarse windows between
# the loop's marks (a DDP backward call includes its wait for the all-reduce).
MARKED, COLLECTIVE, COUNTED = 1, 2, 3


@dataclass
class Step:
    """One step of one rank: its window, the labelled intervals its loop and backend saw, and
    the collective's moments (None where the step has no collective)."""
    start: float
    end: float = math.nan
    intervals: list[tuple[str, float, float, int]] = field(default_factory=list)
    ready: float | None = None         # this rank's compute for the collective done
    collective_end: float | None = None  # this rank stopped waiting for the collective
    collective_busy: float = 0.0       # seconds a collective of this step was in flight
    collective_bytes: int | None = None  # the bytes its collectives reduced, where counted


class StepMarks:
    """The moments of one rank's steps in one epoch. The loop calls `begin` when it asks for a
    batch, `mark(part)` at the end of each part it sees and `end` after the step's bookkeeping;
    a backend adds its collective's moments with `collective`. A moment is whatever `stamp`
    returns (the host clock, or a CUDA event on a GPU, so that a part is device time), turned
    into seconds from the epoch's origin by `seconds(origin, moment)` once the epoch is over."""

    def __init__(self, stamp: Callable[[], object] = time.perf_counter,
                 seconds: Callable[[object, object], float] = lambda a, b: b - a):
        self.stamp, self.seconds = stamp, seconds
        self.origin = None
        self._raw: list[list] = []

    def start_epoch(self) -> None:
        """The epoch's origin: call right after the barrier that starts the epoch."""
        self.origin, self._raw = self.stamp(), []

    def begin(self) -> None:
        moment = self.stamp()
        self._raw.append([moment, None, [], None])  # start, end, marks, collective
        self._last = moment

    def mark(self, part: str) -> None:
        """The part that ran since the previous mark has ended now."""
        moment = self.stamp()
        self._raw[-1][2].append((part, self._last, moment))
        self._last = moment

    def collective(self, ready, end, busy: float, size: int | None = None) -> None:
        """This step's collective: `ready` and `end` are moments (of `stamp`), `busy` the seconds
        a collective of the step was in flight, `size` the bytes it reduced (where counted)."""
        self._raw[-1][3] = (ready, end, busy, size)

    def end(self) -> None:
        self.mark("host")
        self._raw[-1][1] = self._last

    def discard(self) -> None:
        """Drop the step just begun (the loop asked for a batch and there was none)."""
        self._raw.pop()

    def steps(self) -> list[Step]:
        """The epoch's steps in seconds from its origin (call after the epoch's final sync)."""
        at = lambda moment: self.seconds(self.origin, moment)  # noqa: E731
        steps = []
        for start, end, marks, collective in self._raw:
            step = Step(at(start), at(end), [(part, at(a), at(b), MARKED) for part, a, b in marks])
            if collective:
                step.ready, step.collective_end = at(collective[0]), at(collective[1])
                step.collective_busy, step.collective_bytes = collective[2], collective[3]
            steps.append(step)
        return steps


class WindowMarks(StepMarks):
    """StepMarks that keep only each step's window and its input part (INSTRUMENTED off)."""

    def mark(self, part: str) -> None:
        if part == "input":
            super().mark(part)

    def collective(self, ready, end, busy: float, size: int | None = None) -> None:
        pass

    def end(self) -> None:
        self._last = self.stamp()
        self._raw[-1][1] = self._last


class CollectiveClock:
    """What a library tells of one step's gradient collectives: when each was launched (this
    rank's gradients for it ready) and its bytes, as they happen (from the library's hooks), and
    when the step stopped waiting for them all (after DDP's backward, or Horovod's
    synchronize). `take` ends the step: (ready, end, seconds in flight, bytes), or None where none
    was launched."""

    def __init__(self, stamp: Callable[[], object] = time.perf_counter,
                 seconds: Callable[[object, object], float] = lambda a, b: b - a):
        self.stamp, self.seconds = stamp, seconds
        self._launched, self._done, self._bytes = [], None, 0

    def launched(self, size: int = 0) -> None:
        self._launched.append(self.stamp())
        self._bytes += size

    def done(self, size: int = 0) -> None:
        """Every collective of the step has completed (`size`: their bytes, where the launches
        did not tell them)."""
        self._done = self.stamp()
        self._bytes += size

    def take(self) -> tuple | None:
        launched, done, size = self._launched, self._done, self._bytes
        self._launched, self._done, self._bytes = [], None, 0
        if not launched or done is None:
            return None
        return launched[-1], done, self.seconds(launched[0], done), size


def covered_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start, end) spans."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def partition(step: Step, latest_ready: float | None) -> dict[str, float]:
    """Seconds of each part in `step`'s window (and of an opaque CALL, where there is one):
    every moment goes to the highest-priority interval covering it, host where none does.
    `latest_ready`: when the last rank became ready for this step's collective (None: this
    rank's own moment, or no collective)."""
    intervals = list(step.intervals)
    if step.ready is not None and step.collective_end is not None:
        turn = max(step.ready, min(latest_ready if latest_ready is not None else step.ready,
                                   step.collective_end))
        intervals += [("waiting", step.ready, turn, COLLECTIVE),
                      ("communication", turn, step.collective_end, COLLECTIVE)]
    cuts = sorted({step.start, step.end, *(t for _, a, b, _ in intervals for t in (a, b)
                                           if step.start < t < step.end)})
    parts = dict.fromkeys(PARTS, 0.0)
    for low, high in zip(cuts, cuts[1:]):
        middle = (low + high) / 2
        covering = [(priority, label) for label, a, b, priority in intervals if a <= middle < b]
        label = max(covering)[1] if covering else "host"
        parts[label] = parts.get(label, 0.0) + high - low
    return parts


def call_shares(traced: Sequence[Step], latest: Sequence[float | None]) -> dict[str, float]:
    """The share of each part in the traced steps' calls (their windows), and of the time a
    collective was in flight (`collective_busy`), over all of them together."""
    window = sum(step.end - step.start for step in traced) or 1.0
    totals = dict.fromkeys(PARTS, 0.0)
    for step, moment in zip(traced, latest):
        for part, seconds in partition(step, moment).items():
            totals[part] += seconds
    return {**{part: totals[part] / window for part in PARTS},
            "collective_busy": sum(step.collective_busy for step in traced) / window}


def split(step: Step, latest: float | None,
          shares: dict[str, float] | None = None) -> tuple[dict[str, float], float]:
    """(seconds of each part, seconds a collective was in flight) of one step; an opaque call
    in it is split by `shares` (`call_shares`; without them it stays host overhead)."""
    parts = partition(step, latest)
    call, busy = parts.pop(CALL, 0.0), step.collective_busy
    if shares is None:
        parts["host"] += call
    else:
        for part in PARTS:
            parts[part] += call * shares[part]
        busy += call * shares["collective_busy"]
    return parts, busy


def summarize(steps: Sequence[Step], latest: Sequence[float | None], epoch_seconds: float,
              shares: dict[str, float] | None = None) -> dict:
    """One rank's epoch: per part its total seconds and its median, 10th and 90th percentile
    over the steps; the time its collectives moved data (in flight, less waiting for the slowest
    rank); the residual (epoch time not in any step's window) and whether it is within
    ADDS_UP."""
    split_steps = [split(step, moment, shares) for step, moment in zip(steps, latest)]
    record = {}
    for part in PARTS:
        values = np.asarray([parts[part] for parts, _ in split_steps], dtype=float)
        record[part] = {"seconds": float(values.sum()),
                        **dict(zip(("median", "p10", "p90"),
                                   map(float, np.percentile(values, [50, 10, 90]))))}
    moving = [max(busy - parts["waiting"], 0.0) for parts, busy in split_steps]
    sizes = [step.collective_bytes for step in steps if step.collective_bytes]
    residual = epoch_seconds - sum(record[part]["seconds"] for part in PARTS)
    return {"parts": record, "steps": len(steps), "residual_seconds": residual,
            "adds_up": abs(residual) <= ADDS_UP * epoch_seconds,
            "collective": {"busy_seconds": sum(busy for _, busy in split_steps),
                           "moving_seconds": sum(moving),
                           "moving_median": float(np.median(moving)) if moving else 0.0,
                           "bytes_per_step": int(np.median(sizes)) if sizes else None}}


def latest_ready(ready_by_rank: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per step, when the last rank was ready for its collective (None where no rank had one)."""
    latest = []
    for moments in zip(*ready_by_rank):
        known = [m for m in moments if m is not None]
        latest.append(max(known) if known else None)
    return latest


def slowest_rank(ranks: Sequence[dict]) -> int | None:
    """The rank the others waited for: the one that waited least (None on one rank, or where
    nobody waited)."""
    waited = [r["parts"]["waiting"]["seconds"] for r in ranks]
    if len(ranks) < 2 or max(waited) <= 0:
        return None
    return int(np.argmin(waited))


def mean_parts(ranks: Sequence[dict]) -> dict[str, float]:
    """Seconds of each part in an epoch, the mean over the ranks (each rank's parts add up to
    its own steps' windows)."""
    return {part: float(np.mean([r["parts"][part]["seconds"] for r in ranks])) for part in PARTS}


def split_text(ranks: Sequence[dict]) -> str:
    """'input 3% · forward 21% · ...' of an epoch's steps (the ranks' mean), the parts above 0."""
    parts = mean_parts(ranks)
    whole = sum(parts.values()) or 1.0
    return " · ".join(f"{part} {seconds / whole:.0%}" for part, seconds in parts.items()
                      if seconds / whole >= 0.005)
