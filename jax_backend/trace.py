"""What JAX's profiler saw inside traced step calls: each XLA op that ran of the compiled step,
on each of this process's devices, labelled by the part of the step it belongs to, and the
collectives XLA inserted (the gradients' all-reduce), in the host clock of the loop's marks.

A compiled step is one call on the host: only a trace sees inside it. On a CPU, XLA's runtime
marks every op it runs (a thunk) with the HLO instruction's name, its module and its device; the
compiled program's text gives each instruction its opcode, its operands and shape, and the
metadata JAX wrote: the op's name under the transformations that made it. An op is labelled from
that name (`Program.part`): under `transpose(` is the backward pass (JAX's reverse mode is the
transpose of its forward derivative), under `jvp(` and not transposed the forward pass and loss,
under the optimizer's named scope its update, under the totals' the step's bookkeeping. A fusion
counts as the latest part of the instructions fused into it (forward, then backward, then
optimizer: it runs once its last input is ready). An op whose name says none (one XLA made, as
the reduce-window and iotas it expands max-pool's gradient into; or one JAX made outside those,
as --accumulate's split of the batch) belongs to the work it serves: its consumers' (`_label`).

A collective's flight in one process spans from when its last device reached it (XLA's
rendezvous: nothing moves before every device is there) to when its last device left it; its
bytes are its operands'. The rank is ready for its collectives when its backward's last op ends,
and each gradient when the op that produced it did (`Program.gradients`).

The call's time before the program's first op (XLA's runtime dispatching it: on a CPU several
milliseconds for the small model, before any op of it runs) and after its last (the result's
return) is host time, as the other frameworks' dispatch is.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

import jax

from xbench.common.measuring.attribution import Flight, Step
from xbench.common.measuring.tracing import STEP_EVENT, StepTracer, traced_step

TOTALS_SCOPE = "xbench_totals"  # the step's loss and right sums (jax.named_scope): bookkeeping
# --accumulate's sum of the micro-batches' gradients (jax.named_scope): the backward pass's, as
# PyTorch's backward adds each micro-batch's into .grad
ACCUMULATE_SCOPE = "xbench_accumulate"
OPTIMIZER_SCOPE = "xbench_optimizer"  # the optimizer's update (jax.named_scope)
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all",
               "collective-broadcast")
GPU_PLANE = "/device:GPU:"  # a GPU's plane in the trace, then its ordinal
ORDER = ("forward", "backward", "optimizer")  # the parts of a fusion, as the step runs them
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2, "s16": 2, "u16": 2, "f32": 4,
               "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%?(?P<name>[\w.\-]+) = (?P<shape>\([^=]*?\)|\S+) "
    r"(?P<opcode>[\w\-]+)\((?P<operands>[^)]*)\)(?P<attributes>.*)$")
COMPUTATION = re.compile(r"^(?:ENTRY )?%?(?P<name>[\w.\-]+) ")
INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")  # inside a long tuple's shape and operands
ARRAY = re.compile(r"(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")


def shape_bytes(shape: str) -> int:
    """The bytes of an HLO shape ('f32[3,3]{1,0}', or a tuple of them)."""
    total = 0
    for found in ARRAY.finditer(shape):
        count = 1
        for dim in filter(None, found["dims"].split(",")):
            count *= int(dim)
        total += count * DTYPE_BYTES.get(found["dtype"], 4)
    return total


@dataclass
class Instruction:
    """One HLO instruction, as much of it as the labelling needs."""
    opcode: str
    operands: list[str]
    bytes: int
    op_name: str
    calls: str | None  # the computation a fusion runs


class Program:
    """A compiled step's HLO text, read for what the trace's op names cannot say: each
    instruction's part of the step and the gradients its collectives carry."""

    def __init__(self, text: str):
        self.module = text.split(None, 2)[1].rstrip(",")
        self.instructions: dict[str, Instruction] = {}
        self.computations: dict[str, list[str]] = {}
        current = None
        for line in text.splitlines():
            line = INDEX_COMMENT.sub("", line)
            if (found := INSTRUCTION.match(line)) is not None:
                attributes = found["attributes"]
                name = re.search(r'op_name="([^"]*)"', attributes)
                calls = re.search(r"calls=%?([\w.\-]+)", attributes)
                self.instructions[found["name"]] = Instruction(
                    found["opcode"], re.findall(r"%([\w.\-]+)", found["operands"]),
                    shape_bytes(found["shape"]), name[1] if name else "",
                    calls[1] if calls else None)
                self.computations.setdefault(current, []).append(found["name"])
            elif (found := COMPUTATION.match(line)) is not None and line.rstrip().endswith("{"):
                current = found["name"]
        self.parts = self._label()

    def is_collective(self, name: str) -> bool:
        opcode = self.instructions[name].opcode
        return opcode.removesuffix("-start").removesuffix("-done") in COLLECTIVES

    def part(self, name: str) -> str | None:
        """The part of the step the instruction `name` belongs to ("collective" for one of
        XLA's collectives, "host" for the step's bookkeeping)."""
        return self.parts.get(name)

    def gradients(self, collective: str) -> list[tuple[str, int]]:
        """(the instruction that produced it, its bytes) of each operand of `collective`: the
        op whose end is the gradient's ready moment, through the operations that only rename
        (a bitcast, a tuple's element), which run no op of their own in the trace."""
        found = []
        for operand in self.instructions[collective].operands:
            producer = operand
            while (self.instructions[producer].opcode in ("bitcast", "get-tuple-element")
                   and self.instructions[producer].operands):
                producer = self.instructions[producer].operands[0]
            found.append((producer, self.instructions[operand].bytes))
        return found

    @staticmethod
    def _named_part(op_name: str) -> str | None:
        """The part an op's name says ('jit(step)/transpose(jvp())/dot_general': the scopes and
        transformations it was made under, then its primitive); None for a name that says
        none: one XLA gave an op of its own making ('broadcast.15'), or one JAX made outside
        the derivative, the update and the totals (--accumulate's split of the batch into
        micro-batches), whose part is the work it serves (`_label`)."""
        scopes = op_name.split("/")
        if len(scopes) < 2:
            return None
        if TOTALS_SCOPE in scopes:
            return "host"
        if OPTIMIZER_SCOPE in scopes:
            return "optimizer"
        if ACCUMULATE_SCOPE in scopes or any(scope.startswith("transpose(") for scope in scopes):
            return "backward"
        if any(scope.startswith("jvp(") for scope in scopes):
            return "forward"
        return None

    def _own_part(self, name: str) -> str | None:
        """The latest part its own name and the names of the instructions fused into it say
        (None where none says one)."""
        instruction = self.instructions[name]
        if self.is_collective(name):
            return "collective"
        parts = {self._named_part(instruction.op_name)}
        for inner in self.computations.get(instruction.calls, []):
            parts.add(self._named_part(self.instructions[inner].op_name))
        return "host" if "host" in parts else _latest(parts)

    def _label(self) -> dict[str, str]:
        """Every instruction's part. One whose name says none (a layout copy; the iotas and the
        reduce-window XLA's CPU compiler expands max-pool's select_and_scatter into, backward's
        work though they run before it) takes the part of the work it serves: the earliest of
        its consumers' parts (it must be done before the first of them; the text lists
        consumers after their operands), except that one the optimizer consumes and computed of
        the derivative's values is a gradient's last op (the kernel's gradient of a
        convolution XLA made): backward. Where no consumer has a part (its only consumer a
        collective, or none) it takes the latest of its operands' (it runs once they are)."""
        own = {name: self._own_part(name) for name in self.instructions}
        users: dict[str, list[str]] = {}
        after: dict[str, str | None] = {}  # the latest part of what it is computed of
        for name, instruction in self.instructions.items():
            for operand in instruction.operands:
                users.setdefault(operand, []).append(name)
            after[name] = own[name] or _latest(after.get(operand)
                                               for operand in instruction.operands)
        parts: dict[str, str] = {}
        for name in reversed(self.instructions):
            made = _latest(after.get(operand) for operand in self.instructions[name].operands)
            served = _earliest(parts.get(user) for user in users.get(name, []))
            if served == "optimizer" and made in ("forward", "backward"):
                served = "backward"
            parts[name] = own[name] or served or made or "forward"
        return parts


