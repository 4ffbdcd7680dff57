"""What a library tells of one step's gradient collectives as they happen, kept for the step's
attribution (common.measuring.attribution): a PyTorch backend's hooks tell it (DDP's gradient and
communication hooks, FSDP2's collectives, Horovod's handles), and the loop hands what it kept to
its StepMarks.

Framework-free: the moments are whatever the loop's clock stamps (the host clock, or CUDA events).
"""
from __future__ import annotations

import time
from collections.abc import Callable


class CollectiveClock:
    """What a library tells of one step's gradient collectives, as they happen: when each
    gradient was ready (this rank's compute for it done) with the bytes it puts on the wire
    (`ready`), when each collective was launched, with its bytes, and when it completed
    (`launch`, then `complete` from whichever thread sees it done), and when the step stopped
    waiting for them (`done`: after DDP's backward, or Horovod's synchronize; once a step, or
    after every micro-batch that syncs). `take` ends the step: (ready, end, [(launch,
    completion, bytes, blocking)], bytes, [(ready, bytes)], [(ready, end)] of the waits before
    the last),
    or None where nothing was told."""

    def __init__(self, stamp: Callable[[], object] = time.perf_counter,
                 seconds: Callable[[object, object], float] = lambda a, b: b - a):
        self.stamp, self.seconds = stamp, seconds
        self._ready, self._ops, self._done, self._bytes = [], [], [], 0

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
        """Every collective launched so far has completed (`size`: their bytes, where the hooks
        did not tell them): the step's wait for them, or a micro-batch's, is over."""
        self._done.append((self.stamp(), len(self._ready), len(self._ops)))
        self._bytes += size

    def take(self) -> tuple | None:
        ready, ops, dones, size = self._ready, self._ops, self._done, self._bytes
        self._ready, self._ops, self._done, self._bytes = [], [], [], 0
        if not dones or not (ops or ready):
            return None
        if not ops:  # nothing to reduce (one process): only when its gradients were ready
            return None, None, [], size, ready, []
        if all(bytes_ is not None for _, _, bytes_, _ in ops):
            # what crossed, as the library told it: the gradients' bytes count every
            # micro-batch's, of which a step that syncs once reduces only their sum
            size = sum(bytes_ for _, _, bytes_, _ in ops)
        # a completion the library did not report was seen, at the latest, when the step
        # stopped waiting for the collectives launched until then
        timed = [(launch, completion if completion is not None else
                  next((moment for moment, _, launched in dones if launched > index),
                       dones[-1][0]), bytes_, blocking)
                 for index, (launch, completion, bytes_, blocking) in enumerate(ops)]
        syncs, told, launched = [], 0, 0
        for moment, ready_count, ops_count in dones:
            # this rank was ready for them when its last gradient since the previous wait was
            # (or, with none told, when it launched the last of them)
            if ready_count > told or ops_count > launched:
                syncs.append((ready[ready_count - 1][0] if ready_count > told
                              else ops[ops_count - 1][0], moment))
            told, launched = ready_count, ops_count
        (last_ready, last_end), earlier = syncs[-1], syncs[:-1]
        return last_ready, last_end, timed, size, ready, earlier
