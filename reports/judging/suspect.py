"""SUSPECT as data: a ratio beyond what its devices can give (reports.judging.comparisons decides
where) and its likely cause, a disturbed baseline: which of the baseline's runs was slowest and what
took its cores then (each run's epoch-2 contention record, common.measuring.contention). A
disturbance only slows a run, so an impossible ratio points at its slower side, the baseline."""
import math

from xbench.common.measuring.contention import TAKEN
from xbench.reports.judging.verdict import Disturbance, Impossible, Interval, Side
from xbench.reports.numbers.stats import Ratio


def disturbance(baseline, where: Side) -> Disturbance | None:
    """The baseline cell's slowest usable run beside its others, and what took that run's
    cores in epoch 2 (None: no run of it was timed)."""
    runs = baseline["epoch2_runs"] or []
    if not runs:
        return None
    samples = baseline["epoch2_samples"]
    slowest = max(runs, key=lambda run: run["seconds"])
    others = [samples / run["seconds"] for run in runs if run is not slowest]
    contention = slowest["contention"] or {}
    limit = slowest["limit"]
    return Disturbance(where, int(slowest["repeat"]), samples / slowest["seconds"],
                       (min(others), max(others)) if others else (math.nan, math.nan),
                       {name: float(contention[name]) for name in TAKEN if contention.get(name)},
                       None if limit is None or math.isnan(limit) else float(limit))


def impossible(subject: Side, reference: Side, ratio: Ratio | Interval, most: float,
               baseline) -> Impossible:
    """`subject` at `ratio` the rate of `reference`, beyond the `most` its devices can give;
    `baseline`: the reference's row of the cell table."""
    interval = ratio if isinstance(ratio, Interval) else Interval.of(ratio)
    return Impossible(subject, reference, interval, float(most),
                      disturbance(baseline, reference))


def beyond_a_wrapper(ratio: Ratio) -> bool:
    """A backend at 1 device faster than its framework's run without a parallel wrapper by
    more than its interval allows (the interval wholly above 1): the wrapper only adds work."""
    return ratio.above(1)
