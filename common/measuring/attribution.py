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
from typing import NamedTuple

import numpy as np

# The parts of a step, in the order they are shown.
PARTS = ("input", "forward", "backward", "optimizer", "waiting", "communication", "host",
         "untraced")
MEANING = {
    "input": "waiting for the input pipeline's next batch",
    "forward": "the forward pass and the loss",
    "backward": "the backward pass's own compute",
    "optimizer": "the optimizer's update",
    "waiting": "waiting for the slowest rank to reach the collective",
    "communication": "exposed communication: the step waits for the collective after every "
                     "rank's compute is done",
    "host": "host overhead: the step's own work outside the other parts (copies, dispatch, "
            "bookkeeping), as the loop marks it",
    "untraced": "time in the step that no mark and no traced op covers (inside a "
                "tf.function's or a JAX program's call: what its trace does not account for)",
}
COMPUTE = ("forward", "backward", "optimizer")
# "off": the loop keeps only each step's window and its input wait (what a row's step times and
# input seconds need), and no library is asked about its collectives: the plain loop that
# benchmarks/attribution_cost.py times the instruments against. Never off in a grid's rows.
INSTRUMENTED = os.environ.get("XBENCH_ATTRIBUTION", "on") != "off"
# A step's opaque call (a tf.function, a JAX compiled step): the marks see only its ends, so it
# is split as the calls of the steps a tracer saw were (`call_shares`).
CALL = "call"
ADDS_UP = 0.05  # the residual (epoch time the step windows do not cover) allowed
# Which label wins where intervals overlap: a compute op counted in a trace over the collective's
# wait (the rank is busy, not waiting), the collective's wait over the coarse windows between
# the loop's marks (a DDP backward call includes its wait for the all-reduce).
MARKED, COLLECTIVE, COUNTED = 1, 2, 3


class Flight(NamedTuple):
    """One collective of a step on one rank: when it was launched and completed, the bytes it
    reduced where the library tells them (a DDP bucket's buffer, a Horovod tensor), and whether
    it blocked the rank: its call returned only once it was done, so that nothing else of the
    rank ran meanwhile (FSDP2's collectives on a CPU), its whole flight communication."""
    launch: float
    end: float
    size: int | None = None
    blocking: bool = False


@dataclass
class Step:
    """One step of one rank: its window, the labelled intervals its loop and backend saw, and
    the collective's moments (None where the step has no collective)."""
    start: float
    end: float = math.nan
    intervals: list[tuple[str, float, float, int]] = field(default_factory=list)
    ready: float | None = None         # this rank's compute for the collective done
    collective_end: float | None = None  # this rank stopped waiting for the collective
    # Each collective of the step on this rank, from its launch to its completion, as the
    # library that runs it tells (DDP's communication hook and its future, Horovod's handles,
    # TensorFlow's trace).
    collectives: list[Flight] = field(default_factory=list)
    collective_bytes: int | None = None  # the bytes its collectives reduced, where counted
    # Each gradient as it became ready (its hook), with its bytes on the wire, in that order:
    # the curve of bytes ready over backward that reports.step_model.timeline forms buckets from.
    gradients: list[tuple[float, int]] = field(default_factory=list)


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

    def collective(self, ready, end, timed: list[tuple], size: int | None = None,
                   gradients: list[tuple] = ()) -> None:
        """This step's collectives: `ready` (this rank's compute for them done) and `end` (it
        stopped waiting for them) are moments of `stamp` (None where nothing was launched),
        `timed` each one's (launch, completion, bytes or None, whether it blocked the rank),
        `size` the bytes they reduced (where counted), `gradients` each gradient's (ready
        moment, bytes)."""
        self._raw[-1][3] = (ready, end, timed, size, gradients)

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
                ready, end, timed, size, gradients = collective
                step.gradients = [(at(moment), bytes_) for moment, bytes_ in gradients]
                if timed:
                    step.ready, step.collective_end = at(ready), at(end)
                    step.collectives = [Flight(at(a), at(b), n, blocks)
                                        for a, b, n, blocks in timed]
                    step.collective_bytes = size
                    # a collective that blocked the rank is communication, whatever part of
                    # the step it ran in (its wait for a slower rank too)
                    step.intervals += [("communication", f.launch, f.end, COLLECTIVE)
                                       for f in step.collectives if f.blocking]
            steps.append(step)
        return steps


class WindowMarks(StepMarks):
    """StepMarks that keep only each step's window and its input part (INSTRUMENTED off)."""

    def mark(self, part: str) -> None:
        if part == "input":
            super().mark(part)

    def collective(self, ready, end, timed: list[tuple], size: int | None = None,
                   gradients: list[tuple] = ()) -> None:
        pass

    def end(self) -> None:
        self._last = self.stamp()
        self._raw[-1][1] = self._last


def with_trace(marked: Step, traced: Step) -> Step:
    """A step whose opaque call a tracer saw inside: its marks outside the call, the traced ops
    in it (what they do not cover of the call is untraced), and the collectives the trace
    timed."""
    return Step(marked.start, marked.end,
                [i for i in marked.intervals if i[0] != CALL] + traced.intervals,
                traced.ready, traced.collective_end, list(traced.collectives),
                traced.collective_bytes, list(traced.gradients))


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
    every moment goes to the highest-priority interval covering it, untraced where none does.
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
        label = max(covering)[1] if covering else "untraced"
        parts[label] = parts.get(label, 0.0) + high - low
    return parts


