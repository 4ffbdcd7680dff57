"""What TensorFlow's profiler saw inside traced step calls: each op of a step labelled by what it
does, and the step's collective (CollectiveReduceV2 under MultiWorkerMirroredStrategy, Horovod's
all-reduce ops under hvd-tf, the reduction to one device and its copies under MirroredStrategy on
a CPU), in the host clock of the loop's marks.

A tf.function step is one call on the host: only a trace sees inside it. Ops are labelled by
their name scope, which TensorFlow gives them from where they were made: `gradient_tape/...` is
the backward pass, the optimizer's scope its update, the collectives by their op type, and the
rest of the replica's function the forward pass and loss. The rank is ready for its collectives
when its backward's last op ends: what the step waits for its collectives after that is waiting
or communication (common.measuring.attribution.partition), however late they were launched.
"""
import glob
import math
import os
import re
import tempfile
from collections.abc import Callable

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from xbench.common.measuring.attribution import COUNTED, Flight, Step

STEP_EVENT = "xbench_step"
SAMPLED = 8  # steps of each timed epoch from the second on, evenly spaced, that are traced
COLLECTIVE_OPS = ("CollectiveReduceV2", "CollectiveReduce", "NcclAllReduce", "HorovodAllreduce",
                  "HorovodGroupedAllreduce")
COPY_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")  # between a process's devices
# An op's event is named 'scope/.../name:Type'; the profiler's own events ('ExecutorState::Process',
# 'EagerLocalExecute: Pack', tf.data's 'Iterator::...') are not ops.
OP_EVENT = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")
# An asynchronous op (a collective) is seen launched and done, with its name and type as stats.
# They give its name, type and step, not its bytes, so a collective's size is left None: only the
# allocation of a pack's concatenated input shows them, under a name of TensorFlow's making, and
# a pack that needs no new buffer (one gradient) allocates nothing.
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


class Tracer:
    """TensorFlow's profiler around sampled steps of the timed epochs: started before such a
    step and stopped after it, between steps (the loop takes that time out of the epoch's), the
    step's call wrapped in a STEP_EVENT the trace shows, and the traces read once training is
    over."""

    def __init__(self):
        self.options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
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
        tf.profiler.experimental.start(folder, options=self.options)
        self.taken.append((epoch, step, folder, math.nan))
        self.active = True

    def call(self, run: Callable[[], object], start: float) -> object:
        """Run the traced step's call, `start`: its start in the loop's clock."""
        epoch, step, folder, _ = self.taken[-1]
        self.taken[-1] = (epoch, step, folder, start)
        with tf.profiler.experimental.Trace(STEP_EVENT, step_num=step, _r=1):
            return run()

    def stop(self) -> None:
        tf.profiler.experimental.stop()
        self.active = False

    def steps(self) -> list[tuple[int, int, Step]]:
        """(epoch, step, what the trace saw of its call) of every traced step, in the loop's
        clock (placed by the call's start, which both clocks see)."""
        found = []
        for epoch, step, folder, start in self.taken:
            try:
                found += [(epoch, step, traced) for traced in _read(folder, [start])]
            finally:
                for path in glob.glob(os.path.join(folder, "**"), recursive=True)[::-1]:
                    (os.rmdir if os.path.isdir(path) else os.remove)(path)
        return found

    def described(self, steps: int) -> dict:
        """Which steps were traced, as the row records it."""
        return {"epochs": "the second on", "every": max(1, steps // SAMPLED),
                "steps": len(self.taken)}


def _read(folder: str, starts: list[float]) -> list[Step]:
    [path] = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    windows, ops, collectives = _events(space)
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
        mine = [Flight(at(a), at(min(b, high))) for a, b in collectives if low <= a < high]
        if mine:
            _set_collectives(step, mine)
        steps.append(step)
    return steps


def _set_collectives(step: Step, flights: list[Flight]) -> None:
    """The step's collectives; this rank was ready for them when its backward ended (its last
    backward op, the slow-rank fault's included), not at the last launch: small packs run one
    after another, launched long after backward, and the wait for them is the step's
    communication (or waiting, until the slowest rank's backward ended). A step without a
    backward op was ready at its last launch."""
    backward = [end for part, _, end, _ in step.intervals if part == "backward"]
    step.ready = max(backward) if backward else flights[-1].launch
    step.collective_end = max(f.end for f in flights)
    step.collectives = flights


def _events(space) -> tuple[list, list, list]:
    """In the trace's clock (ns): the steps' windows, the ops (name, start, end) and each
    asynchronous collective's (launch, done), in the order they were launched."""
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
    return windows, ops, sorted((launched[key], done[key])
                                for key in launched.keys() & done.keys())


def _value(stat, stat_names: dict):
    """A trace statistic's value (a reference names another metadata entry)."""
    kind = stat.WhichOneof("value")
    return stat_names.get(stat.ref_value) if kind == "ref_value" else getattr(stat, kind)
