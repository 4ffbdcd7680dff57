"""Shared fixtures. Tests read real MNIST from ../shared/data/mnist (or $XBENCH_TEST_DATA); never
download."""
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parent.parent
SLOW = 600  # generous limits: the machine is small and shared
MNIST_DIR = Path(os.environ.get("XBENCH_TEST_DATA", REPO.parent / "shared" / "data" / "mnist"))
XBENCH = [sys.executable, "-m", "xbench.cli.main"]

# A suite started in the background of a non-interactive shell (`make test &`, nohup) inherits
# SIGINT ignored, and so would every xbench it starts: the Ctrl-C tests would then see a grid that
# never hears its Ctrl-C. A caught SIGINT is reset to the default in each child started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def mnist_dir():
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.exit(f"real MNIST is needed at {MNIST_DIR} (or set XBENCH_TEST_DATA)", returncode=2)
    return MNIST_DIR


@pytest.fixture(scope="session")
def mnist(mnist_dir):
    from xbench.common.workload.data import load_mnist
    return load_mnist(mnist_dir)


def strict_json(text: str):
    """`text` read as JSON by a strict parser: Python writes NaN and Infinity, JSON has neither."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


def xbench(*args, cwd=REPO, timeout=600, env=None):
    """Run the real `xbench` command line; returns the CompletedProcess (text)."""
    return subprocess.run([*XBENCH, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


SMOKE_SLICE = 2048


@pytest.fixture(scope="session")
def smoke(mnist_dir, tmp_path_factory):
    """The smoke preset, run once through the real command line on 2,048 real MNIST images: every
    backend on 1 and (where it spans devices) 2 devices. The tests of each backend read their rows
    from it: `rows[(backend, devices)]`."""
    from xbench.common.results.store import read_rows
    results = tmp_path_factory.mktemp("smoke") / "smoke.jsonl"
    # a contention limit that marks nothing: what the tests of these rows check must not depend
    # on how busy the machine was (the mark itself is tested on cells of its own)
    run = xbench("grid", "--preset", "smoke", "--max-train-samples", SMOKE_SLICE,
                 "--data-dir", mnist_dir, "--results", results, "--contention-limit", "1",
                 timeout=1800)
    assert run.returncode == 0, run.stderr
    rows, problems = read_rows(results)
    return SimpleNamespace(
        run=run, results=results, problems=problems, all=rows,
        rows={(r["backend"], r["devices"]): r for r in rows})


@pytest.fixture(scope="session")
def probe(tmp_path_factory):
    """One real `xbench probe`: torch's, TensorFlow's and JAX's matmuls, gloo (pt-ddp) on 2 and 4
    processes: (its folder, its record, what it printed)."""
    from xbench.common.results.probes import read_probes
    folder = tmp_path_factory.mktemp("probe")
    run = xbench("probe", "--backend", "pt-single,tf-single,jax-single,pt-ddp", "--devices", "2,4",
                 "--results-dir", folder)
    assert run.returncode == 0, run.stderr
    records, problems = read_probes(folder / "probe.jsonl")
    assert len(records) == 1 and not problems
    return folder, records[0], run.stdout


def write_grid(folder, name="faults", **settings):
    """A small grid file: the small model on a slice of MNIST (JSON values are valid TOML)."""
    spec = {"name": name, "backends": ["pt-dp"], "models": ["small"], "multiples": [1],
            "batches": [128], "devices": [1], "epochs": 2, "max_train_samples": 512,
            "timeout": SLOW, **settings}
    path = Path(folder) / f"{name}-{uuid.uuid4().hex[:6]}.toml"
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in spec.items()))
    return path
