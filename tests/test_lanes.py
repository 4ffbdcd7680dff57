"""tests/lanes.py: the reading finds how a function starts a process, through the functions it
calls and what it imports, and nothing where it starts none; in the fast lane every way of
starting one is refused, and put back after. The samples are compiled from text, so that the
reading of this file's own tests (which lane they are in) does not see the processes the samples
would start: these tests start none."""
from pathlib import Path

import pytest

from tests.lanes import REFUSED, ProcessReading, ProcessRefused, refusing

SAMPLES = '''
import multiprocessing
import os
import pty
import subprocess
from subprocess import Popen as Started


def runs_git():
    return subprocess.run(["git", "status"])


def asks_a_helper():
    return [runs_git() for _ in range(1)]


def imports_when_called():
    from subprocess import check_output
    return check_output(["true"])


def starts_an_alias():
    return Started(["true"])


def forks_a_worker():
    multiprocessing.get_context("fork").Process(target=print).start()


def class_that_starts():
    return Launcher


class Launcher:
    def launch(self):
        return os.system("true")


def starts_none():
    return sorted(os.listdir(".")), subprocess.CompletedProcess


def forks_a_terminal():
    return pty.fork()
'''


def samples() -> dict:
    """The SAMPLES' functions, compiled as a file of tests/ (the code the reading follows)."""
    names: dict = {}
    exec(compile(SAMPLES, str(Path(__file__).with_name("samples_of_lanes.py")), "exec"), names)
    return names


@pytest.mark.parametrize("name, path", [
    ("runs_git", "runs_git -> subprocess.run"),
    ("asks_a_helper", "asks_a_helper -> <listcomp> -> runs_git -> subprocess.run"),
    ("imports_when_called", "imports_when_called -> subprocess.check_output"),
    ("starts_an_alias", "starts_an_alias -> subprocess.Popen"),
    ("forks_a_worker", "forks_a_worker -> multiprocessing.get_context"),
    ("class_that_starts", "class_that_starts -> Launcher.launch -> os.system"),
    ("starts_none", None),
])
def test_the_reading_follows_a_function_down_to_how_it_starts_a_process(name, path):
    assert ProcessReading().path_of(samples()[name]) == path


def test_every_way_of_starting_a_process_is_refused_while_held_and_put_back_after():
    before = [getattr(owner, name) for owner, name in REFUSED]
    refused = []

    def refuse(way, command):
        refused.append((way, command))
        raise ProcessRefused(way)
    started = samples()
    with refusing(refuse):
        for name in ("runs_git", "starts_an_alias", "forks_a_worker", "forks_a_terminal"):
            with pytest.raises(ProcessRefused):
                started[name]()
        with pytest.raises(ProcessRefused):
            started["Launcher"]().launch()
    assert refused == [("Popen._execute_child", ["git", "status"]),
                       ("Popen._execute_child", ["true"]), ("os.fork", ""),
                       ("os.forkpty", ""), ("os.system", "true")]
    assert [getattr(owner, name) for owner, name in REFUSED] == before
