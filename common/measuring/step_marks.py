"""What a rank's loop sees of its steps as they run (`StepMarks`): when it asked for each batch
and got it, when each part it can see ended, and its collectives' moments as its library told
them; turned into common.measuring.attribution's `Step`s, in seconds from the epoch's origin,
once the epoch is over. `WindowMarks` keeps only each step's window and its input wait
(attribution off)."""
from __future__ import annotations

import time
from collections.abc import Callable

from xbench.common.measuring.attribution import COLLECTIVE, MARKED, Flight, Step, Sync


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
                   gradients: list[tuple] = (), earlier: list[tuple] = ()) -> None:
        """This step's collectives: `ready` (this rank's compute for them done) and `end` (it
        stopped waiting for them) are moments of `stamp` (None where nothing was launched),
        `timed` each one's (launch, completion, bytes or None, whether it blocked the rank),
        `size` the bytes they reduced
        (where counted), `gradients` each gradient's (ready moment, bytes), `earlier` the
        (ready, end) of each wait for them before the last (a micro-batch's)."""
        self._raw[-1][3] = (ready, end, timed, size, gradients, earlier)

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
                ready, end, timed, size, gradients, earlier = collective
                step.gradients = [(at(moment), bytes_) for moment, bytes_ in gradients]
                if timed:
                    step.ready, step.collective_end = at(ready), at(end)
                    step.earlier_syncs = [Sync(at(a), at(b)) for a, b in earlier]
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
                   gradients: list[tuple] = (), earlier: list[tuple] = ()) -> None:
        pass

    def end(self) -> None:
        self._last = self.stamp()
        self._raw[-1][1] = self._last
