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

A step compiled with jit_compile=True runs as one op in the trace, XLA's cluster of the whole
function (`__inference_train_step_...`): the trace sees no op inside it, so its forward, backward
and optimizer cannot be told apart, and its time is untraced, not given to any of them.
"""
import glob
import os
import re

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from xbench.common.measuring.attribution import Flight
from xbench.common.measuring.tracing import STEP_EVENT, StepTracer, traced_step

COLLECTIVE_OPS = ("CollectiveReduceV2", "CollectiveReduce", "NcclAllReduce", "HorovodAllreduce",
                  "HorovodGroupedAllreduce")
COPY_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")  # between a process's devices
# An op's event is named 'scope/.../name:Type'; the profiler's own events ('ExecutorState::Process',
# 'EagerLocalExecute: Pack', tf.data's 'Iterator::...') are not ops.
OP_EVENT = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")
# An asynchronous op (a collective) is seen launched and done, with its name and type as stats.
# They give its name, type and step, not its bytes: those are its input's in the step's graph
# (`collective_sizes`), found by the op's name.
ASYNC_EVENTS = ("ExecutorState::ProcessAsync::Start", "ExecutorState::ProcessAsync::Done")
INPUT_THREADS = "tf_data"  # tf.data's threads: the input pipeline, running beside the step
INJECTED_SCOPE = "xbench_slow_rank"  # common's slow-rank fault: this rank's compute, made longer
BOOKKEEPING_SCOPE = "xbench_totals"  # the epoch's loss and correct count
# The optimizer's update, whatever the optimizer: under fp16 a LossScaleOptimizer runs the inner
# one's update inside a cond, whose ops take the cond's name, not the optimizer's.
OPTIMIZER_SCOPE = "xbench_optimizer"
# A function run as one op (its type the function's name): under jit_compile, XLA's compiled
# cluster of the step, inside which the trace sees nothing.
FUNCTION_PREFIX = "__inference_"


def label(op: str) -> str:
    """The part an op of the trace belongs to ('collective' for the step's reduction; untraced
    for a compiled function, whose parts the trace cannot split), from its event name
    'scope/.../name:Type'."""
    name, _, op_type = op.rpartition(":")
    if op_type.startswith(FUNCTION_PREFIX):
        return "untraced"
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


class TensorFlowTracer(StepTracer):
    """TensorFlow's profiler (common.measuring.tracing.StepTracer)."""

    def __init__(self):
        super().__init__()
        self.sizes: dict[str, int | None] = {}  # each collective op's bytes (collective_sizes)
        self.options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)

    def begin(self, folder):
        tf.profiler.experimental.start(folder, options=self.options)

    def end(self):
        tf.profiler.experimental.stop()

    def annotate(self, step):
        return tf.profiler.experimental.Trace(STEP_EVENT, step_num=step, _r=1)

    def read(self, folder, starts):
        [path] = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(path, "rb") as file:
            space.ParseFromString(file.read())
        windows, ops, collectives = _events(space)
        labelled = [("communication" if part == "collective" else part, start, end)
                    for name, start, end in ops
                    if name.rpartition(":")[2] not in COLLECTIVE_OPS
                    for part in [label(name)]]
        flights = [Flight(launch, done, self.sizes.get(name)) for launch, done, name in collectives]
        return [traced_step(window, start, labelled, flights,
                            complete=self.saw_every_collective(window, collectives))
                for window, start in zip(sorted(windows), starts)]

    def saw_every_collective(self, window, collectives) -> bool:
        """Whether the trace saw, launched in `window`, every collective op of the step's graph
        (TensorFlow's profiler loses an event at times: a step of hvd-tf's 6 all-reduces traced
        with 5 on one rank; tf-multiworker's gradients' all-reduce missing on one rank)."""
        low, high = window
        seen = {name for launch, _, name in collectives if low <= launch < high}
        return set(self.sizes) <= seen


def _events(space) -> tuple[list, list, list]:
    """In the trace's clock (ns): the steps' windows, the ops (name, start, end) and each
    asynchronous collective's (launch, done, op name), in the order they were launched."""
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
    return windows, ops, sorted((launched[key], done[key], key[0])
                                for key in launched.keys() & done.keys())


def collective_sizes(graph: tf.Graph) -> dict[str, int | None]:
    """The bytes each collective op of a step's graph reduces, by op name: its tensor's (a
    grouped all-reduce's: all of them), None where their shapes are not static (every op is
    named: a step's trace is checked against them all, TensorFlowTracer.saw_every_collective)."""
    sizes = {}
    for op in graph.get_operations():
        if op.type in COLLECTIVE_OPS:
            tensors = op.inputs if op.type == "HorovodGroupedAllreduce" else op.inputs[:1]
            sizes[op.name] = (sum(t.shape.num_elements() * t.dtype.size for t in tensors)
                              if all(t.shape.is_fully_defined() for t in tensors) else None)
    return sizes


def _value(stat, stat_names: dict):
    """A trace statistic's value (a reference names another metadata entry)."""
    kind = stat.WhichOneof("value")
    return stat_names.get(stat.ref_value) if kind == "ref_value" else getattr(stat, kind)
