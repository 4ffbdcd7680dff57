"""The libraries' side of the step attribution (common.measuring.attribution): what DDP's and
FSDP2's hooks and Horovod's handles tell of a step's gradient collectives as they happen, in
the moments of the loop's clock, which the loop hands on to its StepMarks."""
from __future__ import annotations

import time
from collections.abc import Callable


class CollectiveClock:
    """What a library tells of one step's gradient collectives, as they happen: when each
    gradient was ready (this rank's compute for it done) with the bytes it puts on the wire
    (`ready`), when each collective was launched, with its bytes, and when it completed
    (`launch`, then `complete` from whichever thread sees it done), and when the step stopped
    waiting for them all (`done`: after DDP's backward, or Horovod's synchronize). `take` ends
    the step: (ready, end, [(launch, completion, bytes, blocking)], bytes, [(ready, bytes)]),
    or None where nothing was told."""

    def __init__(self, stamp: Callable[[], object] = time.perf_counter,
                 seconds: Callable[[object, object], float] = lambda a, b: b - a):
        self.stamp, self.seconds = stamp, seconds
        self._ready, self._ops, self._done, self._bytes = [], [], None, 0

    def ready(self, size: int = 0) -> None:
        """A gradient is ready (its bytes as they go on the wire)."""
        self._ready.append((self.stamp(), size))
        self._bytes += size

    def launch(self, size: int | None = None, blocking: bool = False) -> list:
        """A collective of `size` bytes (None: not told) is launched now (`blocking`: in a call
        that returns once it is done, see Flight): the token `complete` takes."""
        op = [self.stamp(), None, size, blocking]
        self._ops.append(op)
        return op

    def complete(self, op: list) -> None:
        """The collective launched as `op` has completed now (any thread)."""
        op[1] = self.stamp()

    def done(self, size: int = 0) -> None:
        """Every collective of the step has completed (`size`: their bytes, where the hooks
        did not tell them)."""
        self._done = self.stamp()
        self._bytes += size

    def take(self) -> tuple | None:
        ready, ops, done, size = self._ready, self._ops, self._done, self._bytes
        self._ready, self._ops, self._done, self._bytes = [], [], None, 0
        if done is None or not (ops or ready):
            return None
        if not ops:  # nothing to reduce (one process): only when its gradients were ready
            return None, None, [], size, ready
        if all(bytes_ is not None for _, _, bytes_, _ in ops):
            # what crossed, as the library told it: the gradients' bytes count every
            # micro-batch's, of which a step that syncs once reduces only their sum
            size = sum(bytes_ for _, _, bytes_, _ in ops)
        # a completion the library did not report was seen, at the latest, when the step
        # stopped waiting for them all
        timed = [(launch, completion if completion is not None else done, bytes_, blocking)
                 for launch, completion, bytes_, blocking in ops]
        return (ready[-1][0] if ready else ops[-1][0]), done, timed, size, ready
