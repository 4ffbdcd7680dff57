"""Every number of the why on one basis, with invariants on every row (common.measuring.basis,
common.results.invariants): the three self-contradicting lines an audit found cannot be made
again, on steps built as the loops record them (common.measuring.attribution), each worked by
hand; and each invariant, broken on purpose, is named and keeps the report from drawing the
numbers it guards."""
import math

import pytest

from tests.report_fixtures import make_row, write_rows
from xbench.common.measuring.alone import REPLAYED
from xbench.common.measuring.attribution import MARKED, Flight, Step, summarize
from xbench.common.measuring.basis import communication
from xbench.common.measuring.timeline import timeline_record
from xbench.common.results.invariants import (
    COUNTED,
    EXPOSED,
    LIBRARY_BYTES,
    ONE_BASIS,
    PARTS_ADD_UP,
    SHARES,
    UNDER_COMPUTE,
    broken,
)
from xbench.reports.judging.why import why
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load

MS = 1e-3
BYTES = 1_609_768  # the small model's gradients


def step(at: float, backward_end: float, flights: list[tuple[float, float, int]], end: float,
         ready: float | None = None) -> Step:
    """A step from `at`: 10 ms forward, backward to `backward_end`, its collectives' flights
    (launch, end, bytes; None: a step that carries none, as an untraced one), then 1 ms of
    optimizer after the last collective ended (`end`)."""
    made = Step(at, end + 1 * MS, [("forward", at, at + 10 * MS, MARKED),
                                  ("backward", at + 10 * MS, backward_end, MARKED),
                                  ("optimizer", end, end + 1 * MS, MARKED)])
    if flights:
        made.ready = backward_end if ready is None else ready
        made.collective_end = end
        made.collectives = [Flight(a, b, n) for a, b, n in flights]
        made.collective_bytes = sum(n for _, _, n in flights)
    return made


def rank_record(steps: list[Step], latest: list[float | None] | None = None) -> dict:
    latest = latest or [None] * len(steps)
    seconds = sum(s.end - s.start for s in steps)  # the windows tile the epoch
    return {**summarize(steps, latest, seconds), "timeline": timeline_record(steps, latest)}


def row_with(ranks: list[dict], alone: dict | None = None) -> dict:
    """A 2-device pt-ddp row whose last epoch's ranks are `ranks` (every epoch alike)."""
    row = make_row(devices=2)
    row["attribution"] = {"how": {}, "epochs": [{"ranks": ranks, "slowest_rank": None}] * 2,
                          "traced_steps": None, "alone": alone}
    row["invariants"] = broken(row)
    return row


def traced_epoch() -> list[Step]:
    """32 steps of which every 4th carries its all-reduce (a profiler's traced steps, as
    TensorFlow's and JAX's): 20 ms of compute, then 7 ms of all-reduce once backward is over;
    the others are one opaque call with no collective in them."""
    steps = []
    for index in range(32):
        at = index * 30 * MS
        if index % 4 == 3:
            steps.append(step(at, at + 20 * MS, [(at + 20 * MS, at + 27 * MS, BYTES)],
                              at + 27 * MS))
        else:
            steps.append(Step(at, at + 28 * MS, [("call", at, at + 28 * MS, MARKED)]))
    return steps


def test_every_collective_after_backward_hides_nothing_and_is_counted_where_it_ran(tmp_path):
    """The audit's tf-multiworker line: 'of 7 ms of all-reduce a step, 0.601 ms ran under
    compute and 6.4 ms were exposed (hidden 9%)', its 7 ms the 8 traced steps' median and its
    6.4 ms a mean over all 32; and its collectives a step counted 0 over steps that record none.
    On one basis: the 8 steps that carry the all-reduce, 1 collective each, nothing hidden."""
    ranks = [rank_record(traced_epoch()) for _ in range(2)]
    assert [r["collective"]["basis_steps"] for r in ranks] == [8, 8]
    assert [r["collective"]["collectives_per_step"] for r in ranks] == [1.0, 1.0]
    found = communication(ranks, None)
    assert found.after_backward and found.under_compute == 0.0 and found.hidden_share == 0.0
    assert found.exposed == pytest.approx(7 * MS) and found.alone == pytest.approx(7 * MS)
    row = row_with(ranks)
    assert row["invariants"] == []
    said = why_of(tmp_path, row)
    assert "every collective ran after backward, nothing hidden: 7 ms a step exposed" in said
    assert "under compute" not in said


