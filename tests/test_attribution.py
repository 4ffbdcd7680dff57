"""Why a step takes what it takes: the attribution's arithmetic on hand-made steps, the faults'
settings, and faults the suite injects into real cells landing in their parts (an input delay in
the input wait, a slow rank in the others' waiting), for pt-ddp, hvd-torch and tf-multiworker on
2 ranks and tf-mirrored's one process; a capped link's, in the exposed communication of every
backend whose collectives cross it, is a phantom's (tests/test_phantoms.py)."""
import json
import math
import os
import shutil
import sys

import pytest

from tests.helpers import (
    SMOKE_SLICE,
    SMOKE_TEST_SLICE,
    strict_json,
    write_grid,
    xbench,
    xbench_here,
)
from xbench.common.errors import UserError
from xbench.common.grids.settings import check_axis
from xbench.common.measuring.attribution import (
    COUNTED,
    MARKED,
    Flight,
    Step,
    Sync,
    bridged,
    call_shares,
    covered_seconds,
    everyones_ready,
    latest_ready,
    overlap,
    partition,
    slowest_rank,
    split,
    summarize,
    with_trace,
)
from xbench.common.measuring.collective_clock import CollectiveClock
from xbench.common.measuring.step_marks import StepMarks
from xbench.common.measuring.tracing import traced_step
from xbench.common.results.store import read_rows
from xbench.common.running.link_cap import capped_link
from xbench.common.workload import faults
from xbench.common.workload.models import MODELS

MS = 1e-3


def marked(start, *parts):
    """A step from `start` whose marked parts follow each other: (part, seconds) pairs."""
    step, at = Step(start), start
    for part, seconds in parts:
        step.intervals.append((part, at, at + seconds, MARKED))
        at += seconds
    step.end = at
    return step


def test_marked_parts_add_up_to_the_window():
    step = marked(0.0, ("input", 2 * MS), ("host", 1 * MS), ("forward", 5 * MS),
                  ("backward", 9 * MS), ("optimizer", 3 * MS), ("host", 1 * MS))
    parts = partition(step, None)
    assert parts == pytest.approx({"input": 2 * MS, "forward": 5 * MS, "backward": 9 * MS,
                                   "optimizer": 3 * MS, "waiting": 0, "communication": 0,
                                   "host": 2 * MS, "untraced": 0})
    assert sum(parts.values()) == pytest.approx(step.end - step.start)


def test_the_collectives_wait_splits_where_the_last_rank_became_ready():
    """Backward's window holds the all-reduce: from this rank's ready (10 ms) it waits for the
    last rank (ready at 14 ms), then for the collective itself (done at 17 ms)."""
    step = marked(0.0, ("forward", 4 * MS), ("backward", 14 * MS), ("optimizer", 2 * MS))
    step.ready, step.collective_end = 10 * MS, 17 * MS
    parts = partition(step, latest_ready=14 * MS)
    assert parts["backward"] == pytest.approx(7 * MS)  # 4..10 ms and 17..18 ms
    assert parts["waiting"] == pytest.approx(4 * MS) and parts["communication"] == pytest.approx(
        3 * MS)
    assert sum(parts.values()) == pytest.approx(20 * MS)
    # the slowest rank itself waits for nobody
    assert partition(step, latest_ready=10 * MS)["waiting"] == 0


def test_a_traced_op_wins_over_the_collectives_wait():
    """A rank still computing (an op a trace counted) is not waiting, even with a collective in
    flight; the moments no op covers are untraced."""
    step = Step(0.0, 10 * MS, [("backward", 1 * MS, 4 * MS, COUNTED),
                               ("optimizer", 8 * MS, 9 * MS, COUNTED)])
    step.ready, step.collective_end = 3 * MS, 8 * MS
    parts = partition(step, latest_ready=5 * MS)
    assert parts == pytest.approx({"input": 0, "forward": 0, "backward": 3 * MS,
                                   "optimizer": 1 * MS, "waiting": 1 * MS,
                                   "communication": 3 * MS, "host": 0, "untraced": 2 * MS})


def test_parts_running_at_once_share_those_moments_equally():
    """Ops of two parts at once (a forward op on one device beside a backward op on another, an
    optimizer op beside the last backward op) split each moment they share equally, whichever
    part's name sorts first; the parts still add up to the window. A traced op still wins over
    the collectives' wait, and that over the loop's marks."""
    step = Step(0.0, 10 * MS, [("forward", 0, 4 * MS, COUNTED),
                               ("backward", 2 * MS, 8 * MS, COUNTED),
                               ("optimizer", 6 * MS, 8 * MS, COUNTED),
                               ("backward", 7 * MS, 9 * MS, COUNTED),
                               ("host", 0, 10 * MS, MARKED)])
    step.ready, step.collective_end = 8 * MS, 9.5 * MS
    parts = partition(step, None)
    # 0-2 forward; 2-4 forward and backward; 4-6 backward; 6-8 backward (two ops: one part)
    # and optimizer; 8-9 backward over the wait; 9-9.5 the wait; 9.5-10 the host mark
    assert parts == pytest.approx({"input": 0, "forward": 3 * MS, "backward": 5 * MS,
                                   "optimizer": 1 * MS, "waiting": 0,
                                   "communication": 0.5 * MS, "host": 0.5 * MS,
                                   "untraced": 0}, abs=1e-12)
    assert sum(parts.values()) == pytest.approx(10 * MS, abs=1e-15)
    three = Step(0.0, 3 * MS, [(part, 0, 3 * MS, COUNTED)
                               for part in ("optimizer", "backward", "forward")])
    assert [partition(three, None)[part] for part in ("forward", "backward", "optimizer")] == \
        pytest.approx([1 * MS] * 3)