def overlap(step: Step) -> tuple[float, float]:
    """(seconds a collective of `step` was in flight, of them the seconds this rank also
    computed): HTA's and the PyTorch profiler's overlap is their ratio. Compute is the step's
    forward, backward and optimizer until the rank's gradients were all ready (a backward call
    that waits for its collectives, as DDP's does, computes nothing while it waits), but while a
    collective blocked the rank."""
    until = step.ready if step.ready is not None else step.end
    flying = [(max(a, step.start), min(b, step.end)) for a, b, *_ in step.collectives
              if b > step.start and a < step.end]
    computing = [(a, min(b, until)) for label, a, b, _ in step.intervals
                 if label in COMPUTE and a < until]
    blocked = [(a, b) for a, b, _, blocking in step.collectives if blocking]
    communicating = covered_seconds(flying)
    both = common_seconds(flying, computing) - common_seconds(blocked, computing)
    return communicating, max(both, 0.0)


def common_seconds(spans: Sequence[tuple[float, float]],
                   others: Sequence[tuple[float, float]]) -> float:
    """Seconds covered both by one of `spans` and by one of `others`."""
    return covered_seconds(spans) + covered_seconds(others) - covered_seconds([*spans, *others])


def call_shares(traced: Sequence[Step], latest: Sequence[float | None]) -> dict[str, float]:
    """The share of each part in the traced steps' calls (their windows), and of the time a
    collective was in flight and of it the time it overlapped compute, over all of them
    together."""
    window = sum(step.end - step.start for step in traced) or 1.0
    totals = dict.fromkeys([*PARTS, "communicating", "overlapped"], 0.0)
    for step, moment in zip(traced, latest):
        for part, seconds in partition(step, moment).items():
            totals[part] += seconds
        flying, both = overlap(step)
        totals["communicating"] += flying
        totals["overlapped"] += both
    return {name: seconds / window for name, seconds in totals.items()}


def split(step: Step, latest: float | None,
          shares: dict[str, float] | None = None) -> tuple[dict[str, float], float, float]:
    """(seconds of each part, seconds a collective was in flight, of them the seconds overlapped
    by compute) of one step; an opaque call in it is split by `shares` (`call_shares`; without
    them it is untraced)."""
    parts = partition(step, latest)
    call = parts.pop(CALL, 0.0)
    communicating, overlapped = overlap(step)
    if shares is None:
        parts["untraced"] += call
    else:
        for part in PARTS:
            parts[part] += call * shares[part]
        communicating += call * shares["communicating"]
        overlapped += call * shares["overlapped"]
    return parts, communicating, overlapped


def summarize(steps: Sequence[Step], latest: Sequence[float | None], epoch_seconds: float,
              shares: dict[str, float] | None = None) -> dict:
    """One rank's epoch: per part its total seconds and its median, 10th and 90th percentile
    over the steps; its collectives (`collective_record`); the residual (epoch time not in any
    step's window) and whether it is within ADDS_UP."""
    split_steps = [split(step, moment, shares) for step, moment in zip(steps, latest)]
    record = {}
    for part in PARTS:
        values = np.asarray([parts[part] for parts, _, _ in split_steps], dtype=float)
        record[part] = {"seconds": float(values.sum()),
                        **dict(zip(("median", "p10", "p90"),
                                   map(float, np.percentile(values, [50, 10, 90]))))}
    residual = epoch_seconds - sum(record[part]["seconds"] for part in PARTS)
    return {"parts": record, "steps": len(steps), "residual_seconds": residual,
            "adds_up": abs(residual) <= ADDS_UP * epoch_seconds,
            "collective": collective_record(steps, split_steps)}


def collective_record(steps: Sequence[Step], split_steps: list[tuple]) -> dict:
    """A rank's collectives over an epoch's steps, from their launch-to-completion times: the
    time one was in flight (busy) and, of it, the time this rank also computed (overlapped:
    their ratio is the overlap share, None where nothing was in flight); the time they moved
    data (in flight, less waiting for the slowest rank), per step its median; and the
    collectives and bytes they reduced per step (optimizer step: every micro-batch's) where
    counted.

    One basis: the steps that carry collectives (`basis_steps`; every step where a library's
    hooks time each one, the traced steps where a profiler sees them, none on one device), and
    on those steps alone, per step, the means every derived number of the why is made of: the
    exposed communication (`exposed_mean`, the step's communication part), the wait for the
    slowest rank (`waiting_mean`), the time in flight (`busy_mean`), of it overlapped by compute
    (`overlapped_mean`) and moving data (`moving_mean`); and the collectives a step counted on
    them (never a median over steps that record none)."""
    carrying = [i for i, step in enumerate(steps) if step.collectives]
    busy = [flying for _, flying, _ in split_steps]
    overlapped = [both for _, _, both in split_steps]
    moving = [max(flying - parts["waiting"], 0.0) for parts, flying, _ in split_steps]
    sizes = [steps[i].collective_bytes for i in carrying if steps[i].collective_bytes]

    def median(values):
        return float(np.median(values)) if values else 0.0

    def basis_mean(values):
        return float(np.mean([values[i] for i in carrying])) if carrying else 0.0
    return {"busy_seconds": sum(busy), "busy_median": median(busy),
            "overlapped_seconds": sum(overlapped), "overlapped_median": median(overlapped),
            "overlap_share": sum(overlapped) / sum(busy) if sum(busy) > 0 else None,
            "moving_seconds": sum(moving), "moving_median": median(moving),
            "bytes_per_step": int(np.median(sizes)) if sizes else None,
            "collectives_per_step": (float(np.median([len(steps[i].collectives)
                                                      for i in carrying]))
                                     if carrying else None),
            "basis_steps": len(carrying),
            "exposed_mean": basis_mean([parts["communication"] for parts, _, _ in split_steps]),
            "waiting_mean": basis_mean([parts["waiting"] for parts, _, _ in split_steps]),
            "busy_mean": basis_mean(busy), "overlapped_mean": basis_mean(overlapped),
            "moving_mean": basis_mean(moving)}


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