def ddp_epoch(buckets_end: float) -> list[Step]:
    """16 steps: backward 20 ms, two buckets launched during it (at 8 and 15 ms) that crawl
    beside backward (waiting for a core) and end `buckets_end` ms after the step's start."""
    steps = []
    for index in range(16):
        at = index * 60 * MS
        steps.append(step(at, at + 20 * MS,
                          [(at + 8 * MS, at + buckets_end * MS, BYTES // 2),
                           (at + 15 * MS, at + buckets_end * MS, BYTES - BYTES // 2)],
                          at + buckets_end * MS))
    return steps


def test_exposed_beyond_the_collectives_alone_is_waiting_for_a_core(tmp_path):
    """The audit's pt-ddp line: 'of 4.82 ms of all-reduce a step, 0 ms ran under compute and
    5.83 ms were exposed': the exposed part beyond its whole, unexplained. On one basis the time
    in flight beyond the collectives' own (replayed alone: 4.8 ms) and beyond waiting for a peer
    is named, waiting for a core, and the exposed part is within alone + that."""
    ranks = [rank_record(ddp_epoch(buckets_end=25.83)) for _ in range(2)]
    alone = {"seconds": 4.82 * MS, "low": 4.7 * MS, "high": 5.0 * MS, "repeats": 5,
             "messages": 2, "bytes": BYTES, "source": REPLAYED}
    found = communication(ranks, alone)
    assert found.exposed == pytest.approx(5.83 * MS) and found.under_compute == 0.0
    assert found.core_wait == pytest.approx((25.83 - 8) * MS - found.waiting - 4.82 * MS)
    row = row_with(ranks, alone)
    assert row["invariants"] == []
    said = why_of(tmp_path, row)
    assert "of 4.82 ms of all-reduce a step alone" in said and "0 ms ran under compute" in said
    assert "waiting for a core" in said


def test_under_compute_is_within_the_collectives_alone_never_a_moving_time(tmp_path):
    """The audit's capped-link line: 1 MB buckets over 1 Gbit/s, '473 ms ran under compute'
    while the whole all-reduce takes 261 ms on that link: under compute came from a moving time
    that held buckets waiting for a core beside backward. From the collectives alone it is at
    most their time: here 261 - 14 ms exposed."""
    steps = []
    for index in range(4):
        at = index * 800 * MS
        steps.append(step(at, at + 500 * MS, [(at + 20 * MS, at + 514 * MS, BYTES * 10)],
                          at + 514 * MS))
    ranks = [rank_record(steps) for _ in range(2)]
    alone = {"seconds": 261 * MS, "low": 260 * MS, "high": 263 * MS, "repeats": 5,
             "messages": 1, "bytes": BYTES * 10, "source": REPLAYED}
    found = communication(ranks, alone)
    assert ranks[0]["collective"]["moving_mean"] == pytest.approx(494 * MS)  # the moving time
    assert found.under_compute == pytest.approx(247 * MS) and found.under_compute <= found.alone
    assert found.hidden_share == pytest.approx(247 / 261)
    assert row_with(ranks, alone)["invariants"] == []


def why_of(tmp_path, row) -> str:
    """The why the report gives the row's 2-device cell beside a 1-device one."""
    frame, _ = load([write_rows(tmp_path / "r.jsonl", [make_row(devices=1), row])])
    cells = analysis.cell_table(frame)
    attributed = analysis.attribution(cells)
    two = cells[cells["devices"] == 2].iloc[0]
    return why(two, attributed, attributed.iloc[0:0].assign(env=[], cell_key=[]))


def test_each_invariant_broken_is_named_and_its_numbers_not_drawn(tmp_path):
    """A row that breaks an invariant keeps its numbers, names what it broke, and the why says
    it is not drawn, whether the row says so itself or is read afresh."""
    ranks = [rank_record(ddp_epoch(buckets_end=25.83)) for _ in range(2)]
    alone = {"seconds": 4.82 * MS, "low": 4.7 * MS, "high": 5.0 * MS, "repeats": 5,
             "messages": 2, "bytes": BYTES, "source": REPLAYED}

    def breaking(change) -> list[str]:
        copied = [{**r, "collective": dict(r["collective"]), "parts": dict(r["parts"]),
                   "timeline": dict(r["timeline"])} for r in ranks]
        change(copied)
        return row_with(copied, alone)["invariants"]

    def lost(r):  # the parts hold 10% less than the steps' windows
        r[0]["windows_seconds"] = 1.1 * r[0]["windows_seconds"]
    assert breaking(lost) == [PARTS_ADD_UP]

    def negative(r):  # a part below 0, the sum kept
        host, forward = r[0]["parts"]["host"]["seconds"], r[0]["parts"]["forward"]["seconds"]
        r[0]["parts"]["host"] = {**r[0]["parts"]["host"], "seconds": -1.0}
        r[0]["parts"]["forward"] = {**r[0]["parts"]["forward"], "seconds": forward + host + 1}
    assert breaking(negative) == [SHARES]

    def uncounted(r):
        r[0]["collective"]["collectives_per_step"] = None
    assert breaking(uncounted) == [COUNTED]

    def other_bytes(r):
        r[1]["collective"]["bytes_per_step"] = BYTES // 2
    assert LIBRARY_BYTES in breaking(other_bytes)

    def exposed(r):
        for rank in r:
            rank["collective"]["exposed_mean"] = 1.0  # beyond all that was in flight
    assert breaking(exposed) == [EXPOSED]

    def hidden_without_overlap(r):
        for rank in r:
            rank["collective"]["overlapped_mean"] = 0.0
            rank["collective"]["exposed_mean"] = 0.5 * MS
    assert breaking(hidden_without_overlap) == [UNDER_COMPUTE]

    one_device = row_with([{**ranks[0], "collective": {**ranks[0]["collective"],
                                                        "exposed_mean": 1.0}}], alone)
    one_device["devices"] = 1  # one rank's all-reduce is a copy: no why, nothing to break
    assert broken(one_device) == []

    def before_one_basis(r):
        for rank in r:
            del rank["collective"]["basis_steps"]
    assert breaking(before_one_basis) == [ONE_BASIS]

    row = row_with(ranks, alone)
    row["attribution"]["epochs"][-1]["ranks"][0]["collective"]["exposed_mean"] = 1.0
    row["invariants"] = []  # a row that does not know: read afresh, it is checked again
    said = why_of(tmp_path, row)
    assert f"not drawn: its runs break '{EXPOSED}'" in said and "ms ran under compute" not in said
    assert not math.isnan(row["attribution"]["epochs"][-1]["ranks"][0]["collective"]
                          ["exposed_mean"])  # its numbers are kept
