"""One basis for the why: what a run's collectives cost its step, every number from quantities
measured on the same steps.

The steps that carry collectives are the basis (common.measuring.attribution.collective_record:
every step where a library's hooks time each collective, the traced steps where a profiler
sees them). On them, per step and each rank's mean over its basis steps, then the ranks' mean:

- exposed: the step's communication part, from when the last rank was ready to when this rank
  stopped waiting for its collectives;
- waiting: for the slowest rank, from this rank's ready to the last rank's;
- in flight (busy), and of it overlapped by this rank's compute (HTA's overlap share is their
  ratio);
- alone: the collectives' own time with nothing to overlap, from a clean source
  (common.measuring.alone), never a moving time beside backward;
- under compute = alone - exposed, where exposed is within alone: the part of the collectives'
  own time the step did not wait for; 0 where every collective ran after backward;
- hidden share = under compute / alone;
- waiting for a core = in flight - waiting - alone, where positive: the time the collectives
  were in flight beyond their own time and beyond waiting for a peer (on a CPU, queued for a core
  beside backward: why a moving time is no link time).

Where a number cannot be had (no clean alone time), it is None and the report says what could
not be measured. Framework-free, read by the row's invariants and the report alike.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xbench.common.measuring.alone import AFTER_BACKWARD, all_after_backward


@dataclass(frozen=True)
class Communication:
    """One run's collectives a step on the basis steps (seconds; the ranks' mean)."""
    basis_steps: int
    exposed: float
    waiting: float
    busy: float
    overlapped: float
    alone: float | None
    alone_source: str | None
    after_backward: bool  # every collective of the basis steps launched after backward

    @property
    def under_compute(self) -> float | None:
        if self.after_backward:
            return 0.0
        if self.alone is None:
            return None
        return max(self.alone - self.exposed, 0.0)

    @property
    def hidden_share(self) -> float | None:
        under = self.under_compute
        if under is None or not self.alone:
            return None
        return under / self.alone

    @property
    def core_wait(self) -> float | None:
        if self.alone is None:
            return None
        return max(self.busy - self.waiting - self.alone, 0.0)

    @property
    def overlap_share(self) -> float | None:
        return self.overlapped / self.busy if self.busy > 0 else None


def on_basis(ranks: Sequence[dict]) -> bool:
    """Whether an epoch's ranks recorded their collectives on one basis (schema 18 on)."""
    return bool(ranks) and all("basis_steps" in rank["collective"] for rank in ranks)


def communication(ranks: Sequence[dict], replayed: dict | None) -> Communication | None:
    """A run's collectives from its last epoch's `ranks` (their attribution records) and the
    replay of its collectives alone (`replayed`: the attribution's `alone`, or None); None
    where no rank's step carried a collective or the ranks are from before one basis."""
    if not on_basis(ranks) or not any(rank["collective"]["basis_steps"] for rank in ranks):
        return None
    collective = [rank["collective"] for rank in ranks]

    def mean(name: str) -> float:
        return float(np.mean([c[name] for c in collective]))
    after = all_after_backward(ranks)
    alone, source = None, None
    if after:
        alone = float(np.mean([rank["timeline"]["after_backward"]["seconds"] for rank in ranks]))
        source = AFTER_BACKWARD
    elif replayed:
        alone, source = replayed["seconds"], replayed["source"]
    return Communication(min(c["basis_steps"] for c in collective), mean("exposed_mean"),
                         mean("waiting_mean"), mean("busy_mean"), mean("overlapped_mean"),
                         alone, source, after)
