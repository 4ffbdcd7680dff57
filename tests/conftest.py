"""Shared fixtures. Tests read real MNIST from ../shared/data/mnist (or $XBENCH_TEST_DATA); never
download. The session's real rows come from one shared grid (`smoke`, on SMOKE_SLICE), built
once however many pytest-xdist workers ask for it (`make test` runs two, a test file each at a
time); a test that needs the machine to itself is marked `alone` and runs while the other worker
waits (`alone("fixture")`: while that module fixture is built). Which tests start processes, and
the fast lane of those that start none (`make check`), is tests/lanes.py's; where the time goes,
tests/durations.py's."""
import contextlib
import fcntl
import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.durations import DURATIONS, FAST_LANE_DURATIONS, DurationRecorder
from tests.every_row import EveryRow
from tests.helpers import (
    KNOBS_SLICE,
    MNIST_DIR,
    SMOKE_COLUMNS,
    SMOKE_SLICE,
    SMOKE_TEST_SLICE,
    xbench,
)
from tests.lanes import Lanes

# OpenMP's threads spin while they wait for one another. With two cells at once (two xdist
# workers, or busy loops beside the suite) each spins on the cores the other needs: a pt-single
# cell took 77 s an epoch instead of 6.5 s beside `xbench profile` in one of two paired runs, and
# 6.5 s in both with a passive wait. What a test asserts is the same either way; its time is sane.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Where a grid (its dry run too) finds real MNIST, and Tiny Shakespeare beside it, when a test
# gives no --data-dir: the dry run checks the data as the run does.
os.environ.setdefault("XBENCH_DATA_DIR", str(MNIST_DIR))

# A suite started in the background of a non-interactive shell (`make test &`, nohup) inherits
# SIGINT ignored, and so would every xbench it starts: the Ctrl-C tests would then see a grid that
# never hears its Ctrl-C. A caught SIGINT is reset to the default in each child started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The test files whose real cells take minutes, the longest first (as measured in a `make test`:
# .test-durations/latest.json, "per_file"; a session fixture's time where it was first built).
# Collected first, so that xdist (told not to reorder them by their number of tests) hands them
# out first and no worker is left alone with one at the end; the other files follow in their
# usual order, and LAST after them: the phantoms, whose fixture holds the machine (`alone`) and
# waits for the other worker's test to end before it starts: at the end that one is short, where
# second in the order it was the other worker's first fixture (cifar's, 169 s, half the machine
# idle).
LONGEST_FIRST = ["test_attribution.py", "test_knobs.py", "test_your_model.py", "test_slurm.py",
                 "test_cifar.py", "test_ray.py", "test_precision.py", "test_faults.py",
                 "test_language_model.py", "test_overlap.py", "test_lab.py", "test_fsdp.py",
                 "test_time_to_accuracy.py", "test_report_until_conclusive.py",
                 "test_compression.py", "test_cli.py", "test_evidence.py", "test_smoke.py",
                 "test_training_settings.py", "test_limits.py"]
LAST = ["test_phantoms.py"]


def pytest_collection_modifyitems(items):
    place = {name: i for i, name in enumerate(LONGEST_FIRST)}
    place.update({name: len(place) + 1 + i for i, name in enumerate(LAST)})
    items.sort(key=lambda item: place.get(item.path.name, len(LONGEST_FIRST)))  # stable


def pytest_addoption(parser):
    parser.addoption("--fast-lane", action="store_true",
                     help="only the tests that start no process (`make check`), each refused "
                          "any process it starts (tests/lanes.py)")


def pytest_configure(config):
    config.addinivalue_line("markers", "alone(fixture): the test needs the machine to itself "
                                       "(it measures how busy the machine is, or times what a "
                                       "bound holds): under xdist the other worker waits while "
                                       "it runs, or, given a module fixture's name, while that "
                                       "fixture is built")
    config.addinivalue_line("markers", "processes(how): the test starts processes (derived by "
                                       "tests/lanes.py; by hand only where it cannot see how)")
    fast = config.getoption("--fast-lane")
    config.pluginmanager.register(Lanes(fast), "xbench-lanes")
    if not hasattr(config, "workerinput"):  # the controller, after every worker has written
        config.pluginmanager.register(EveryRow(config), "xbench-every-row")
    # every process times; the controller (or the one process without xdist) writes it down
    config.pluginmanager.register(
        DurationRecorder(writes=not hasattr(config, "workerinput"),
                         kept=FAST_LANE_DURATIONS if fast else DURATIONS), "xbench-durations")


