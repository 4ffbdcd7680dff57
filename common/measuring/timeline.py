"""A rank's step as a timeline: when each gradient became ready and when each collective ran,
measured from backward's start, kept as per-index medians over an epoch's steps.

The overlap share (common.measuring.attribution.overlap) says how long a collective was in
flight while the rank computed; on a CPU a collective in flight may only be waiting for a core.
What the step pays is when the last collective ends after backward: the timeline keeps what
reports.step_model.timeline needs to model that (the bytes ready over backward, each bucket's bytes,
launch and end), and the collectives launched after backward was over, which shared no core with it:
the ones a link's bandwidth can be read from.

Framework-free: the loops and libraries record the moments (attribution.Step); the medians are
here, once.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from xbench.common.measuring.attribution import Step, covered_seconds


def backward_window(step: Step) -> tuple[float, float] | None:
    """(start, end) of a step's backward: from its first backward interval (the loop's mark, or
    the first traced backward op) to its last gradient ready (`ready`, or the last gradient's
    hook); None where the step has no backward or no gradient moment."""
    starts = [a for label, a, _, _ in step.intervals if label == "backward"]
    end = step.ready if step.ready is not None else (
        step.gradients[-1][0] if step.gradients else None)
    if not starts or end is None:
        return None
    return min(starts), max(end, min(starts))


def after_backward(step: Step, end: float, latest: float | None
                   ) -> tuple[int | None, float] | None:
    """(bytes, seconds moving) of the collectives a step launched once its backward was over:
    each from its launch, or from when the last rank became ready if later, to its end. The
    bytes: as the library told them, else the step's where every collective ran then, else
    None. None where none was launched then."""
    flights = [f for f in step.collectives if f.launch >= end]
    if not flights:
        return None
    begin = latest if latest is not None else end
    spans = [(max(f.launch, begin), f.end) for f in flights if f.end > max(f.launch, begin)]
    if all(f.size is not None for f in flights):
        size = sum(f.size for f in flights)
    else:
        size = step.collective_bytes if len(flights) == len(step.collectives) else None
    return size, covered_seconds(spans)


def after_bytes(after: list[tuple[int | None, float]]) -> int | None:
    """The median bytes of the collectives after backward, None where a step's are not told."""
    sizes = [size for size, _ in after]
    return None if None in sizes else int(np.median(sizes))


def _medians(rows: list[list[float]]) -> list[float]:
    return [float(v) for v in np.median(np.asarray(rows, dtype=float), axis=0)]


def _by_index(lists: list[list[tuple]]) -> list[list[float]]:
    """Per index, the median of each field over the lists of the most common length (a step
    whose count differs, as DDP's first step before it rebuilds its buckets, is left out)."""
    if not lists:
        return []
    length = Counter(len(found) for found in lists).most_common(1)[0][0]
    same = [found for found in lists if len(found) == length]
    if not length:
        return []
    return [_medians([list(found[index]) for found in same]) for index in range(length)]


def timeline_record(steps: Sequence[Step], latest: Sequence[float | None]) -> dict | None:
    """A rank's steps of an epoch as one timeline, in seconds from backward's start: backward's
    length, each gradient's ready moment and bytes, each collective's launch, end and bytes (per
    index, the median over the steps), and the collectives launched after backward (bytes a
    step, the median; moving seconds a step, the mean, as a step's attributed parts are: the
    exposed communication it is set against). None where no step had a backward and a gradient
    moment."""
    windows = [(step, window, moment) for step, moment in zip(steps, latest)
               if (window := backward_window(step)) is not None]
    if not windows:
        return None
    gradients = [[(ready - start, size) for ready, size in step.gradients]
                 for step, (start, _), _ in windows]
    flights = [[(f.launch - start, f.end - start, f.size if f.size is not None else np.nan)
                for f in step.collectives] for step, (start, _), _ in windows]
    after = [found for step, (_, end), moment in windows
             if (found := after_backward(step, end, moment)) is not None]
    return {
        "steps": len(windows),
        "backward_seconds": float(np.median([end - start for _, (start, end), _ in windows])),
        "gradients": [{"ready": ready, "bytes": int(size)}
                      for ready, size in _by_index(gradients)],
        "collectives": [{"launch": launch, "end": end,
                         "bytes": None if np.isnan(size) else int(size)}
                        for launch, end, size in _by_index(flights)],
        "after_backward": ({"steps": len(after), "bytes": after_bytes(after),
                            "seconds": float(np.mean([seconds for _, seconds in after])),
                            "all": all(f.launch >= end for step, (_, end), _ in windows
                                       for f in step.collectives)}
                           if after else None),
    }

