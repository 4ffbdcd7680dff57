"""A framework's profiler around sampled steps of the timed epochs, for a framework whose step is
one opaque call (a tf.function, a JAX compiled program): only a trace sees inside it.

The sampling, the trace folders and the placing of what a trace saw in the loop's clock are the
same for every such framework, and are here once; a framework's tracer (tf_backend.trace,
jax_backend.trace) says how its profiler starts, stops and marks a step, and which part each op
it saw belongs to.
"""
from __future__ import annotations

import abc
import math
import shutil
import tempfile
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from xbench.common.measuring.attribution import COMPUTE, COUNTED, Flight, Step, Sync

STEP_EVENT = "xbench_step"  # the annotation around a traced step's call, seen in the trace
SAMPLED = 8  # steps of each timed epoch from the second on, evenly spaced, that are traced


class StepTracer(abc.ABC):
    """Started before a sampled step and stopped after it, between steps (the loop takes that
    time out of the epoch's), the step's call wrapped in a STEP_EVENT the trace shows; the
    traces are read once training is over."""

    def __init__(self):
        self.active = False
        self.taken: list[tuple[int, int, str, float]] = []  # epoch, step, folder, call's start

    @staticmethod
    def sampled(epoch: int, step: int, steps: int) -> bool:
        """Whether step `step` (from 1) of `epoch` is traced: every k-th of each epoch from the
        second, SAMPLED of them (k = the epoch's steps / SAMPLED). The loop asks once past the
        epoch's last step too, before it finds no batch: nothing to trace."""
        every = max(1, steps // SAMPLED)
        return epoch >= 2 and step <= steps and step % every == 0 and step // every <= SAMPLED

    def start(self, epoch: int, step: int) -> None:
        folder = tempfile.mkdtemp(prefix="xbench-trace-")
        self.begin(folder)
        self.taken.append((epoch, step, folder, math.nan))
        self.active = True

    def call(self, run: Callable[[], object], start: float) -> object:
        """Run the traced step's call, `start`: its start in the loop's clock."""
        epoch, step, folder, _ = self.taken[-1]
        self.taken[-1] = (epoch, step, folder, start)
        with self.annotate(step):
            return run()

    def stop(self) -> None:
        self.end()
        self.active = False

    def steps(self) -> list[tuple[int, int, Step]]:
        """(epoch, step, what the trace saw of its call) of every traced step, in the loop's
        clock."""
        found = []
        for epoch, step, folder, start in self.taken:
            try:
                found += [(epoch, step, traced) for traced in self.read(folder, [start])]
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        return found

    def described(self, steps: int) -> dict:
        """Which steps were traced, as the row records it."""
        return {"epochs": "the second on", "every": max(1, steps // SAMPLED),
                "steps": len(self.taken)}

    # --- what each framework's profiler does -----------------------------------------------

    @abc.abstractmethod
    def begin(self, folder: str) -> None:
        """Start the profiler, writing its trace under `folder`."""

    @abc.abstractmethod
    def end(self) -> None:
        """Stop the profiler (its trace written)."""

    @abc.abstractmethod
    def annotate(self, step: int) -> AbstractContextManager:
        """A STEP_EVENT around the step's call in the trace."""

    @abc.abstractmethod
    def read(self, folder: str, starts: list[float]) -> list[Step]:
        """What the trace under `folder` saw of each traced call, its start in the loop's clock
        from `starts` (`traced_step`)."""


def traced_step(window: tuple[float, float], start: float,
                ops: Iterable[tuple[str, float, float]], flights: Iterable[Flight],
                gradients: Iterable[tuple[float, int]] = (), complete: bool = True) -> Step:
    """A traced call as a Step in the loop's clock: `window` is its STEP_EVENT in the trace's
    clock (ns), `start` the call's start in the loop's (seconds), which both clocks see. `ops`:
    (part, start, end) of each op the trace labelled (its collectives apart, as `flights`, each
    with its bytes where known), `gradients` each gradient's (ready, bytes), all in the trace's
    clock. `complete`: the trace saw every collective the step's graph runs; where it lost one
    (a profiler drops events), the step's bytes are not known (its collectives are timed as
    seen, not counted)."""
    low, high = window
    offset = start - low / 1e9

    def at(ns: float) -> float:
        return ns / 1e9 + offset
    step = Step(start, at(high))
    step.intervals = [(part, at(a), at(min(b, high)), COUNTED) for part, a, b in ops
                      if low <= a < high]
    flights = sorted(Flight(at(f.launch), at(min(f.end, high)), f.size) for f in flights
                     if low <= f.launch < high)
    if flights:
        _set_collectives(step, flights)
        step.gradients = sorted((at(ready), size) for ready, size in gradients)
        if not complete:
            step.collective_bytes = None
    return step


def _set_collectives(step: Step, flights: list[Flight]) -> None:
    """The step's collectives; this rank was ready for them when its backward ended (its last
    backward op, the slow-rank fault's included), not at the last launch: small packs run one
    after another, launched long after backward, and the wait for them from the first's start
    is the step's communication (or waiting, until the slowest rank's backward ended). A step
    without a backward op was ready at its last launch. A collective that ended before backward
    did and during which the rank computed nothing is a wait of its own (`earlier_syncs`: a
    micro-batch's, with --accumulate-sync each, that the next micro-batch waits for), from the
    end of the rank's last op before it; one that ran beside compute (launched as backward
    made its gradients) is no wait. Where the first collective starts after the rank was ready,
    the moments between are host time (the runtime dispatching it: neither compute nor a
    collective in flight, as the program's own dispatch before its first op is)."""
    backward = [end for part, _, end, _ in step.intervals if part == "backward"]
    step.ready = max(backward) if backward else flights[-1].launch
    first = min(f.launch for f in flights)
    if first > step.ready:  # the runtime dispatching the collectives once compute was done
        step.intervals.append(("host", step.ready, first, COUNTED))
    step.collective_end = max(f.end for f in flights)
    step.collectives = flights
    sizes = [f.size for f in flights]
    step.collective_bytes = sum(sizes) if all(sizes) else None
    compute = [(a, b) for part, a, b, _ in step.intervals if part in COMPUTE]
    step.earlier_syncs = [
        Sync(max([b for _, b in compute if b <= f.launch], default=f.launch), f.end)
        for f in flights if f.end <= step.ready
        and not any(a < f.end and b > f.launch for a, b in compute)]


class TracedCalls:
    """The training loop's hooks of a framework whose step's call a StepTracer samples
    (common.running.framework_hooks): the tracer in `self.tracer`, the steps per epoch in
    `self.steps_per_epoch`, the processes in `self.comm`."""

    tracer: StepTracer

    def between_steps(self, epoch: int, step: int | None) -> None:
        """The tracer stopped after a sampled step, and started (every rank at once, past a
        barrier) before the next (StepTracer.sampled)."""
        if self.tracer.active:
            self.tracer.stop()
        if step is not None and self.tracer.sampled(epoch, step, self.steps_per_epoch):
            self.tracer.start(epoch, step)
            self.comm.barrier()

    def traced_steps(self) -> list[tuple[int, int, Step]]:
        return self.tracer.steps()

    def tracing(self) -> dict:
        return self.tracer.described(self.steps_per_epoch)
