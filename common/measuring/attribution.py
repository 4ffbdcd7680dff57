"""Why a step takes what it takes: every step of every rank split into parts that add up.

Each rank keeps, per step, the moments its loop and its backend can see
(common.measuring.step_marks.StepMarks): when the
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
                "tf.function's or a JAX program's call: what its trace does not account for), "
                "and a compiled TensorFlow step, which its trace sees as one op it cannot split",
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


class Sync(NamedTuple):
    """One wait of a step for its collectives before its last (a micro-batch's that crosses
    before the optimizer's, --accumulate-sync each): when this rank's compute for it was done,
    when it stopped waiting, and when the last rank's compute for it was done (None: not
    gathered, this rank's own; `everyones_ready` sets it)."""
    ready: float
    end: float
    latest: float | None = None


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
    # The step's waits for its collectives before the one that `ready` and `collective_end`
    # bound (accumulate_sync each: every micro-batch's but the last's), in order.
    earlier_syncs: list[Sync] = field(default_factory=list)


def with_trace(marked: Step, traced: Step) -> Step:
    """A step whose opaque call a tracer saw inside: its marks outside the call, the traced ops
    in it and the gaps between ops of one part (`bridged`; what they do not cover of the call is
    untraced), and the collectives the trace timed."""
    return Step(marked.start, marked.end,
                [i for i in marked.intervals if i[0] != CALL] + traced.intervals
                + bridged(traced.intervals, traced.collectives),
                traced.ready, traced.collective_end, list(traced.collectives),
                traced.collective_bytes, list(traced.gradients), list(traced.earlier_syncs))


def bridged(ops: Sequence[tuple[str, float, float, int]],
            flights: Sequence[Flight] = ()) -> list[tuple[str, float, float, int]]:
    """The gaps inside a traced call where no op runs, between an op of a compute part and the
    next op, of the same part: that part's (the runtime going from one of its kernels to the
    next: a backward of many small ops leaves many such gaps, a forward of few large ones
    hardly any). A gap between ops of different parts, or one a collective flies in (the rank
    may be waiting for it), stays as it was."""
    spans = sorted((a, b, label) for label, a, b, _ in ops if label in COMPUTE)
    gaps, reach, before = [], -math.inf, None
    for start, end, label in spans:
        if (start > reach and label == before
                and not any(f.launch < start and f.end > reach for f in flights)):
            gaps.append((label, reach, start, COUNTED))
        if end > reach:
            reach, before = end, label
    return gaps


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
    every moment goes to the highest-priority intervals covering it, untraced where none does.
    Where intervals of two or more parts cover a moment at the same priority (a backward op on
    one thread beside an optimizer op on another, one device's forward beside another's
    backward) the moment is split equally among those parts: each ran then, the moment says
    no more of which the step waited for, and an equal split is the one rule that neither
    depends on the parts' order nor lets a part claim time it shared; each part's seconds stay
    within the time it ran, and the parts still add up to the window. Each wait for the
    collectives (`ready` to `collective_end`, and each of `earlier_syncs`) is split where the
    last rank became ready: waiting before, communication after. `latest_ready`: when the last
    rank became ready for the step's last wait (None: this rank's own moment, or no
    collective)."""
    intervals = list(step.intervals)
    waits = list(step.earlier_syncs)
    if step.ready is not None and step.collective_end is not None:
        waits.append(Sync(step.ready, step.collective_end, latest_ready))
    for ready, end, latest in waits:
        turn = max(ready, min(latest if latest is not None else ready, end))
        intervals += [("waiting", ready, turn, COLLECTIVE),
                      ("communication", turn, end, COLLECTIVE)]
    cuts = sorted({step.start, step.end, *(t for _, a, b, _ in intervals for t in (a, b)
                                           if step.start < t < step.end)})
    parts = dict.fromkeys(PARTS, 0.0)
    for low, high in zip(cuts, cuts[1:]):
        middle = (low + high) / 2
        covering = [(priority, label) for label, a, b, priority in intervals if a <= middle < b]
        top = max((priority for priority, _ in covering), default=None)
        running = sorted({label for priority, label in covering if priority == top}) or ["untraced"]
        for label in running:
            parts[label] = parts.get(label, 0.0) + (high - low) / len(running)
    return parts


def overlap(step: Step) -> tuple[float, float]:
    """(seconds a collective of `step` was in flight, of them the seconds this rank also
    computed): HTA's and the PyTorch profiler's overlap is their ratio. Compute is the step's
    forward, backward and optimizer until the rank's gradients were all ready, less its earlier
    waits for collectives (a backward call that waits for its collectives, as DDP's does for a
    micro-batch that syncs, computes nothing while it waits) and less the time a collective
    blocked the rank."""
    until = step.ready if step.ready is not None else step.end
    flying = [(max(a, step.start), min(b, step.end)) for a, b, *_ in step.collectives
              if b > step.start and a < step.end]
    waited = [*((sync.ready, sync.end) for sync in step.earlier_syncs),
              *((a, b) for a, b, _, blocking in step.collectives if blocking)]
    computing = without([(a, min(b, until)) for label, a, b, _ in step.intervals
                         if label in COMPUTE and a < until], waited)
    communicating = covered_seconds(flying)
    both = communicating + covered_seconds(computing) - covered_seconds([*flying, *computing])
    return communicating, max(both, 0.0)


def without(spans: Sequence[tuple[float, float]],
            holes: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (start, end) `spans` with the time of every hole cut out of them."""
    for low, high in holes:
        spans = [piece for start, end in spans
                 for piece in ((start, min(end, low)), (max(start, high), end))
                 if piece[1] > piece[0]]
    return list(spans)


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
    over the steps; the steps' windows in all (`windows_seconds`: what the parts must add up
    to, common.results.invariants); its collectives (`collective_record`); the residual (epoch
    time not in any step's window) and whether it is within ADDS_UP."""
    split_steps = [split(step, moment, shares) for step, moment in zip(steps, latest)]
    record = {}
    for part in PARTS:
        values = np.asarray([parts[part] for parts, _, _ in split_steps], dtype=float)
        record[part] = {"seconds": float(values.sum()),
                        **dict(zip(("median", "p10", "p90"),
                                   map(float, np.percentile(values, [50, 10, 90]))))}
    residual = epoch_seconds - sum(record[part]["seconds"] for part in PARTS)
    return {"parts": record, "steps": len(steps), "residual_seconds": residual,
            "windows_seconds": float(sum(step.end - step.start for step in steps)),
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
    # counted on the steps whose bytes are known where any are (a traced step whose profiler
    # lost a collective is timed, not counted)
    counted = [i for i in carrying if steps[i].collective_bytes] or carrying
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
                                                      for i in counted]))
                                     if counted else None),
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


def everyones_ready(steps: Sequence[Step],
                    gather: Callable[[object], list]) -> list[float | None]:
    """Per step, when the last rank was ready for its collectives (`latest_ready`), from every
    rank's moments (`gather`: every rank calls it, as the processes' gather); each wait before
    the last (`Step.earlier_syncs`) gets its own moment, the last rank's for that wait, set in
    the step."""
    gathered = gather([(step.ready, [sync.ready for sync in step.earlier_syncs])
                       for step in steps])
    for index, step in enumerate(steps):
        ranks = [rank[index][1] for rank in gathered if index < len(rank)]
        step.earlier_syncs = [
            sync._replace(latest=max(moments[wait] for moments in ranks if wait < len(moments)))
            for wait, sync in enumerate(step.earlier_syncs)]
    return latest_ready([[ready for ready, _ in rank] for rank in gathered])


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
