"""The step's timeline model (reports.step_model.timeline) on constructed steps, each worked by
hand: buckets formed as each library forms them, queued on one stream, and what the step waits for
after backward."""
import math

import pytest

from xbench.common.backends.protocol import MIB
from xbench.common.backends.traits import TRAITS
from xbench.reports.judging.why import hidden_words
from xbench.reports.numbers.communication import NOT_REPLAYED
from xbench.reports.step_model.timeline import (
    Gradient,
    buckets,
    crossing,
    even_curve,
    exposed_seconds,
    fused_each_cycle,
    hidden_share,
    messages,
    on_one_stream,
    recorded_curve,
    under_backward,
)

MS = 1e-3
GBPS = 1e9  # a link moving 1 GB a second: a message of B bytes lasts B / 1e9 s


def at_1gbps(size: float) -> float:
    return size / GBPS


# A backward of 100 ms making 16.1 MiB of gradients: a small early piece, most of it late.
BACKWARD = 100 * MS
CURVE = [Gradient(1 * MS, 0.5 * MIB), Gradient(2 * MS, 0.6 * MIB), Gradient(50 * MS, 10 * MIB),
         Gradient(BACKWARD, 5 * MIB)]


def test_one_bucket_exposes_all_of_its_collective():
    ddp = TRAITS["pt-ddp"].protocol_on("cpu")
    found = messages(CURVE, BACKWARD, ddp, bucket_bytes=1000 * MIB, seconds=at_1gbps)
    assert [(m.size, m.start) for m in found] == [(16.1 * MIB, BACKWARD)]
    moving = at_1gbps(16.1 * MIB)
    assert exposed_seconds(found, BACKWARD) == pytest.approx(moving)
    assert hidden_share(exposed_seconds(found, BACKWARD), moving) == 0.0
    assert under_backward(found, BACKWARD) == 0.0


def test_ddps_default_hides_only_its_first_bucket():
    """DDP's own buckets: the first closes once it holds 1 MiB (two gradients, 1.1 MiB, ready
    at 2 ms) and runs under backward; the rest (15 MiB, under the 25 MiB cap) is ready when
    backward ends: all of it exposed."""
    ddp = TRAITS["pt-ddp"].protocol_on("cpu")
    found = messages(CURVE, BACKWARD, ddp, bucket_bytes=None, seconds=at_1gbps)
    assert [(m.size, m.ready) for m in found] == [(pytest.approx(1.1 * MIB), 2 * MS),
                                                  (15 * MIB, BACKWARD)]
    assert found[0].end == pytest.approx(2 * MS + at_1gbps(1.1 * MIB))
    assert exposed_seconds(found, BACKWARD) == pytest.approx(at_1gbps(15 * MIB))
    moving = sum(m.end - m.start for m in found)
    assert under_backward(found, BACKWARD) == pytest.approx(at_1gbps(1.1 * MIB))
    assert hidden_share(exposed_seconds(found, BACKWARD), moving) == pytest.approx(1.1 / 16.1)


def test_small_buckets_on_a_slow_link_queue_past_backward():
    """1 MiB buckets over 10 MB/s: a gradient is never split, so the buckets are 1.1, 10 and 5
    MiB; the first alone outlasts backward, the others queue behind it, and the step waits for
    all but what ran before backward's end."""
    ddp = TRAITS["pt-ddp"].protocol_on("cpu")
    slow = lambda size: size / 10e6  # noqa: E731
    found = messages(CURVE, BACKWARD, ddp, bucket_bytes=MIB, seconds=slow)
    assert len(found) == 3  # gradients are not split: 1.1, 10 and 5 MiB
    assert [m.start for m in found] == pytest.approx(
        [2 * MS, 2 * MS + slow(1.1 * MIB), 2 * MS + slow(11.1 * MIB)])
    assert exposed_seconds(found, BACKWARD) == pytest.approx(2 * MS + slow(16.1 * MIB) - BACKWARD)


def test_buckets_close_where_their_bytes_reach_the_cap():
    curve = [Gradient(t * MS, MIB) for t in range(1, 8)]
    assert [(b.ready, b.size) for b in buckets(curve, MIB, 3 * MIB)] == [
        (1 * MS, MIB), (4 * MS, 3 * MIB), (7 * MS, 3 * MIB)]
    assert [(b.ready, b.size) for b in buckets(curve, math.inf, math.inf)] == [(7 * MS, 7 * MIB)]


def test_horovod_fuses_what_is_ready_at_each_cycle_once_its_thread_is_free():
    """Tensors ready at 0.2, 0.5 and 1.7 ms, a 1 ms cycle, each message 0.5 ms: the first two
    fused at the 1 ms tick, run to 1.5 ms; the third at the next tick after it is ready, 2 ms."""
    curve = [Gradient(0.2 * MS, 100), Gradient(0.5 * MS, 200), Gradient(1.7 * MS, 400)]
    found = fused_each_cycle(curve, cap=math.inf, cycle=1 * MS, seconds=lambda size: 0.5 * MS)
    assert [(m.size, m.start, m.end) for m in found] == [
        (300, pytest.approx(1 * MS), pytest.approx(1.5 * MS)),
        (400, pytest.approx(2 * MS), pytest.approx(2.5 * MS))]
    # a threshold smaller than two tensors: one at a time, the second when the first is done
    capped = fused_each_cycle(curve, cap=250, cycle=1 * MS, seconds=lambda size: 0.5 * MS)
    assert [(m.size, m.start) for m in capped] == [(100, pytest.approx(1 * MS)),
                                                   (200, pytest.approx(2 * MS)),
                                                   (400, pytest.approx(3 * MS))]
    horovod = TRAITS["hvd-torch"].protocol_on("cpu")
    assert messages(curve, 2 * MS, horovod, None, lambda size: 0.5 * MS) == found
    # a tensor ready a hair past a tick, within the rounding of the tick's count (the report
    # of hand-made rows looped here, each pass taking nothing): it goes at that moment
    hair = 6 * 5 * MS + 2e-12
    [late] = fused_each_cycle([Gradient(hair, 100)], cap=math.inf, cycle=5 * MS,
                              seconds=lambda size: 0.5 * MS)
    assert late.start >= hair and late.size == 100
    # Horovod's buckets are groups each launched whole, in both frameworks: one as large as
    # the model waits for backward's end
    for backend in ("hvd-torch", "hvd-tf"):
        [whole] = messages(curve, 2 * MS, TRAITS[backend].protocol_on("cpu"), 1000 * MIB,
                           lambda size: 0.5 * MS)
        assert (whole.size, whole.start) == (700, pytest.approx(2 * MS))


