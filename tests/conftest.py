"""Shared fixtures. Tests read real MNIST from ../shared/data/mnist (or $XBENCH_TEST_DATA); never download."""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parent.parent
MNIST_DIR = Path(os.environ.get("XBENCH_TEST_DATA", REPO.parent / "shared" / "data" / "mnist"))
XBENCH = [sys.executable, "-m", "common.cli"]


@pytest.fixture(scope="session")
def mnist_dir():
    if not (MNIST_DIR / "train-images-idx3-ubyte.gz").is_file():
        pytest.exit(f"real MNIST is needed at {MNIST_DIR} (or set XBENCH_TEST_DATA)", returncode=2)
    return MNIST_DIR


@pytest.fixture(scope="session")
def mnist(mnist_dir):
    from common.data import load_mnist
    return load_mnist(mnist_dir)


def xbench(*args, cwd=REPO, timeout=600):
    """Run the real `xbench` command line; returns the CompletedProcess (text)."""
    return subprocess.run([*XBENCH, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


SMOKE_SLICE = 2048


@pytest.fixture(scope="session")
def smoke(mnist_dir, tmp_path_factory):
    """The smoke preset, run once through the real command line on 2,048 real MNIST images: every
    backend on 1 and 2 devices. The tests of each backend read their rows from it."""
    from common.results import read_rows
    results = tmp_path_factory.mktemp("smoke") / "smoke.jsonl"
    run = xbench("grid", "--preset", "smoke", "--max-train-samples", SMOKE_SLICE,
                 "--data-dir", mnist_dir, "--results", results, timeout=1800)
    assert run.returncode == 0, run.stderr
    rows, problems = read_rows(results)
    return SimpleNamespace(run=run, results=results, problems=problems,
                           rows={(r["backend"], r["devices"]): r for r in rows})
