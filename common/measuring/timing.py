"""What a time means: wall-clock epochs, the device synchronised at every boundary, the epoch's
time that of the slowest rank; per-step times for percentiles.

The framework loops pass their device sync and, on GPUs, their event timer; the arithmetic of
turning the times of every rank into one epoch record lives here once.
"""
import time
from collections.abc import Callable, Sequence

import numpy as np

# No training step (a forward, a backward and an optimizer's update, each tens of kernels or
# more) takes less than this on any device: an epoch faster than this a step, or a published
# rate beyond a batch in this time, was not measured but damaged or mistyped.
FASTEST_STEP_SECONDS = 1e-6


class EpochClock:
    """Wall clock (`time.perf_counter`, never CPU time) for one epoch: starts when the first batch
    is requested, stops after the last optimizer step has finished (the device is synchronised
    before each reading)."""

    def __init__(self, sync: Callable[[], None] = lambda: None):
        self.sync = sync
        self.started = self.stopped = None

    def start(self) -> None:
        self.sync()
        self.started = time.perf_counter()

    def stop(self) -> float:
        self.sync()
        self.stopped = time.perf_counter()
        return self.stopped - self.started


def epoch_record(epoch: int, seconds_per_rank: Sequence[float], samples: int, loss_sum: float,
                 correct: float) -> dict:
    """One epoch of the result row; its time is the slowest rank's (the epoch ends when all
    have)."""
    seconds = max(seconds_per_rank)
    return {"epoch": epoch, "seconds": seconds, "samples": int(samples),
            "rate": samples / seconds if seconds > 0 else None,
            "loss": float(loss_sum) / samples, "accuracy": float(correct) / samples,
            "seconds_per_rank": [float(s) for s in seconds_per_rank]}


def step_percentiles(step_seconds: Sequence[float]) -> dict:
    """p50 / p90 of the per-step times gathered from every rank (last epoch: the steady state)."""
    if len(step_seconds) == 0:
        return {"step_time_p50": None, "step_time_p90": None}
    p50, p90 = np.percentile(np.asarray(step_seconds, dtype=float), [50, 90])
    return {"step_time_p50": float(p50), "step_time_p90": float(p90)}
