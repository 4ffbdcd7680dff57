"""What a number means (DESIGN.md "Measuring"): wall-clock epochs, synced at every boundary.

The backends call `EpochClock` with their framework's device sync; the arithmetic of turning the
times of every rank into one epoch record lives here once.
"""
import time

import numpy as np


class EpochClock:
    """Wall clock for one epoch: starts when the first batch is requested, stops after the last
    optimizer step has finished (the device is synchronised before each reading)."""

    def __init__(self, sync=lambda: None):
        self.sync = sync
        self.started = self.stopped = None

    def start(self):
        self.sync()
        self.started = time.perf_counter()

    def stop(self):
        self.sync()
        self.stopped = time.perf_counter()
        return self.stopped - self.started


def epoch_record(epoch, seconds_per_rank, samples, loss_sum, correct):
    """One epoch of the result row; its time is the slowest rank's (the epoch ends when all have)."""
    seconds = max(seconds_per_rank)
    return {"epoch": epoch, "seconds": seconds, "samples": int(samples),
            "rate": samples / seconds if seconds > 0 else None,
            "loss": float(loss_sum) / samples, "accuracy": float(correct) / samples,
            "seconds_per_rank": [float(s) for s in seconds_per_rank]}


def step_percentiles(step_seconds):
    """p50 / p90 of the per-step times gathered from every rank (epoch 2: the steady state)."""
    if len(step_seconds) == 0:
        return {"step_time_p50": None, "step_time_p90": None}
    p50, p90 = np.percentile(np.asarray(step_seconds, dtype=float), [50, 90])
    return {"step_time_p50": float(p50), "step_time_p90": float(p90)}