def test_each_micro_batchs_wait_is_waiting_or_communication():
    """pt-ddp accumulating 2 micro-batches, synced after each: DDP's backward call returns only
    when its all-reduce is done, so each backward mark holds a wait. Every wait, the first
    micro-batch's too, is split where the last rank became ready for it (gathered from every
    rank: here rank 1, ready 2 ms after this rank for the first, 1 ms for the second); the
    forward and backward of each micro-batch stay theirs."""
    step = marked(0.0, ("input", 1 * MS), ("forward", 4 * MS), ("backward", 10 * MS),
                  ("host", 1 * MS), ("forward", 4 * MS), ("backward", 10 * MS),
                  ("host", 1 * MS), ("optimizer", 3 * MS))
    step.earlier_syncs = [Sync(11 * MS, 15 * MS)]  # this rank's first backward ended at 11 ms
    step.ready, step.collective_end = 26 * MS, 30 * MS
    other = Step(0.0, 34 * MS, ready=27 * MS, collective_end=30 * MS,
                 earlier_syncs=[Sync(13 * MS, 15 * MS)])

    def gather(value):  # every rank's, rank 1's as its steps gave it
        return [value, [(other.ready, [sync.ready for sync in other.earlier_syncs])]]
    latest = everyones_ready([step], gather)
    assert latest == [27 * MS] and step.earlier_syncs == [Sync(11 * MS, 15 * MS, 13 * MS)]
    parts = partition(step, latest[0])
    assert parts["forward"] == pytest.approx(8 * MS)
    assert parts["backward"] == pytest.approx(12 * MS)  # 5-11 ms and 20-26 ms
    assert parts["waiting"] == pytest.approx(3 * MS)  # 11-13 ms and 26-27 ms
    assert parts["communication"] == pytest.approx(5 * MS)  # 13-15 ms and 27-30 ms
    assert sum(parts.values()) == pytest.approx(34 * MS)


def test_a_traced_collective_the_rank_stopped_for_is_a_wait_of_its_own():
    """In a traced call, a collective that ended before backward did is a wait where the rank
    computed nothing during it (a micro-batch's all-reduce the next one waits for), from the
    end of the op before it; one that ran beside backward's ops is no wait of its own."""
    ns = 1_000_000
    step = traced_step((0, 20 * ns), 1.0, [
        ("forward", 0, 2 * ns), ("backward", 2 * ns, 5 * ns),
        ("forward", 8 * ns, 10 * ns), ("backward", 10 * ns, 16 * ns)],
        [Flight(6 * ns, 8 * ns, 40), Flight(11 * ns, 13 * ns, 40),
         Flight(16 * ns, 19 * ns, 40)])
    assert step.ready == pytest.approx(1.016) and step.collective_end == pytest.approx(1.019)
    assert step.earlier_syncs == [(pytest.approx(1.005), pytest.approx(1.008), None)]
    parts = partition(step, None)
    assert parts["communication"] == pytest.approx(0.006)  # 5-8 ms and 16-19 ms
    assert parts["untraced"] == pytest.approx(0.001)  # 19-20 ms
    assert sum(parts.values()) == pytest.approx(0.020)


def test_a_collective_started_after_the_rank_was_ready_leaves_its_dispatch_to_the_host():
    """XLA's combined all-reduce, dispatched 1 ms after backward's last op (a keras-jax smoke
    row's gap was 0.45 ms a step): the gap is the runtime's, host time; the exposed
    communication is the flight alone, so that it stays within the collective's own time."""
    ns = 1_000_000
    step = traced_step((0, 12 * ns), 1.0, [("forward", 0, 3 * ns), ("backward", 3 * ns, 8 * ns)],
                       [Flight(9 * ns, 11 * ns, 40)])
    parts = partition(step, None)
    assert step.ready == pytest.approx(1.008)
    assert parts["host"] == pytest.approx(0.001)  # 8-9 ms
    assert parts["communication"] == pytest.approx(0.002)  # 9-11 ms: the flight
    assert parts["untraced"] == pytest.approx(0.001) and sum(parts.values()) == pytest.approx(0.012)


def test_an_opaque_call_is_split_as_the_traced_calls_were():
    traced = [Step(0.0, 10 * MS, [("forward", 0, 4 * MS, COUNTED),
                                  ("backward", 4 * MS, 9 * MS, COUNTED)])]
    shares = call_shares(traced, [None])
    assert shares["forward"] == pytest.approx(0.4) and shares["untraced"] == pytest.approx(0.1)
    timed = marked(0.0, ("input", 1 * MS), ("call", 20 * MS))
    parts, busy, _ = split(timed, None, shares)
    assert parts["forward"] == pytest.approx(8 * MS) and parts["backward"] == pytest.approx(
        10 * MS)
    assert parts["input"] == pytest.approx(1 * MS) and busy == 0
    assert sum(parts.values()) == pytest.approx(21 * MS)