# The `alone(fixture)` fixtures this worker has built: a later test reading them shares the machine.
BUILT_ALONE: set[tuple[str, str]] = set()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """An `alone` test holds the machine to itself; `alone("name")` only while its module's
    fixture `name` is built (its cells measure then; the tests reading its rows measure nothing),
    so that the other worker waits once for the fixture, not once for each of its readers."""
    marker = item.get_closest_marker("alone")
    measured = (item.module.__name__, marker.args[0]) if marker and marker.args else None
    exclusive = marker is not None and (measured is None or (
        measured[1] in item.fixturenames and measured not in BUILT_ALONE))
    with machine_share(exclusive=exclusive):
        outcome = yield
    if exclusive and measured is not None:
        BUILT_ALONE.add(measured)
    return outcome


@contextlib.contextmanager
def machine_share(exclusive: bool):
    """Under xdist, a share of the machine among the workers of this run: exclusive for an
    `alone` test, shared otherwise. An exclusive request first takes the gate, which every
    shared request passes through, so that the other worker's next test waits for it rather
    than starving it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    paths = [Path(f"/tmp/xbench-tests-{run}.{part}.lock") for part in ("gate", "machine")]
    gate, machine = (os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in paths)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(machine)
        os.close(gate)


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder every xdist worker of this run sees (the one basetemp without xdist)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    (root / name).mkdir(exist_ok=True)
    return root / name


@pytest.fixture(scope="session", autouse=True)
def kept_between_runs(tmp_path_factory):
    """What xbench keeps between runs (XBENCH_CACHE: model files' facts, the frameworks' counts,
    the dry run's timings) in one folder the run's workers share: never the user's ~/.cache, so
    that no test's outcome depends on what an earlier run kept there. A test may give its own."""
    os.environ["XBENCH_CACHE"] = str(shared_folder(tmp_path_factory, "cache"))


def built_once(tmp_path_factory, name: str, parts: dict) -> tuple[Path, dict]:
    """(folder, {part: record}): each `parts[part](folder)` run by one worker only, which
    returns a record (JSON) of what it did; the other workers read the same folder and record.
    A worker first builds the parts no other worker is building, then waits for the rest: two
    workers that need the same thing at once build half of it each."""
    folder = shared_folder(tmp_path_factory, name)
    records = {}
    for wait in (False, True):
        for part, build in parts.items():
            if part in records:
                continue
            with locked(folder / f"{part}.lock", wait) as held:
                if held:
                    record = folder / f"{part}.json"
                    if not record.exists():
                        record.write_text(json.dumps(build(folder)))
                    records[part] = json.loads(record.read_text())
    return folder, records


@contextlib.contextmanager
def locked(path: Path, wait: bool):
    """Whether this process holds `path`'s exclusive lock (waiting for it, or not)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)


@pytest.fixture(scope="session")
def mnist_dir():
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.exit(f"real MNIST is needed at {MNIST_DIR} (or set XBENCH_TEST_DATA)", returncode=2)
    return MNIST_DIR


@pytest.fixture(scope="session")
def mnist(mnist_dir):
    from xbench.common.workload.mnist import load_mnist
    return load_mnist(mnist_dir)


def smoke_parts() -> dict[str, list[str]]:
    """The smoke preset's backends in two parts of about equal time (each about 80 s here), one
    for each worker when both need the shared grid at once: TensorFlow's and those that need a
    compiled extension (Horovod's), and the rest. A backend added to the preset joins one."""
    from xbench.common.backends.traits import TRAITS
    from xbench.common.grids.grid import preset_path, read_grid_file

    def heavy(name):
        return TRAITS[name].framework.name == "tensorflow" or TRAITS[name].extension is not None
    backends = read_grid_file(preset_path("smoke"))["backends"]
    return {"torch-and-jax": [b for b in backends if not heavy(b)],
            "tensorflow-and-horovod": [b for b in backends if heavy(b)]}


@pytest.fixture(scope="session")
def smoke(mnist_dir, tmp_path_factory):
    """The session's shared grid: the smoke preset through the real command line on SMOKE_SLICE
    real MNIST images (tested on SMOKE_TEST_SLICE), every backend on 1 and (where it spans
    devices) 2 devices, in the smoke_parts (a grid each, into one results file). Every test
    that needs plain rows of the small model reads them here: `rows[(backend, devices)]`;
    `runs[part]` is what each part's grid printed."""
    from xbench.common.results.store import read_rows

    def part(backends):
        def build(folder):
            # a contention limit that marks nothing: what the tests of these rows check must
            # not depend on how busy the machine was (the mark is tested on cells of its own)
            run = xbench("grid", "--preset", "smoke", "--backend", ",".join(backends),
                         "--max-train-samples", SMOKE_SLICE,
                         "--max-test-samples", SMOKE_TEST_SLICE, "--data-dir", mnist_dir,
                         "--results", folder / "smoke.jsonl", "--contention-limit", "1",
                         timeout=1800, env={**os.environ, "COLUMNS": str(SMOKE_COLUMNS)})
            return {"backends": backends, "returncode": run.returncode, "stdout": run.stdout,
                    "stderr": run.stderr}
        return build

    folder, runs = built_once(tmp_path_factory, "smoke",
                              {name: part(backends) for name, backends in smoke_parts().items()})
    for run in runs.values():
        assert run["returncode"] == 0, run["stderr"]
    rows, problems = read_rows(folder / "smoke.jsonl")
    return SimpleNamespace(
        runs={name: SimpleNamespace(**run) for name, run in runs.items()},
        results=folder / "smoke.jsonl", problems=problems, all=rows,
        rows={(r["backend"], r["devices"]): r for r in rows})


@pytest.fixture(scope="session")
def knobs(mnist_dir, tmp_path_factory):
    """The knobs preset through the real command line on KNOBS_SLICE real MNIST images (and a
    1,000-image test set), with pt-fsdp beside its backends (FSDP2's accumulation is its own
    code), in two parts (PyTorch's backends; TensorFlow's and JAX's), one for each worker:
    accumulation on its capped link and compiled steps. Every test of accumulation or compiling
    reads these rows: `rows[(backend, accumulate, accumulate_sync, compile)]` (a cell of no
    accumulation is keyed with sync "last"), `unsupported` the same of the cells refused."""
    from xbench.common.backends.traits import TRAITS
    from xbench.common.grids.grid import preset_path, read_grid_file
    from xbench.common.results.store import read_rows

    backends = read_grid_file(preset_path("knobs"))["backends"]
    torch = [b for b in backends if TRAITS[b].framework.name == "torch"] + ["pt-fsdp"]
    parts = {"torch": torch, "tensorflow-and-jax": [b for b in backends if b not in torch]}

    def part(names):
        def build(folder):
            run = xbench("grid", "--preset", "knobs", "--backend", ",".join(names),
                         "--max-train-samples", KNOBS_SLICE, "--max-test-samples", "1000",
                         "--data-dir", mnist_dir, "--results", folder / "knobs.jsonl",
                         "--contention-limit", "1", timeout=1800)
            return {"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}
        return build

    folder, runs = built_once(tmp_path_factory, "knobs",
                              {name: part(names) for name, names in parts.items()})
    for run in runs.values():
        assert run["returncode"] == 0, run["stderr"]
    rows, problems = read_rows(folder / "knobs.jsonl")

    def key(row):
        return row["backend"], row["accumulate"], row["accumulate_sync"], row["compile"]
    return SimpleNamespace(
        results=folder / "knobs.jsonl", problems=problems, all=rows,
        rows={key(r): r for r in rows if r["status"] == "ok"},
        unsupported={key(r): r for r in rows if r["status"] == "unsupported"})


@pytest.fixture(scope="session")
def probe(tmp_path_factory):
    """One real `xbench probe`: torch's, TensorFlow's and JAX's matmuls, gloo (pt-ddp) on 2 and 3
    processes (a list of counts, one beyond 2, whose bus bandwidth is not the algorithm's: 3
    gloo processes on 2 cores took 22-25 s here where 4 took 31 s): (its folder, its record,
    what it printed)."""
    from xbench.common.results.probes import read_probes

    def build(folder):
        run = xbench("probe", "--backend", "pt-single,tf-single,jax-single,pt-ddp", "--devices",
                     "2,3", "--results-dir", folder)
        return {"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}

    folder, runs = built_once(tmp_path_factory, "probe", {"probe": build})
    run = runs["probe"]
    assert run["returncode"] == 0, run["stderr"]
    records, problems = read_probes(folder / "probe.jsonl")
    assert len(records) == 1 and not problems
    return folder, records[0], run["stdout"]
