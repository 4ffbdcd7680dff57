"""What TensorFlow's profiler saw inside traced step calls: each op of a step labelled by what it
does, and the step's collective (CollectiveReduceV2 under MultiWorkerMirroredStrategy, Horovod's
all-reduce ops under hvd-tf, the reduction to one device and its copies under MirroredStrategy on
a CPU), in the host clock of the loop's marks.

A tf.function step is one call on the host: only a trace sees inside it. Ops are labelled by
their name scope, which TensorFlow gives them from where they were made: `gradient_tape/...` is
the backward pass, the optimizer's scope its update, the collectives by their op type, and the
rest of the replica's function the forward pass and loss.
"""
import glob
import os
import re
import tempfile
from collections.abc import Callable

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from xbench.common.measuring.attribution import COUNTED, Step, covered_seconds

STEP_EVENT = "xbench_step"
TRACED_STEPS = 8  # steps traced after the timed epochs
COLLECTIVE_OPS = ("CollectiveReduceV2", "CollectiveReduce", "NcclAllReduce", "HorovodAllreduce",
                  "HorovodGroupedAllreduce")
COPY_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")  # between a process's devices
# An op's event is named 'scope/.../name:Type'; the profiler's own events ('ExecutorState::Process',
# 'EagerLocalExecute: Pack', tf.data's 'Iterator::...') are not ops.
OP_EVENT = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")
# An asynchronous op (a collective) is seen launched and done, with its name and type as stats.
ASYNC_EVENTS = ("ExecutorState::ProcessAsync::Start", "ExecutorState::ProcessAsync::Done")
INPUT_THREADS = "tf_data"  # tf.data's threads: the input pipeline, running beside the step
INJECTED_SCOPE = "xbench_slow_rank"  # common's slow-rank fault: this rank's compute, made longer
BOOKKEEPING_SCOPE = "xbench_totals"  # the epoch's loss and correct count
# The optimizer's update, whatever the optimizer: under fp16 a LossScaleOptimizer runs the inner
# one's update inside a cond, whose ops take the cond's name, not the optimizer's.
OPTIMIZER_SCOPE = "xbench_optimizer"


def label(op: str) -> str:
    """The part an op of the trace belongs to ('collective' for the step's reduction), from its
    event name 'scope/.../name:Type'."""
    name, _, op_type = op.rpartition(":")
    scopes = name.split("/")
    if scopes[0].startswith("replica_"):  # MirroredStrategy's other replicas
        scopes = scopes[1:]
    if op_type in COLLECTIVE_OPS or op_type in COPY_OPS:
        return "collective"
    if scopes[0] == "gradient_tape" or scopes[0] == INJECTED_SCOPE:
        return "backward"
    if scopes[0] == OPTIMIZER_SCOPE:
        return "collective" if op_type == "AddN" else "optimizer"  # the sum over replicas
    if scopes[0] == BOOKKEEPING_SCOPE:
        return "host"
    return "forward"


def traced_steps(run_step: Callable[[int], None], stamp: Callable[[], float],
                 steps: int) -> list[Step]:
    """Run `run_step(i)` for i in range(`steps`) under the profiler and return each step's
    window and its labelled ops, in the clock of `stamp` (the loop's): the trace's own clock is
    placed by each step's start, which both clocks see."""
    folder = tempfile.mkdtemp(prefix="xbench-trace-")
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                       device_tracer_level=1)
    starts = []
    tf.profiler.experimental.start(folder, options=options)
    try:
        for index in range(steps):
            starts.append(stamp())
            with tf.profiler.experimental.Trace(STEP_EVENT, step_num=index, _r=1):
                run_step(index)
    finally:
        tf.profiler.experimental.stop()
    try:
        return _read(folder, starts)
    finally:
        for path in glob.glob(os.path.join(folder, "**"), recursive=True)[::-1]:
            (os.rmdir if os.path.isdir(path) else os.remove)(path)


def _read(folder: str, starts: list[float]) -> list[Step]:
    [path] = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    # In the trace's clock (ns): the steps' windows, the ops (name, start, end), and when each
    # asynchronous collective was launched and done.
    windows, ops, launched, done = [], [], {}, {}
    for plane in space.planes:
        stat_names = {key: value.name for key, value in plane.stat_metadata.items()}
        for line in plane.lines:
            if line.name.startswith(INPUT_THREADS):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                start = line.timestamp_ns + event.offset_ps / 1000
                end = start + event.duration_ps / 1000
                if name in ASYNC_EVENTS:  # an asynchronous op's launch or completion
                    stats = {stat_names[stat.metadata_id]: _value(stat, stat_names)
                             for stat in event.stats}
                    if stats.get("kernel_type") in COLLECTIVE_OPS:
                        key = (stats.get("name"), stats.get("step_id"))
                        if name == ASYNC_EVENTS[0]:
                            launched[key] = start
                        else:
                            done[key] = end
                elif name == STEP_EVENT:
                    windows.append((start, end))
                elif OP_EVENT.match(name):
                    ops.append((name, start, end))
    collectives = [(launched[key], done[key]) for key in launched.keys() & done.keys()]
    steps = []
    for (low, high), host_start in zip(sorted(windows), starts):
        offset = host_start - low / 1e9
        at = lambda ns, offset=offset: ns / 1e9 + offset  # noqa: E731
        step = Step(host_start, at(high))
        for name, start, end in ops:
            if low <= start < high and name.rpartition(":")[2] not in COLLECTIVE_OPS:
                part = label(name)
                step.intervals.append(("communication" if part == "collective" else part,
                                       at(start), at(min(end, high)), COUNTED))
        mine = [(at(a), at(min(b, high))) for a, b in collectives if low <= a < high]
        if mine:
            step.ready = max(a for a, _ in mine)  # the last one launched: this rank is ready
            step.collective_end = max(b for _, b in mine)
            step.collective_busy = covered_seconds(mine)
        steps.append(step)
    return steps


def _value(stat, stat_names: dict):
    """A trace statistic's value (a reference names another metadata entry)."""
    kind = stat.WhichOneof("value")
    return stat_names.get(stat.ref_value) if kind == "ref_value" else getattr(stat, kind)