def _latest(parts) -> str | None:
    """The latest of `parts` in the order the step runs them (None where none is one)."""
    parts = set(parts)
    known = [part for part in ORDER if part in parts]
    return known[-1] if known else None


def _earliest(parts) -> str | None:
    """The earliest of `parts` in the order the step runs them, the step's bookkeeping after
    them (None where none is one: a collective serves no part of the step's compute)."""
    parts = set(parts)
    return next((part for part in (*ORDER, "host") if part in parts), None)


class JaxTracer(StepTracer):
    """JAX's profiler (common.measuring.tracing.StepTracer) around the compiled step `program`
    on this process's devices (`devices`: their ordinals in the trace). On a CPU, XLA's runtime
    marks each op on the host with its device; on GPUs the device's own plane holds its
    kernels, each marked with its instruction (not checked here: no GPU)."""

    def __init__(self, program: Program, devices: list[int], on_gpu: bool):
        super().__init__()
        self.program, self.devices, self.on_gpu = program, set(devices), on_gpu
        self.options = jax.profiler.ProfileOptions()
        self.options.python_tracer_level = 0  # the host's XLA events, not Python's calls
        self.options.host_tracer_level = 2

    def begin(self, folder):
        jax.profiler.start_trace(folder, profiler_options=self.options)

    def end(self):
        jax.profiler.stop_trace()

    def annotate(self, step):
        return jax.profiler.TraceAnnotation(STEP_EVENT)

    def read(self, folder: str, starts: list[float]) -> list[Step]:
        [path] = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        windows, ran = self._events(jax.profiler.ProfileData.from_file(path))
        program, steps = self.program, []
        for window, start in zip(sorted(windows), starts):
            inside = [(name, a, b) for name, a, b in ran if window[0] <= a < window[1]]
            ops = [(program.part(name), a, b) for name, a, b in inside
                   if not program.is_collective(name)]
            if inside:  # the runtime's dispatch of the program, and the return of its result
                ops += [("host", window[0], min(a for _, a, _ in inside)),
                        ("host", max(b for _, _, b in inside), window[1])]
            flights, gradients = self._collectives(inside)
            steps.append(traced_step(window, start, ops, flights, gradients))
        return steps

    def _events(self, profile) -> tuple[list, list]:
        """In the trace's clock (ns): the steps' windows, and (instruction, start, end) of each
        op of the step's program that ran on this process's devices."""
        windows, ran = [], []
        for plane in profile.planes:
            on_gpu = plane.name.startswith(GPU_PLANE)
            for line in plane.lines:
                for event in line.events:
                    if event.name == STEP_EVENT:
                        windows.append((event.start_ns, event.start_ns + event.duration_ns))
                        continue
                    stats = dict(event.stats)
                    device = (int(plane.name.removeprefix(GPU_PLANE)) if on_gpu
                              else stats.get("device_ordinal"))
                    if (stats.get("hlo_module") == self.program.module
                            and on_gpu == self.on_gpu and device in self.devices
                            and stats.get("hlo_op") in self.program.instructions):
                        ran.append((stats["hlo_op"], event.start_ns,
                                    event.start_ns + event.duration_ns))
        return windows, ran

    def _collectives(self, inside: list) -> tuple[list[Flight], list[tuple[float, int]]]:
        """Each collective's flight (from its last device's arrival to its last device's
        departure, its operands' bytes) and each gradient it carries (when the op producing it
        ended on the last device, its bytes)."""
        spans: dict[str, list[tuple[float, float]]] = {}
        for name, a, b in inside:
            spans.setdefault(name, []).append((a, b))
        flights, gradients = [], []
        for name, runs in spans.items():
            if not self.program.is_collective(name):
                continue
            carried = self.program.gradients(name)
            flights.append(Flight(max(a for a, _ in runs), max(b for _, b in runs),
                                  sum(size for _, size in carried)))
            gradients += [(max(b for _, b in spans[producer]), size)
                          for producer, size in carried if producer in spans]
        return flights, gradients