def test_an_all_reduce_after_backward_overlaps_nothing():
    """The step built by hand in the issue that found the old measure wrong: one 10 ms
    all-reduce that starts only when backward has ended. Nothing of it overlaps compute, so its
    overlap share is 0 (the old share, backward after the first gradient's hook over the moving
    time, made it 0.975)."""
    step = marked(0.0, ("forward", 10 * MS), ("backward", 30 * MS), ("optimizer", 5 * MS))
    step.ready, step.collective_end = 40 * MS, 50 * MS  # backward's call returned at 40 ms
    step.intervals[1] = ("backward", 10 * MS, 50 * MS, MARKED)  # it waited for the all-reduce
    step.intervals[2] = ("optimizer", 50 * MS, 55 * MS, MARKED)
    step.end = 55 * MS
    step.collectives = [Flight(40 * MS, 50 * MS)]
    communicating, overlapped = overlap(step)
    assert communicating == pytest.approx(10 * MS) and overlapped == 0
    parts = partition(step, None)
    assert parts["communication"] == pytest.approx(10 * MS)  # all of it exposed
    assert parts["backward"] == pytest.approx(30 * MS)


def test_buckets_all_reduced_while_backward_computes_overlap_it():
    """Three 4 ms all-reduces, two launched during backward and done before it ends, the last
    launched when backward ends: 8 of their 12 ms overlap compute; the last's 4 ms are exposed."""
    step = marked(0.0, ("forward", 10 * MS), ("backward", 34 * MS), ("optimizer", 6 * MS))
    step.ready, step.collective_end = 40 * MS, 44 * MS
    step.collectives = [Flight(20 * MS, 24 * MS), Flight(30 * MS, 34 * MS),
                        Flight(40 * MS, 44 * MS)]
    communicating, overlapped = overlap(step)
    assert communicating == pytest.approx(12 * MS) and overlapped == pytest.approx(8 * MS)
    record = summarize([step], [None], 50 * MS)["collective"]
    assert record["overlap_share"] == pytest.approx(8 / 12)
    assert record["busy_median"] == pytest.approx(12 * MS)
    assert record["moving_median"] == pytest.approx(12 * MS)  # no rank waited for another


def test_a_collective_that_blocks_the_rank_is_communication_and_overlaps_nothing():
    """FSDP2's collectives on a CPU: each call returns once the collective is done, and the rank
    did nothing else meanwhile. A gather inside forward's window (2..5 ms) and one inside
    backward's (12..14 ms) are communication, not forward or backward, and no compute overlaps
    them; the wait from the rank's ready moment (its last reduce-scatter, 20 ms) to backward's
    return is split as any collective's."""
    marks = StepMarks(stamp=iter([0, 0, 1, 10, 30, 34, 35]).__next__)
    clock = CollectiveClock(stamp=iter([2, 5, 12, 14, 20, 20, 28, 30]).__next__)
    marks.start_epoch()
    marks.begin()
    marks.mark("input")
    gather = clock.launch(blocking=True)          # 2: inside forward
    clock.complete(gather)                        # 5
    marks.mark("forward")                         # 10
    gather = clock.launch(blocking=True)          # 12: inside backward
    clock.complete(gather)                        # 14
    clock.ready(64)                               # 20: the last unit's gradients
    scatter = clock.launch(64, blocking=True)     # 20
    clock.complete(scatter)                       # 28
    clock.done()                                  # 30
    marks.mark("backward")                        # 30
    marks.mark("optimizer")                       # 34
    marks.collective(*clock.take())
    marks.end()                                   # 35
    [step] = marks.steps()
    assert [f.blocking for f in step.collectives] == [True] * 3 and step.collective_bytes == 64
    assert partition(step, latest_ready=None) == pytest.approx({
        "input": 1, "forward": 6, "backward": 8, "optimizer": 4, "waiting": 0,
        "communication": 3 + 2 + 10, "host": 1, "untraced": 0})
    assert overlap(step) == (13, 0)


def test_a_collective_clock_keeps_ready_end_each_collective_and_bytes():
    moments = iter([1.0, 1.2, 2.0, 2.1, 3.0, 3.5])
    clock = CollectiveClock(stamp=lambda: next(moments))
    clock.ready(100)           # 1.0: the first bucket's gradients ready
    first = clock.launch(100)  # 1.2: its all-reduce launched, its bytes told
    clock.ready(50)            # 2.0: the last: this rank is ready
    clock.launch()             # 2.1: the last bucket's, whose bytes and completion nobody told
    clock.complete(first)      # 3.0: the first completed (on the library's thread)
    clock.done()               # 3.5: backward (or synchronize) stopped waiting for them
    assert clock.take() == (2.0, 3.5, [(1.2, 3.0, 100, False), (2.1, 3.5, None, False)], 150,
                            [(1.0, 100), (2.0, 50)], [])
    assert clock.take() is None  # the next step starts empty
    one = CollectiveClock(stamp=iter([1.0, 1.5]).__next__)  # one process: nothing launched
    one.ready(40)
    one.done()
    assert one.take() == (None, None, [], 40, [(1.0, 40)], [])


