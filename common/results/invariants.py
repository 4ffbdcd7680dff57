"""The invariants every row's derived numbers keep, checked when the row is written
(common.results.schema.make_row) and again whenever a row is read (the report): a row that
breaks one keeps its numbers and names what it broke (`broken`), and no verdict or why rests
on the numbers it guards (`GUARDS`).

Each is a check of measured quantities against each other, with a tolerance for the clocks'
resolution, never a number against itself:

- PARTS_ADD_UP: each rank's parts add up to its steps' windows within 2% (an opaque call split
  by the traced steps' shares, or a part counted twice, would not); what no window covers of
  the epoch (its iterator's set-up, the wait at an evaluation) is the residual, flagged apart
  (`adds_up`, common.measuring.attribution.ADDS_UP).
- SHARES: every part's seconds and the overlap share within their range (a share in [0, 1]).
- UNDER_COMPUTE: the collectives' time under compute is within their time alone, and within
  the time they were in flight while the rank computed or waited for the slowest rank, who
  computed (work cannot be hidden where nothing overlapped it; a bucket launched early moves
  while its rank waits for a slower one: phantom (c), tests/test_phantoms.py).
- EXPOSED: exposed communication is within the collectives' time alone plus the waiting for
  the slowest rank and for a core (common.measuring.basis): within the time they were in flight.
  UNDER_COMPUTE and EXPOSED hold where gradients cross between devices: on one device a
  library's collective is a copy and no why is drawn from it.
- COUNTED: collectives per step are counted on the steps that carry them: where a rank reduced
  bytes, it counted at least one collective a step on at least one such step.
- LIBRARY_BYTES: the bytes a step reduced are the library's count: every rank counted the same,
  and where the timeline told each collective's bytes, they sum to it.
- ONE_BASIS: the row recorded its collectives on one basis (rows before schema 18 did not:
  their why subtracted numbers measured on different steps).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from xbench.common.measuring.attribution import PARTS
from xbench.common.measuring.basis import communication, on_basis

PARTS_ADD_UP = "the parts add up to the step (within 2%)"
SHARES = "every share within [0, 1]"
UNDER_COMPUTE = "under compute <= alone and <= in flight while computing"
EXPOSED = "exposed <= alone + waiting"
COUNTED = "collectives per step counted on the steps that carry them"
LIBRARY_BYTES = "bytes are the library's count"
ONE_BASIS = "one basis for the why (schema 18 on)"
INVARIANTS = (PARTS_ADD_UP, SHARES, UNDER_COMPUTE, EXPOSED, COUNTED, LIBRARY_BYTES, ONE_BASIS)
# What each guards: the report draws no number of these from a row that breaks it.
GUARDS = {PARTS_ADD_UP: "step parts", SHARES: "step parts", UNDER_COMPUTE: "why",
          EXPOSED: "why", COUNTED: "collectives", LIBRARY_BYTES: "bandwidth", ONE_BASIS: "why"}
ADDS_UP = 0.02
RELATIVE, ABSOLUTE = 0.05, 2e-4  # the clocks' and the medians' slack: 5% and 0.2 ms


def within(value: float, bound: float) -> bool:
    return value <= bound * (1 + RELATIVE) + ABSOLUTE


def broken(row: dict) -> list[str]:
    """The invariants `row` breaks, by name, in INVARIANTS' order ([] for a row with no step
    attribution: nothing derived to check)."""
    attribution = row.get("attribution")
    if not attribution or not attribution.get("epochs"):
        return []
    found = set(_rank_checks(row))
    ranks = attribution["epochs"][-1]["ranks"]
    if any(rank["collective"]["bytes_per_step"] for rank in ranks) and not on_basis(ranks):
        found.add(ONE_BASIS)
    found |= set(_why_checks(ranks, attribution.get("alone"), crossing=row["devices"] > 1
                             or row["nodes"] > 1))
    return [name for name in INVARIANTS if name in found]


def _rank_checks(row: dict) -> Iterator[str]:
    for record in row["attribution"]["epochs"]:
        for rank in record["ranks"]:
            parts = sum(rank["parts"][part]["seconds"] for part in PARTS)
            windows = rank.get("windows_seconds", parts)  # not recorded before schema 18
            if abs(parts - windows) > ADDS_UP * windows:
                yield PARTS_ADD_UP
            share = rank["collective"].get("overlap_share")
            if (any(rank["parts"][part]["seconds"] < -ABSOLUTE for part in PARTS)
                    or (share is not None and not -1e-9 <= share <= 1 + 1e-9)):
                yield SHARES
            yield from _counts(rank)


def _counts(rank: dict) -> Iterator[str]:
    collective = rank["collective"]
    size, count = collective["bytes_per_step"], collective.get("collectives_per_step")
    if size and (count is None or count < 1 or collective.get("basis_steps", 1) < 1):
        yield COUNTED
    timeline = rank.get("timeline") or {}
    told = [c["bytes"] for c in timeline.get("collectives", [])]
    if size and told and None not in told and not math.isclose(sum(told), size, rel_tol=0.02):
        yield LIBRARY_BYTES


def _why_checks(ranks: list[dict], replayed: dict | None, crossing: bool) -> Iterator[str]:
    """`crossing`: the cell's gradients cross between devices. On one device nothing crosses: a
    library's collective there (DDP's all-reduce of one rank) is a copy, its time the library's
    bookkeeping around it, and no why is drawn from it (reports.numbers.communication)."""
    sizes = {rank["collective"]["bytes_per_step"] for rank in ranks}
    if len(sizes) > 1:
        yield LIBRARY_BYTES
    found = communication(ranks, replayed) if crossing else None
    if found is None or found.alone is None:
        return
    under = found.under_compute
    if not (within(under, found.alone) and within(under, found.overlapped + found.waiting)
            or found.after_backward):
        yield UNDER_COMPUTE
    if not within(found.exposed, max(found.busy, found.alone + found.waiting)):
        yield EXPOSED
