"""The processes xbench starts: each dies with the process that started it (`end_with`), and
Ctrl-C is held while they are ended (`signals_held`).

A child of xbench's own that runs a user's code (a model file's describer) is asked one question
(`ask`) and answers it on a channel of its own (`answer`): a file the parent names in its
environment, which the child writes once it has its
answer. What the user's
code prints (a `print` at import, an `atexit` hook) goes elsewhere and can never pass for the
answer; a child that exits without one is told apart from one that answered.

The child runs in a session (and process group) of its own, which is killed whole when the child
ends, runs out of time or the parent is interrupted; and while it runs, this process adopts what
the child leaves orphaned (Linux's child subreaper), so that a process the user's code started in
a session of its own, out of the group's reach, is found among this process's descendants and
killed too: nothing the user's code started is a leftover. The child also dies with the parent
(a SIGKILL of xbench included)."""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

ANSWER_ENV = "XBENCH_ANSWER"  # the file a child writes its answer to
POLL_SECONDS = 0.05
LAST_WORDS_CHARACTERS = 300
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37


def end_with(driver_pid: int, sig: int = signal.SIGTERM):
    """A preexec_fn: the started process gets `sig` when `driver_pid` dies, even by SIGKILL,
    so nothing runs on orphaned (a launcher such as torchrun ends its ranks on SIGTERM)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec():
        libc.prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != driver_pid:  # the driver died before prctl took effect
            os._exit(1)
    return preexec


@contextlib.contextmanager
def signals_held():
    """Hold Ctrl-C and SIGTERM until the block ends (then they act): a second, impatient Ctrl-C
    must not cut short the ending of a cell's processes."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass(frozen=True)
class Answered:
    """How the child ended: its answer (None where it gave none, or one that is no JSON), its
    exit code (negative: a signal; None: it ran out of time and was killed), and the last line
    it wrote to its standard error (what a child that gave no answer said last)."""
    answer: object
    returncode: int | None
    last_words: str


def ask(command: list[str], timeout: float) -> Answered:
    """Run `command` alone (its own process group, ended whole however it ends) and read its
    answer."""
    with tempfile.TemporaryDirectory(prefix="xbench-answer-") as folder, \
            tempfile.TemporaryFile() as said, adopting() as descendants:
        answer_path = Path(folder) / "answer.json"
        process = subprocess.Popen(
            command, env={**os.environ, ANSWER_ENV: str(answer_path)},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=said,
            start_new_session=True, preexec_fn=end_with(os.getpid(), signal.SIGKILL))
        try:
            ended = _ended_within(process.pid, timeout)
        finally:
            with signals_held():  # a second Ctrl-C cannot cut the ending short
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                end_adopted(descendants)
        said.seek(0)
        lines = said.read().decode(errors="replace").strip().splitlines() or [""]
        try:
            answer = json.loads(answer_path.read_text())
        except (OSError, ValueError):
            answer = None
    return Answered(answer, process.returncode if ended else None,
                    lines[-1].strip()[:LAST_WORDS_CHARACTERS])


@contextlib.contextmanager
def adopting() -> Iterator[dict]:
    """While the block runs, this process is a child subreaper: a process its children leave
    orphaned (a grandchild whose parent ended, one in a session of its own) becomes its child,
    not init's. Yields the descendants this process had before (pid: start time), which
    `end_adopted` leaves alone."""
    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was))
    before = {p.pid: _started(p) for p in psutil.Process().children(recursive=True)}
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield before
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, was.value)


def end_adopted(before: dict) -> None:
    """SIGKILL every descendant of this process that is not one of `before` (pid: start time),
    until none is left (one may start another meanwhile), and reap those that are its
    children."""
    me = psutil.Process()
    for _ in range(100):
        new = [p for p in me.children(recursive=True) if before.get(p.pid) != _started(p)]
        if not new:
            return
        for process in new:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs([p for p in new if _parent(p) == me.pid], timeout=5)


def _started(process: psutil.Process) -> float | None:
    with contextlib.suppress(psutil.Error):
        return process.create_time()
    return None


def _parent(process: psutil.Process) -> int | None:
    with contextlib.suppress(psutil.Error):
        return process.ppid()
    return None


def answer(value: object) -> None:
    """The child's side: `value` as its answer (JSON), where `ask` reads it; on standard output
    where no parent asked (the child run by hand)."""
    if ANSWER_ENV in os.environ:
        Path(os.environ[ANSWER_ENV]).write_text(json.dumps(value))
    else:
        print(json.dumps(value))


def _ended_within(pid: int, timeout: float) -> bool:
    """Whether the child ended within `timeout`, waited for without reaping it: while it is a
    zombie its process group's number cannot be taken by another, so killing the group then
    kills only what it started."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True
