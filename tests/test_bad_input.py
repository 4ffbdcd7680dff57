"""Bad input stops before anything runs: one clear message, exit 2, no traceback, nothing
written (a grid file, the command line, the data)."""
import shutil
import subprocess

import pytest
from conftest import REPO, SLOW, XBENCH, write_grid, xbench

from xbench.common.machine import cpu_cores

BAD_GRIDS = {
    "unknown backend": ({"backends": ["pt-dpp"]},
                        "unknown backend 'pt-dpp' (did you mean 'pt-dp'?)"),
    "unknown model": ({"models": ["smal"]}, "unknown model 'smal' (did you mean 'small'?)"),
    "unknown key": ({"batch": [128]}, "unknown key 'batch' (did you mean 'batches'?)"),
    "zero batch": ({"batches": [0]}, "'batches' must be positive, got 0"),
    "negative devices": ({"devices": [-2]}, "'devices' must be positive, got -2"),
    "fractional batch": ({"batches": [12.5]}, "'batches' must be a whole number, got 12.5"),
    "text epochs": ({"epochs": "2"}, "'epochs' must be a whole number, got '2'"),
    "negative memory limit": ({"memory_limit_mb": -1}, "'memory_limit_mb' must be 0 or more"),
    "indivisible batch": ({"batches": [100], "devices": [3]}, "batch 100 on 3 devices does not"),
}


@pytest.mark.parametrize("settings, message", BAD_GRIDS.values(), ids=BAD_GRIDS.keys())
def test_a_bad_grid_file_is_one_clear_message(settings, message, mnist_dir, tmp_path):
    done = xbench("grid", write_grid(tmp_path, **settings), "--data-dir", mnist_dir,
                  "--results", tmp_path / "r.jsonl")
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


BAD_COMMANDS = {  # {tmp} is the test's folder, where `bad_files` put a few broken things
    "not TOML": (["{tmp}/not.toml"], "not.toml is not valid TOML"),
    "binary grid file": (["{tmp}/binary.toml"], "binary.toml is not valid TOML"),
    "unknown preset": (["--preset", "smoek"], "no preset 'smoek' (did you mean 'smoke'?)"),
    "batch not a number": (["--preset", "smoke", "--batch", "1.5"],
                           "'1.5' is not a comma-separated list of whole numbers"),
    "more CPU devices than the cores can carry": (
        ["--preset", "smoke", "--backend", "pt-ddp", "--devices", 4 * cpu_cores() + 1,
         "--batch-mode", "per_device"],
        f"--devices {4 * cpu_cores() + 1} is more than this machine can run on CPU"),
    "negative retries": (["--preset", "smoke", "--retries", "-1"],
                         "'retries' must be 0 or more, got -1"),
    "budget not a number": (["--preset", "smoke", "--until-conclusive", "--budget", "nan"],
                            "'nan' is not a number"),
    "results folder is a file": (["--preset", "smoke", "--results", "{tmp}/a-file/r.jsonl"],
                                 "a-file is a file, not a folder"),
    "results in a read-only place": (["--preset", "smoke", "--results", "/sys/r.jsonl"],
                                     "cannot write the results file /sys/r.jsonl"),
    "results folder cannot be made": (
        ["--preset", "smoke", "--results", "/proc/xbench/r.jsonl"],
        "cannot create the folder /proc/xbench for the results file"),
}


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "not.toml").write_text("backends = [pt-dp")
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00\x01")
    (tmp_path / "a-file").write_text("")
    return tmp_path


@pytest.mark.parametrize("arguments, message", BAD_COMMANDS.values(), ids=BAD_COMMANDS.keys())
def test_a_bad_command_is_one_clear_message(arguments, message, mnist_dir, bad_files):
    """Tests run as root, whom chmod does not stop: /sys and /proc stand in for read-only
    folders."""
    arguments = [str(a).format(tmp=bad_files) for a in arguments]
    if "--results" not in arguments:
        arguments += ["--results", str(bad_files / "r.jsonl")]
    done = subprocess.run([*XBENCH, "grid", *arguments, "--data-dir", str(mnist_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=SLOW)
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize("damage", [flip_a_byte, truncate])
def test_damaged_mnist_is_one_clear_message(damage, mnist_dir, tmp_path):
    folder = tmp_path / "mnist"
    shutil.copytree(mnist_dir, folder)
    damage(folder / "train-labels-idx1-ubyte.gz")
    done = subprocess.run([*XBENCH, "grid", "--preset", "smoke", "--data-dir", str(folder),
                           "--results", str(tmp_path / "r.jsonl")],
                          cwd=REPO, capture_output=True, text=True, timeout=SLOW)
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert "train-labels-idx1-ubyte.gz is corrupt" in done.stderr
    assert f"xbench data download --to {folder}" in done.stderr
    assert not (tmp_path / "r.jsonl").exists()  # nothing ran, nothing was written