def test_a_collective_clock_keeps_each_micro_batchs_wait_apart():
    """--accumulate-sync each: every micro-batch's gradients cross before the next micro-batch,
    and the step waits for them each time; each wait runs from that micro-batch's last gradient
    to its end, the last one's as the step's, the others' as earlier waits. A completion nobody
    told was seen when the wait for it ended, not at the step's last."""
    moments = iter([1.0, 1.1, 1.5, 2.0, 2.1, 2.6, 2.7])
    clock = CollectiveClock(stamp=lambda: next(moments))
    clock.ready(100)    # 1.0: micro-batch 1's gradient
    clock.launch(100)   # 1.1: its all-reduce, whose completion nobody tells
    clock.done()        # 1.5: its wait over
    clock.ready(100)    # 2.0: micro-batch 2's
    second = clock.launch(100)  # 2.1
    clock.complete(second)      # 2.6
    clock.done()                # 2.7
    assert clock.take() == (2.0, 2.7, [(1.1, 1.5, 100, False), (2.1, 2.6, 100, False)], 200,
                            [(1.0, 100), (2.0, 100)], [(1.0, 1.5)])
    assert covered_seconds([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)


def write_trace(folder, step_ns, ops, collectives):
    """A profiler trace (XSpace) as TensorFlow writes it, built by hand: the step's event over
    `step_ns` (start, end), each op's event ((name, start, end) in ns) and each asynchronous
    collective's launch and completion ((name, launch, done) in ns) with the stats TensorFlow
    gives them."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from xbench.tf_backend.trace import ASYNC_EVENTS, STEP_EVENT
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids = {}

    def metadata(table, name):
        if name not in ids:
            ids[name] = len(ids) + 1
            table[ids[name]].id, table[ids[name]].name = ids[name], name
        return ids[name]

    def event(line, label, start, end, stats=()):
        added = line.events.add(metadata_id=metadata(plane.event_metadata, label),
                                offset_ps=start * 1000, duration_ps=(end - start) * 1000)
        for stat, value in dict(stats).items():
            key = metadata(plane.stat_metadata, stat)
            if isinstance(value, str):
                added.stats.add(metadata_id=key, str_value=value)
            else:
                added.stats.add(metadata_id=key, int64_value=value)
    python, compute = plane.lines.add(name="python"), plane.lines.add(name="tf_Compute/1")
    event(python, STEP_EVENT, *step_ns)
    for name, start, end in ops:
        event(compute, name, start, end)
    for name, launch, done in collectives:
        stats = {"name": name, "kernel_type": "CollectiveReduceV2", "step_id": 7}
        event(compute, ASYNC_EVENTS[0], launch, launch + 10, stats)
        event(compute, ASYNC_EVENTS[1], done - 10, done, stats)
    (folder / "host.xplane.pb").write_bytes(space.SerializeToString())


def test_a_traced_rank_is_ready_when_its_backward_ends_not_at_its_last_launch(tmp_path):
    """MultiWorkerMirroredStrategy's small packs, launched one after another once backward is
    over (at 60 ms): the rank was ready when backward's last op ended (the slow-rank fault's
    op is backward's), and the packs' 30 ms after it are communication, not untraced. Without a
    backward op the last launch stays the rank's ready moment."""
    from xbench.tf_backend.trace import INJECTED_SCOPE, TensorFlowTracer
    ms = 1_000_000
    write_trace(tmp_path, (0, 100 * ms), [
        ("dense/MatMul:MatMul", 0, 20 * ms),
        ("gradient_tape/dense/MatMul:MatMul", 20 * ms, 50 * ms),
        (f"{INJECTED_SCOPE}/Sleep:Sleep", 50 * ms, 60 * ms),
        ("xbench_optimizer/adam/update:AssignSubVariableOp", 90 * ms, 100 * ms)],
        [("CollectiveReduceV2_1", 70 * ms, 90 * ms),  # written out of order
         ("CollectiveReduceV2", 60 * ms, 70 * ms)])
    [step] = TensorFlowTracer().read(str(tmp_path), [5.0])  # the call began 5 s into the epoch
    assert step.ready == pytest.approx(5.06) and step.collective_end == pytest.approx(5.09)
    # in the order they were launched; the trace tells no bytes
    assert [(f.launch, f.end) for f in step.collectives] == [
        pytest.approx((5.06, 5.07)), pytest.approx((5.07, 5.09))]
    assert all(flight.size is None for flight in step.collectives)
    parts = partition(step, latest_ready=None)
    assert parts["communication"] == pytest.approx(0.03) and parts["untraced"] == pytest.approx(0)
    assert parts["backward"] == pytest.approx(0.04)
    write_trace(tmp_path, (0, 100 * ms), [("dense/MatMul:MatMul", 0, 20 * ms)],
                [("CollectiveReduceV2", 30 * ms, 40 * ms), ("CollectiveReduceV2_1", 50 * ms,
                                                            90 * ms)])
    [step] = TensorFlowTracer().read(str(tmp_path), [0.0])
    assert step.ready == pytest.approx(0.05)


def test_a_compiled_tensorflow_step_is_one_op_the_trace_cannot_split(tmp_path):
    """Under jit_compile=True TensorFlow's trace sees the step as one op, XLA's cluster of the
    whole function: its time is untraced, none of it forward."""
    from xbench.tf_backend.trace import TensorFlowTracer
    ms = 1_000_000
    write_trace(tmp_path, (0, 100 * ms), [
        ("__inference_train_step_486:__inference_train_step_486", 5 * ms, 99 * ms)], [])
    [step] = TensorFlowTracer().read(str(tmp_path), [0.0])
    parts = partition(step, latest_ready=None)
    assert parts["untraced"] == pytest.approx(0.1)
    assert parts["forward"] == parts["backward"] == parts["optimizer"] == 0


def test_the_epoch_summary_names_its_residual_and_the_slowest_rank():
    moments = [0.0, 0.0, 0.001, 0.01, 0.01, 0.01, 0.011, 0.02, 0.02]  # origin, then 4 a step
    marks = StepMarks(stamp=iter(moments).__next__)
    marks.start_epoch()
    for _ in range(2):
        marks.begin()
        marks.mark("input")
        marks.mark("forward")
        marks.end()
    steps = marks.steps()
    summary = summarize(steps, [None, None], epoch_seconds=0.0205)
    assert summary["parts"]["forward"]["seconds"] == pytest.approx(0.018)
    assert summary["residual_seconds"] == pytest.approx(0.0005) and summary["adds_up"]
    assert not summarize(steps, [None, None], epoch_seconds=0.03)["adds_up"]
    waited = [{"parts": {"waiting": {"seconds": s}}} for s in (0.5, 0.0, 0.4)]
    assert slowest_rank(waited) == 1 and slowest_rank(waited[:1]) is None
    assert latest_ready([[1.0, None], [2.0, None]]) == [2.0, None]


@pytest.mark.parametrize("text, expected", [
    ("none", faults.Faults()),
    ("input-delay=20", faults.Faults(input_delay=0.02)),
    ("slow-rank=1:30+link=400mbit", faults.Faults(slow_rank=1, slow_seconds=0.03,
                                                  link="400mbit")),
])
def test_faults_parse(text, expected):
    assert faults.parse(text) == expected
    assert faults.parse("link=400mbit").link_bytes_per_second == 50e6


@pytest.mark.parametrize("text, message", [
    ("input-delay=0", "a delay is milliseconds above 0"),
    ("input-delay=nan", "a delay is milliseconds above 0"),
    ("slow-rank=x:30", "slow-rank=R:MS takes a rank R"),
    ("slow-rank=1:0", "above 0 and at most 10,000, e.g. slow-rank=1:30"),
    ("link=fast", "link=RATE takes tc's rate"),
    ("packet-loss=1", "unknown fault 'packet-loss'"),
    ("input-delay=5+input-delay=6", "names input-delay twice"),
    # rates tc cannot take for a token bucket a loopback packet fits in
    ("link=0.0001kbit", "from 8kbit to 1000gbit"), ("link=7kbit", "from 8kbit to 1000gbit"),
    ("link=100000gbit", "from 8kbit to 1000gbit"),
    ("link=999999999999gbit", "from 8kbit to 1000gbit"),
])
def test_bad_faults_are_one_clear_error(text, message):
    with pytest.raises(UserError, match=message):
        faults.parse(text)


@pytest.mark.parametrize("text", ["link=1000001kbit", "link=1234567.5kbit", "link=12.3456kbit",
                                  "input-delay=0.00000001", "input-delay=0.0123"])
def test_a_fault_spelled_one_way_reads_back_the_same(text):
    """The spelling is a rate or delay faults.parse reads again, never an exponent's '+'."""
    once = faults.check(text)
    assert faults.check(once) == once and "+" not in once and "e+" not in once
    parsed, given = faults.parse(once), faults.parse(text)
    assert parsed.input_delay == pytest.approx(given.input_delay, rel=1e-9)
    if given.link:  # a rate in kbit is spelled to 3 decimals: 12.3456kbit is 12.346kbit
        assert parsed.link_bytes_per_second == pytest.approx(given.link_bytes_per_second,
                                                             rel=1e-4)


@pytest.mark.processes(
    "the dry run measures the cell's costs in a real cell and tries a capped link (unshare)")
@pytest.mark.parametrize("spellings", [
    ["input-delay=1000", "input-delay=1_000", "input-delay=1e3", "input-delay=1000.0",
     "input-delay=01000"],
    ["slow-rank=1:10", "slow-rank=01:10", "slow-rank=1:10.0"],
    ["link=400mbit", "link=0.4gbit", "link=400000kbit", "link=50mbps"],
    ["input-delay=20+slow-rank=1:30", "slow-rank=1:30+input-delay=20"],
])
def test_one_fault_spelled_differently_is_one_cell(spellings):
    assert check_axis("inject", spellings) == [spellings[0]]
    run = xbench_here("grid", "--preset", "smoke", "--backend", "pt-single", "--devices", "1",
                      "--inject", ",".join(spellings), "--dry-run")
    assert run.returncode == 0, run.stderr
    assert "1 cells:" in run.stdout and f"|inject-{spellings[0]}]" in run.stdout, run.stdout


def test_a_bad_fault_on_the_command_line_exits_2():
    run = xbench_here("grid", "--preset", "smoke", "--inject", "slow-rank=1", "--dry-run")
    assert run.returncode == 2 and "slow-rank=R:MS takes a rank R" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("options, reason", [
    (["--backend", "pt-ddp", "--devices", "2", "--inject", "link=50mbit"],
     "unsupported: inject link: a capped link needs unshare, ip, tc"),
    (["--backend", "pt-single", "--devices", "1", "--precision", "tf32", "--device", "cpu"],
     "unsupported: precision tf32: TF32 is a math mode of NVIDIA GPUs"),
])
def test_the_dry_run_asks_what_the_run_asks(options, reason, tmp_path):
    """Without tc on PATH (an empty PATH here) a capped link cannot run; the dry run says so
    instead of forecasting a time for a cell the run would refuse."""
    run = xbench_here("grid", "--preset", "smoke", *options, "--dry-run",
                      env={"PATH": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert reason in run.stdout and "1 unsupported here, 0 to run" in run.stdout, run.stdout


def test_a_capped_link_is_a_network_namespace_with_a_token_bucket():
    command = capped_link(["python", "-m", "x"], "400mbit", 50e6)
    assert command[:3] == ["unshare", "--net", "--"]
    assert "tc qdisc add dev lo root tbf rate 400mbit burst 200000" in command[5]
    assert command[-3:] == ["python", "-m", "x"]


# --- faults injected into real cells ------------------------------------------------------------

SLOW_MS, DELAY_MS, LINK = 100, 40, "200mbit"
MULTI = ["pt-ddp", "hvd-torch", "tf-multiworker"]
# An input delay on 2 ranks where the step's parts come from marks and from a trace (hvd-torch's
# input is pt-ddp's loop's), and in tf-mirrored's one process of 2 replicas. The delay is the
# common loop's (common.running.training_loop) and the input part its mark, in any number of ranks:
# pt-single's steps are marked as pt-ddp's are, tf-single's traced as tf-mirrored's, left out.
DELAYED = ["pt-ddp", "tf-multiworker"]
INJECTED = ["none", f"input-delay={DELAY_MS}", f"slow-rank=1:{SLOW_MS}", f"link={LINK}"]


@pytest.fixture(scope="module")
def injected(smoke, mnist_dir, tmp_path_factory):
    """pt-ddp, hvd-torch and tf-multiworker on 2 ranks with a slow rank (an input delay on
    DELAYED), pt-ddp with a capped link (for xbench predict: a capped link's exposed
    communication in every backend is a phantom's, tests/test_phantoms.py), tf-mirrored's one
    process with an input delay and a slow rank, and tf-single with a slow rank, on the shared
    grid's slices of real MNIST (16 steps an epoch; the same test images: a report or
    prediction groups the rows only with those); the same cells without a fault (and pt-ddp on
    1 device, for xbench predict) are the shared grid's own."""
    folder = tmp_path_factory.mktemp("faults")
    rows = [smoke.rows[cell] for cell in ((backend, 2) for backend in MULTI)]
    rows += [smoke.rows[cell] for cell in (("pt-ddp", 1), ("tf-mirrored", 2))]
    for name, settings in (("multi", {"backends": MULTI, "devices": [2], "inject": INJECTED[2:3]}),
                           ("capped", {"backends": ["pt-ddp"], "devices": [2],
                                       "inject": INJECTED[3:]}),
                           ("delayed", {"backends": DELAYED, "devices": [2],
                                        "inject": INJECTED[1:2]}),
                           ("single", {"backends": ["tf-single"], "devices": [1],
                                       "inject": INJECTED[2:3]}),
                           ("mirrored", {"backends": ["tf-mirrored"], "devices": [2],
                                         "inject": INJECTED[1:3]})):
        # the shared grid's contention limit, which marks nothing: where a fault lands must not
        # depend on how busy the machine was (contended rows would be left out of predictions)
        grid = write_grid(folder, name=name, max_train_samples=SMOKE_SLICE,
                          max_test_samples=SMOKE_TEST_SLICE, contention_limit=1.0, **settings)
        run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", folder / f"{name}.jsonl",
                     timeout=1800)
        assert run.returncode == 0, run.stdout + run.stderr
        rows += read_rows(folder / f"{name}.jsonl")[0]
    return {(r["backend"], r["devices"], r["inject"]): r for r in rows}


def last_epoch(row):
    return row["attribution"]["epochs"][-1]["ranks"]


def test_every_injected_row_says_so_and_adds_up(injected):
    for (backend, _devices, inject), row in injected.items():
        assert row["inject"] == inject and (inject == "none") == ("|inject-" not in row["cell_key"])
        if row["status"] != "ok":
            continue
        for epoch in row["attribution"]["epochs"]:
            assert all(rank["adds_up"] for rank in epoch["ranks"]), (backend, inject)
        traced = row["attribution"]["traced_steps"]  # a tf.function step is split by a trace
        if row["framework"] == "tensorflow":  # of 8 of the 16 steps of its timed epoch 2
            assert traced == {"epochs": "the second on", "every": 2, "steps": 8}
            assert row["epochs"][1]["untimed_seconds"] > 0  # the tracer's, out of the time
        else:
            assert traced is None and row["epochs"][1]["untimed_seconds"] == 0.0


@pytest.mark.parametrize("backend, devices", [(b, 2) for b in DELAYED] + [("tf-mirrored", 2)])
def test_an_input_delay_lands_in_the_input_wait(injected, backend, devices):
    plain = last_epoch(injected[(backend, devices, "none")])
    delayed = last_epoch(injected[(backend, devices, f"input-delay={DELAY_MS}")])
    expected = DELAY_MS * MS * delayed[0]["steps"]
    for before, after in zip(plain, delayed):
        # every step slept at least the delay inside its input window: whatever else runs here
        assert after["parts"]["input"]["p10"] >= 0.98 * DELAY_MS * MS, (backend, after)
        # all of it in the input part: counted in the delayed run itself (the plain run's own
        # input time moves with what else runs, and once took 0.16 s more than the delayed
        # run's beside it)
        assert after["parts"]["input"]["seconds"] >= 0.9 * expected, (backend, after, expected)
        added = after["parts"]["input"]["seconds"] - before["parts"]["input"]["seconds"]
        # and not much more than it (how close, on a quiet machine: benchmarks and notes)
        assert added <= 2 * expected, (backend, added, expected)


@pytest.mark.parametrize("backend", MULTI)
def test_a_slow_rank_lands_in_the_others_waiting(injected, backend):
    row = injected[(backend, 2, f"slow-rank=1:{SLOW_MS}")]
    fast, slow = last_epoch(row)
    # the fast rank waits for the slow one's sleep, give or take the ranks' compute difference
    assert 0.5 * SLOW_MS * MS <= fast["parts"]["waiting"]["median"] <= 2 * SLOW_MS * MS
    assert slow["parts"]["waiting"]["median"] < 0.5 * SLOW_MS * MS  # nobody to wait for
    assert row["attribution"]["epochs"][-1]["slowest_rank"] == 1


def test_a_slow_rank_needs_a_rank_of_its_own(injected):
    """tf-mirrored's replicas share one process; one device has no rank 1."""
    for cell, reason in ((("tf-mirrored", 2), "replicas share one process"),
                         (("tf-single", 1), "the cell has ranks 0 to 0")):
        row = injected[(*cell, f"slow-rank=1:{SLOW_MS}")]
        assert row["status"] == "unsupported" and reason in row["error"]


def grid_rows(folder, mnist_dir, name, **settings) -> list[dict]:
    """The rows of a small grid of `settings` on the shared grid's slices of real MNIST, judged
    by a contention limit that marks nothing (where a part lands must not depend on how busy the
    machine was)."""
    grid = write_grid(folder, name=name, max_train_samples=SMOKE_SLICE,
                      max_test_samples=SMOKE_TEST_SLICE, contention_limit=1.0, **settings)
    run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", folder / f"{name}.jsonl",
                 timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    return read_rows(folder / f"{name}.jsonl")[0]


@pytest.fixture(scope="module")
def accumulating(mnist_dir, tmp_path_factory):
    """pt-ddp, hvd-torch and tf-multiworker on 2 ranks, each step 4 micro-batches synced after
    each one, rank 1 slowed by SLOW_MS once a step (before its first micro-batch's backward)."""
    rows = grid_rows(tmp_path_factory.mktemp("accumulating"), mnist_dir, "accumulating",
                     backends=MULTI, devices=[2], accumulate=[4], accumulate_sync=["each"],
                     inject=INJECTED[2:3])
    return {row["backend"]: row for row in rows}


@pytest.mark.parametrize("backend", MULTI)
def test_a_micro_batchs_wait_for_a_slow_rank_is_waiting(accumulating, backend):
    """The fast rank waits for the slow one at the first micro-batch's sync: in pt-ddp inside
    DDP's backward call, in hvd-torch in Horovod's synchronize, in tf-multiworker (whose
    micro-batches' all-reduces run beside the next micro-batch's compute) at the step's last
    sync. Each is its waiting part, not backward or host; the parts add up."""
    row = accumulating[backend]
    assert row["status"] == "ok", row["error"]
    fast, slow = last_epoch(row)
    assert 0.5 * SLOW_MS * MS <= fast["parts"]["waiting"]["median"] <= 2 * SLOW_MS * MS, fast
    assert slow["parts"]["waiting"]["median"] < 0.5 * SLOW_MS * MS
    assert all(rank["adds_up"] for epoch in row["attribution"]["epochs"]
               for rank in epoch["ranks"])


@pytest.fixture(scope="module")
def compiled(mnist_dir, tmp_path_factory):
    """tf-single's step compiled (jit_compile=True, the one TensorFlow backend that compiles
    on this CPU)."""
    [row] = grid_rows(tmp_path_factory.mktemp("compiled"), mnist_dir, "compiled",
                      backends=["tf-single"], devices=[1], compile=["on"])
    return row


def test_a_compiled_tensorflow_steps_row_says_its_parts_are_not_split(compiled):
    """Its trace holds one op for the compiled step: the row's step is untraced, not forward,
    and its attribution says why."""
    assert compiled["status"] == "ok", compiled["error"]
    [rank] = last_epoch(compiled)
    parts = {part: rank["parts"][part]["seconds"] for part in rank["parts"]}
    step = sum(parts.values())
    assert parts["untraced"] >= 0.5 * step, parts
    assert parts["forward"] + parts["backward"] + parts["optimizer"] <= 0.05 * step, parts
    how = compiled["attribution"]["how"]
    assert "jit_compile=True" in how["untraced"] and "cannot split" in how["untraced"]
    assert "jit_compile=True" in how["forward"]


def test_without_tc_a_capped_link_is_unsupported_with_the_reason(mnist_dir, tmp_path):
    """Where a namespace with a capped loopback cannot be made (here: tc is not on PATH; as a
    user without CAP_NET_ADMIN it is refused the same way) the cell says why."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("unshare", "ip"):
        (bare / tool).symlink_to(shutil.which(tool))
    grid = write_grid(tmp_path, backends=["pt-ddp"], devices=[2], inject=["link=400mbit"])
    env = {**os.environ, "PATH": f"{bare}{os.pathsep}{os.path.dirname(sys.executable)}"}
    run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", tmp_path / "r.jsonl",
                 env=env)
    assert run.returncode == 0, run.stderr
    [row] = read_rows(tmp_path / "r.jsonl")[0]
    assert row["status"] == "unsupported"
    assert "inject link: a capped link needs tc (util-linux, iproute2)" in row["error"]


def test_the_grid_prints_the_split_of_a_step(smoke):
    line = next(line for run in smoke.runs.values() for line in run.stdout.splitlines()
                if "a step:" in line)
    shares = [int(part.split()[-1].rstrip("%")) for part in line.split(":", 1)[1].split("·")]
    assert 95 <= sum(shares) <= 105 and "forward" in line and "backward" in line


def test_injected_cells_stay_out_of_verdicts_and_comparisons(injected, tmp_path):
    rows = [r for r in injected.values() if r["backend"] == "pt-ddp"]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md",
                         "--include-contended")  # what else ran on the machine does not matter
    assert report.returncode == 0, report.stderr
    summary = (tmp_path / "out" / "summary.md").read_text().replace("\\", "")
    verdicts = summary.split("## What the results say")[1].split("\n## ")[0]
    assert "inject" not in verdicts
    assert "inject slow-rank=1:100" in summary  # but shown in the tables
    compared = strict_json(xbench_here("compare", results, results, "--json").stdout)["cells"]
    assert sorted(c["cell_key"] for c in compared) == \
        sorted(injected[("pt-ddp", n, "none")]["cell_key"] for n in (1, 2))


def test_a_capped_links_cells_are_predicted_through_their_cap(injected, tmp_path):
    """xbench predict on the capped-link grid's rows: the capped cell's collectives through its
    cap, shared by the two ranks on the one loopback (by hand: two passes of half the bytes at
    half the cap); the faults the model has no part for, and the cells of backends without a
    1-device cell to predict from, left out."""
    results = tmp_path / "injected.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in injected.values()))
    run = xbench_here("predict", results, "--json")
    assert run.returncode == 0, run.stderr
    check = strict_json(run.stdout)["check"]
    assert {c["inject"] for c in check} <= {"none", f"link={LINK}"}
    capped = {c["backend"]: c for c in check if c["inject"] == f"link={LINK}"}
    assert set(capped) == {"pt-ddp"}
    assert not {c["backend"] for c in check} & {"hvd-torch", "tf-multiworker"}  # no 1-device cell
    cap = faults.parse(f"link={LINK}").link_bytes_per_second
    cell = capped["pt-ddp"]
    counted = last_epoch(injected[("pt-ddp", 2, f"link={LINK}")])[0]["collective"]["bytes_per_step"]
    assert counted == MODELS["small"].gradient_bytes()  # DDP's buckets: every gradient, once a step
    assert cell["link"] == "the cap"
    assert cell["moving"] == pytest.approx(2 * (1 / 2) * counted / (cap / 2), rel=1e-9)
    assert 0 < cell["epoch_seconds"] and math.isfinite(cell["error"])


def test_a_micro_batchs_wait_for_its_collective_is_no_compute_it_overlaps():
    """--accumulate-sync each: backward from 0 to 30 ms holds a wait for the first micro-batch's
    all-reduce (10 to 20 ms), in flight from 10 to 20 ms; another collective flies from 25 ms to
    40 ms. The first overlapped nothing (the rank waited for it); the second overlapped the 5 ms
    of backward left after it launched."""
    step = Step(0.0, 0.05, [("backward", 0.0, 0.03, MARKED), ("host", 0.03, 0.05, MARKED)],
                ready=0.03, collective_end=0.04,
                collectives=[Flight(0.01, 0.02), Flight(0.025, 0.04)],
                earlier_syncs=[Sync(0.01, 0.02)])
    communicating, overlapped = overlap(step)
    assert communicating == pytest.approx(0.025) and overlapped == pytest.approx(0.005)


def test_the_gaps_between_a_parts_traced_ops_are_that_parts():
    """Inside a traced call: forward ops 0-10 and 12-20 ms, backward ops 20-25, 30-35 and 40-45
    ms, an optimizer op 50-52 ms. The gaps 10-12 (forward), 25-30 and 35-40 (backward) are their
    part's; 45-50, between backward and the optimizer, stays untraced; and a gap a collective
    flies in is left as it was."""
    ms = 1e-3
    ops = [("forward", 0.0, 10 * ms, COUNTED), ("forward", 12 * ms, 20 * ms, COUNTED),
           ("backward", 20 * ms, 25 * ms, COUNTED), ("backward", 30 * ms, 35 * ms, COUNTED),
           ("backward", 40 * ms, 45 * ms, COUNTED), ("optimizer", 50 * ms, 52 * ms, COUNTED)]
    assert bridged(ops) == [("forward", 10 * ms, 12 * ms, COUNTED),
                            ("backward", 25 * ms, 30 * ms, COUNTED),
                            ("backward", 35 * ms, 40 * ms, COUNTED)]
    assert bridged(ops, [Flight(26 * ms, 29 * ms)]) == [("forward", 10 * ms, 12 * ms, COUNTED),
                                                       ("backward", 35 * ms, 40 * ms, COUNTED)]
    parts = partition(with_trace(Step(0.0, 52 * ms, [("call", 0.0, 52 * ms, MARKED)]),
                                 Step(0.0, 52 * ms, ops)), None)
    assert parts["forward"] == pytest.approx(20 * ms)
    assert parts["backward"] == pytest.approx(25 * ms)
    assert parts["untraced"] == pytest.approx(5 * ms)
