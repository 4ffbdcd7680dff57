"""The suite's two lanes. `make check` runs the fast one: every test that starts no process (the
command line in this process, recorded rows, constructed timelines, the schema, the layout
rules); `make test` runs every test. Which tests start processes is derived when the suite is
collected, never kept by hand: a test does when the code it reaches starts one. That code is the
test's body and its fixtures (its closure's, and those it asks for by name), read into every
function and class of the repository they name (the `xbench` helper, `run_in_terminal`, the
runner the shared grids call) down to the ways Python starts a process (STARTERS). Such a test is
marked `processes`, with the path that starts one.

A reading of names cannot see what runs through an object (a launcher passed as an argument) or
through the command line run in the test's own process (`xbench_here`: a dry run's probe cell, a
model file's describers): such a test says so itself, `@pytest.mark.processes("how")`. And in the
fast lane every way of starting a process refuses while a test runs, so that a test put there
wrongly fails naming itself, the command and its line, rather than slowing the lane in silence."""
from __future__ import annotations

import _posixsubprocess
import builtins
import contextlib
import dis
import inspect
import multiprocessing
import os
import pty
import subprocess
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import CodeType, FunctionType

import pytest

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
# What a test's code may name that starts a process: the standard library's ways, each one.
STARTERS = {
    "subprocess.Popen": subprocess.Popen, "subprocess.run": subprocess.run,
    "subprocess.call": subprocess.call, "subprocess.check_call": subprocess.check_call,
    "subprocess.check_output": subprocess.check_output,
    "subprocess.getoutput": subprocess.getoutput,
    "subprocess.getstatusoutput": subprocess.getstatusoutput,
    "os.fork": os.fork, "os.forkpty": os.forkpty, "os.system": os.system, "os.popen": os.popen,
    "os.posix_spawn": os.posix_spawn, "os.posix_spawnp": os.posix_spawnp,
    "os.spawnv": os.spawnv, "os.spawnve": os.spawnve, "os.spawnvp": os.spawnvp,
    "os.spawnl": os.spawnl, "os.spawnlp": os.spawnlp, "pty.fork": pty.fork,
    "pty.spawn": pty.spawn, "multiprocessing.Process": multiprocessing.Process,
    "multiprocessing.Pool": multiprocessing.Pool,
    "multiprocessing.get_context": multiprocessing.get_context,
    "ProcessPoolExecutor": ProcessPoolExecutor,
}
# Where every one of them ends, each refused in the fast lane: (owner, attribute). Popen's
# child covers subprocess and what is built on it (os.popen, asyncio's); os.fork the fork
# start method, os.spawn* and pty's fallback; _posixsubprocess multiprocessing's spawn and
# forkserver.
REFUSED = [(subprocess.Popen, "_execute_child"), (os, "fork"), (os, "forkpty"),
           (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system"),
           (_posixsubprocess, "fork_exec")]


class ProcessReading:
    """Which functions reach a starter, and how: each function read once."""

    def __init__(self) -> None:
        self.paths: dict[CodeType, str | None] = {}
        self.classes: dict[int, str | None] = {}

    def path_of(self, function) -> str | None:
        """'f -> g -> subprocess.run' where `function` reaches a starter; None where it does
        not (as far as names show)."""
        function = inspect.unwrap(function)
        code = getattr(function, "__code__", None)
        if code is None or not followed(code.co_filename):
            return None
        if code not in self.paths:
            self.paths[code] = None  # a recursion back here adds nothing
            self.paths[code] = self.code_path(code, function.__globals__)
        return self.paths[code]

    def code_path(self, code: CodeType, names: dict) -> str | None:
        found = next(filter(None, map(self.value_path, referenced(code, names))), None)
        for inner in code.co_consts:  # nested functions, lambdas, comprehensions
            if isinstance(inner, CodeType) and not found:
                found = self.code_path(inner, names)
        return f"{code.co_name} -> {found}" if found else None

    def value_path(self, value) -> str | None:
        """How an object the code names starts a process: it is a starter, or a function or a
        class of the repository's own code that reaches one."""
        value = unbound(value)
        if isinstance(value, FunctionType):  # a refusal (the fast lane's) reads as what it refuses
            value = inspect.unwrap(value)
        if id(value) in STARTER_NAMES:
            return STARTER_NAMES[id(value)]
        if isinstance(value, FunctionType):
            return self.path_of(value)
        if isinstance(value, type):
            return self.class_path(value)
        return None

    def class_path(self, kind: type) -> str | None:
        """How any method of `kind` starts a process (a class named may run all it has)."""
        if id(kind) not in self.classes:
            self.classes[id(kind)] = None
            self.classes[id(kind)] = next((f"{kind.__name__}.{found}" for member in
                                           vars(kind).values()
                                           if (found := self.value_path(member))), None)
        return self.classes[id(kind)]


def unbound(value):
    """The function behind a method, a static or a class method; else `value`."""
    return getattr(value, "__func__", value)


STARTER_NAMES = {id(unbound(starter)): name for name, starter in STARTERS.items()}


def followed(filename: str) -> bool:
    """Whether the reading follows code of this file: the repository's own (the tests', and
    xbench's through its editable install), never an installed package's."""
    path = Path(filename)
    return (path != HERE and path.is_relative_to(REPO)
            and not {".venv", "site-packages"} & set(path.relative_to(REPO).parts))


def referenced(code: CodeType, names: dict):
    """Every object `code` names: its globals and builtins, attributes read off them
    (`subprocess.run`, `runner.run_cell`) and what it imports, as far as the modules are already
    imported (reading never imports one)."""
    local: dict[str, object] = {}  # names bound by an import inside the code
    value = module = fromlist = previous = None
    for instruction in dis.get_instructions(code):
        operation, name = instruction.opname, instruction.argval
        if operation in ("LOAD_GLOBAL", "LOAD_NAME"):
            value = names.get(name, getattr(builtins, name, None))
        elif operation in ("LOAD_FAST", "LOAD_DEREF"):
            value = local.get(name)
        elif operation in ("LOAD_ATTR", "LOAD_METHOD"):
            value = getattr(value, name, None) if value is not None else None
        elif operation == "IMPORT_NAME":  # `import a.b` binds a, `from a.b import c` reads a.b
            module = sys.modules.get(name if fromlist else name.split(".")[0])
            value = module
        elif operation == "IMPORT_FROM":
            value = getattr(module, name, None) if module is not None else None
        elif operation.startswith("STORE_") and previous in ("IMPORT_NAME", "IMPORT_FROM"):
            local[name], value = value, None
        else:
            value = None
        fromlist = instruction.argval if operation == "LOAD_CONST" else None
        previous = operation
        if value is not None:
            yield value


def process_path(item: pytest.Item, reading: ProcessReading) -> str | None:
    """How a collected test starts a process ('fixture smoke: build -> xbench ->
    subprocess.run'), or None: as its own `processes` mark says, else as the reading finds in
    its body and its fixtures (those of its closure, and those it asks for by name)."""
    declared = item.get_closest_marker("processes")
    if declared:
        return declared.args[0] if declared.args else "marked"
    if not isinstance(item, pytest.Function):
        return None
    found = reading.path_of(item.obj)
    if found:
        return found
    manager = item.session._fixturemanager
    for name in [*item.fixturenames, *asked_by_name(item.obj.__code__)]:
        for fixture in manager.getfixturedefs(name, item) or ():
            found = reading.path_of(fixture.func)
            if found:
                return f"fixture {name}: {found}"
    return None


def asked_by_name(code: CodeType) -> list[str]:
    """The fixtures `code` asks for by name: `request.getfixturevalue("described_example")`."""
    asked, asking = [], False
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_CONST" and asking and isinstance(instruction.argval, str):
            asked.append(instruction.argval)
        asking = instruction.argval == "getfixturevalue"
    return asked + [name for inner in code.co_consts if isinstance(inner, CodeType)
                    for name in asked_by_name(inner)]


class ProcessRefused(RuntimeError):
    """A test of the fast lane started a process."""


class Lanes:
    """The pytest plugin: marks every test that starts processes (`processes`), and with
    `fast` keeps only the others and refuses every process they start."""

    def __init__(self, fast: bool) -> None:
        self.fast = fast
        self.counts = (0, 0)
        self.refused: list[str] = []  # since the last report: what a test tried to start
        self.running: pytest.Item | None = None

    @pytest.hookimpl(tryfirst=True)  # before -m reads the marks
    def pytest_collection_modifyitems(self, config, items) -> None:
        reading, slow = ProcessReading(), []
        for item in items:
            path = process_path(item, reading)
            if path:
                if not item.get_closest_marker("processes"):
                    item.add_marker(pytest.mark.processes(path))
                slow.append(item)
        self.counts = (len(items) - len(slow), len(slow))
        if self.fast and slow:
            config.hook.pytest_deselected(items=slow)
            starting = {id(item) for item in slow}
            items[:] = [item for item in items if id(item) not in starting]

    def pytest_report_collectionfinish(self, config) -> str:
        fast, slow = self.counts
        if self.fast:
            return (f"the fast lane: the {fast} tests that start no process ({slow} that do "
                    f"are left to `make test`)")
        return f"{fast} tests start no process, {slow} start processes"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if not self.fast:
            return (yield)
        self.running = item
        with refusing(self.refuse):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if self.refused and not (call.excinfo and call.excinfo.errisinstance(ProcessRefused)):
            report.outcome = "failed"  # the test caught the refusal, or failed of it otherwise
            report.longrepr = "\n".join(self.refused) + (f"\n\n{report.longrepr}"
                                                          if report.longrepr else "")
        self.refused = []
        return report

    def refuse(self, way: str, command) -> None:
        """Remember and refuse a process the running test starts, saying from which line of
        the test."""
        lines = [frame.lineno for frame in traceback.extract_stack()
                 if Path(frame.filename) == self.running.path]
        where = f", from line {lines[-1]}" if lines else ""
        message = (f"{self.running.nodeid} started a process in the fast lane ({way}: "
                   f"{str(command)[:300]}{where}). The reading of tests/lanes.py cannot see "
                   f"how; mark the test @pytest.mark.processes(\"how it starts one\") so that "
                   f"`make test` runs it and `make check` leaves it out.")
        self.refused.append(message)
        raise ProcessRefused(message)


@contextlib.contextmanager
def refusing(refuse: Callable[[str, object], None]):
    """While it is held, every way of starting a process (REFUSED) calls `refuse(way,
    command)` instead, which raises."""
    saved = [(owner, name, getattr(owner, name)) for owner, name in REFUSED]

    def refusal(way: str, original):
        def refused(*args, **_):  # the command: the first list or string given
            refuse(way, next((a for a in args if isinstance(a, (list, tuple, str, bytes))), ""))
        refused.__wrapped__ = original
        return refused
    for owner, name, original in saved:
        setattr(owner, name, refusal(f"{owner.__name__}.{name}", original))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