def test_packs_after_backward_run_one_after_another_all_exposed():
    """MultiWorkerMirroredStrategy's packs of 1 MiB: every pack starts once backward is over,
    so small packs expose all of their time, chained."""
    multiworker = TRAITS["tf-multiworker"].protocol_on("cpu")
    found = messages(CURVE, BACKWARD, multiworker, bucket_bytes=MIB, seconds=at_1gbps)
    assert found[0].start == BACKWARD and len(found) == 3
    assert exposed_seconds(found, BACKWARD) == pytest.approx(at_1gbps(16.1 * MIB))
    assert messages(CURVE, BACKWARD, TRAITS["pt-single"].protocol_on("cpu"), None,
                    at_1gbps) == []


def test_a_recorded_curve_scales_to_another_backward_and_an_even_one_adds_up():
    recorded = [{"ready": 10 * MS, "bytes": 4}, {"ready": 40 * MS, "bytes": 8}]
    assert recorded_curve(recorded, backward=20 * MS, recorded_backward=40 * MS) == [
        Gradient(5 * MS, 4), Gradient(20 * MS, 8)]
    even = even_curve(64.0, BACKWARD, pieces=4)
    assert [g.ready for g in even] == pytest.approx([25 * MS, 50 * MS, 75 * MS, 100 * MS])
    assert sum(g.size for g in even) == 64.0
    assert on_one_stream([], at_1gbps) == [] and hidden_share(0.0, 0.0) is None


def test_the_why_names_each_number_on_one_basis_for_what_it_is():
    """Every number of the why from the steps that carry collectives: alone, under compute,
    exposed, the hidden share, the overlap share, and the time in flight beyond the
    collectives' own: waiting for the slowest rank and for a core."""
    cell = {"alone_seconds": 0.029, "hidden_share": 2 / 29, "under_compute_seconds": 0.002,
            "exposed_basis_seconds": 0.027, "waiting_basis_seconds": 0.001,
            "busy_basis_seconds": 0.040, "core_wait_seconds": 0.010, "basis_steps": 32.0,
            "overlap_share": 0.45, "reduction": "all-reduce", "alone_source": "replayed",
            "all_after_backward": False, "why_missing": None}
    said = hidden_words(cell)
    assert said.startswith("; on the 32 steps that carry collectives: of 29 ms of all-reduce a "
                           "step alone (the step's collectives replayed after training")
    assert said.endswith("2 ms ran under compute and 27 ms were exposed (hidden 7%; in flight "
                         "while computing, HTA's overlap share: 45%); in flight 40 ms: 1 ms "
                         "waiting for the slowest rank, 10 ms waiting for a core")
    after = hidden_words({**cell, "all_after_backward": True, "alone_source": "after backward"})
    assert after == ("; on the 32 steps that carry collectives: every collective ran after "
                     "backward, nothing hidden: 27 ms a step exposed, 1 ms waiting for the "
                     "slowest rank")
    missing = hidden_words({**cell, "alone_seconds": math.nan, "why_missing": NOT_REPLAYED})
    assert missing == f"; its collectives: {NOT_REPLAYED}"  # what could not be measured
    assert hidden_words({**cell, "alone_seconds": math.nan}) == ""  # collectives not timed


def test_accumulation_crosses_every_micro_batchs_gradients_or_the_last_ones():
    """Four micro-batches' backward passes of 25 ms, each making 4 MiB: synced each, all 16 MiB
    cross, DDP's buckets launched in every pass; synced last (no_sync), only the last pass's 4
    MiB, launched over its 25 ms."""
    rounds = [Gradient((25 * r + 10 * (g + 1) / 2) * MS, 2 * MIB) for r in range(4)
              for g in range(2)]
    assert crossing(rounds, 4, each=True) == rounds
    last = crossing(rounds, 4, each=False)
    assert last == rounds[-2:] and sum(g.size for g in last) == 4 * MIB
    ddp = TRAITS["pt-ddp"].protocol_on("cpu")
    each_found = messages(crossing(rounds, 4, True), BACKWARD, ddp, 2 * MIB, at_1gbps)
    last_found = messages(last, BACKWARD, ddp, 2 * MIB, at_1gbps)
    assert [m.size for m in each_found] == [2 * MIB] * 8
    assert [m.size for m in last_found] == [2 * MIB] * 2
    # where nothing was recorded the bytes of all four are even over backward: the last quarter's
    even = crossing(even_curve(16 * MIB, BACKWARD, pieces=8), 4, each=False)
    assert [g.ready for g in even] == pytest.approx([87.5 * MS, BACKWARD])
    assert sum(g.size for g in even) == pytest.approx(4 * MIB)
    assert crossing(rounds, 1, each=False) == rounds
