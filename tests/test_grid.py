"""Grid files -> cells; bad grid files, bad command lines and values beyond what they can mean
stopped at the door with one clear message and exit 2 (the real command line's, run in this
process), nothing started; relative paths from any folder; one run per cell."""
import os
import re
from pathlib import Path

import pytest

from tests.helpers import refused, write_grid, xbench, xbench_here
from xbench.common.errors import UserError
from xbench.common.grids.grid import expand, preset_path, read_grid_file
from xbench.common.machine import cpu_cores
from xbench.common.results.store import read_rows

BASE = {"name": "t", "backends": ["pt-ddp"], "models": ["small"], "multiples": [1],
        "batches": [128], "devices": [1, 2]}


def test_seed_grid_is_the_blogs():
    cells = expand(read_grid_file(preset_path("seed")))
    # 6 data-parallel backends on 1, 2, 4 devices; the 2 single-device references on 1
    assert len(cells) == (6 * 3 + 2) * 2 * 3 * 3
    assert {c.multiple for c in cells} == {1, 4, 8} and {c.batch for c in cells} == {128, 256, 512}
    assert {c.devices for c in cells} == {1, 2, 4} and {c.epochs for c in cells} == {2}
    assert {c.backend for c in cells} == {"pt-single", "pt-dp", "pt-ddp", "tf-single",
                                          "tf-mirrored", "tf-multiworker", "hvd-torch", "hvd-tf"}
    assert {c.devices for c in cells if c.backend.endswith("-single")} == {1}


def test_overrides_narrow_the_axes_and_batch_modes():
    cells = expand(read_grid_file(preset_path("seed")),
                   {"backends": ["pt-ddp"], "models": ["small"], "multiples": [1], "batches": [128],
                    "devices": [1, 2], "repeats": 2, "batch_mode": "per_device"})
    # repeat by repeat: each configuration once, then each again
    assert [(c.devices, c.repeat) for c in cells] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert [(c.global_batch, c.per_device_batch) for c in cells[:2]] == [(128, 128), (256, 128)]
    strong = expand(BASE)
    assert [(c.global_batch, c.per_device_batch) for c in strong] == [(128, 128), (128, 64)]
    assert len({c.key for c in cells}) == 2  # repeats share the key


def test_a_single_device_reference_has_no_n_device_cell():
    single = expand({**BASE, "backends": ["tf-single"], "devices": [1, 2]})
    assert [(c.backend, c.devices) for c in single] == [("tf-single", 1)]


def test_a_removed_key_says_why(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('backends = ["pt-ddp"]\ncompute_references = true\n')
    with pytest.raises(UserError, match="'compute_references' is no longer a setting: compute "
                                        "and communication are now counted"):
        read_grid_file(path)


@pytest.mark.parametrize("change, message", [
    ({"backends": ["pt-dpp"]}, "unknown backend 'pt-dpp' (did you mean 'pt-dp'?)"),
    ({"models": ["medium"]}, "unknown model 'medium'"),
    ({"batches": [0]}, "'batches' must be positive"),
    ({"devices": [1.5]}, "'devices' must be a whole number"),
    ({"batches": [100], "devices": [3]}, "batch 100 on 3 devices"),
    ({"batch_mode": "local"}, "'batch_mode' must be one of global, per_device"),
    ({"epochs": -1}, "'epochs' must be positive"),
])
def test_bad_grids_name_the_field(change, message):
    with pytest.raises(UserError, match=re.escape(message)):
        expand({**BASE, **change})


def test_unknown_key_in_a_grid_file(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('backends = ["pt-ddp"]\nbatchs = [128]\n')
    with pytest.raises(UserError, match="unknown key 'batchs' \\(did you mean 'batches'\\?\\)"):
        read_grid_file(path)


def test_not_toml(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text("backends = [pt-ddp\n")
    with pytest.raises(UserError, match="is not valid TOML"):
        read_grid_file(path)


# --- the real command line, bad input: one clear message, exit 2, nothing written ---------------

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
    "unequal micro-batches": ({"devices": [2], "accumulate": [1, 3]},
                              "--accumulate 3 splits each device's 64 samples"),
    "unknown sync mode": ({"accumulate": [4], "accumulate_sync": ["every"]},
                          "'accumulate_sync' must be one of last, each, got 'every'"),
    "unknown compile": ({"compile": ["yes"]}, "'compile' must be one of off, on, got 'yes'"),
}


@pytest.mark.parametrize("settings, message", BAD_GRIDS.values(), ids=BAD_GRIDS.keys())
def test_a_bad_grid_file_is_one_clear_message(settings, message, mnist_dir, tmp_path):
    done = xbench_here("grid", write_grid(tmp_path, **settings), "--data-dir", mnist_dir,
                       "--results", tmp_path / "r.jsonl")
    refused(done, message)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


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
    # a list with an empty value is not the list typed (1,,4 once made 2 cells)
    "an empty value in a list": (["--preset", "smoke", "--accumulate", "1,,4"],
                                 "'1,,4' has an empty value; give values separated by single"),
    "a trailing comma": (["--preset", "smoke", "--accumulate-sync", "last,"],
                         "'last,' has an empty value"),
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
    done = xbench_here("grid", *arguments, "--data-dir", mnist_dir)
    refused(done, message)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("options, message", [
    (["--batch", "1000000000"], "is larger than the training set of 512 samples"),
    (["--repeat", "100000000", "--dry-run"], "'repeats' 100,000,000 is more than 1,000"),
    (["--batch", "4096", "--devices", "2", "--batch-mode", "per_device"],
     "a global batch of 8,192 (batch 4,096 on 2 devices, batch_mode per_device) is larger"),
    (["--multiple", "1000000"], "'multiples' 1,000,000 is more than 100"),
    (["--timeout", str(10 ** 400)], "'timeout' is a 401-digit number, more than 2,592,000"),
    (["--seed", str(2 ** 70)], "more than 4,294,967,295: seeds are 32-bit"),
    (["--memory-limit-mb", str(10 ** 15)], "that is this machine's memory"),
    (["--epochs", "100000"], "'epochs' 100,000 is more than 1,000"),
    (["--epochs", "1"], "'epochs' must be at least 2, got 1: epoch 1 warms up"),
])
def test_values_beyond_what_they_can_mean_are_refused_at_the_door(options, message, mnist_dir,
                                                                   tmp_path):
    done = xbench_here("grid", write_grid(tmp_path, max_train_samples=512), "--data-dir",
                       mnist_dir, "--results", tmp_path / "r.jsonl", *options)
    refused(done, message)
    assert not (tmp_path / "r.jsonl.logs").exists()  # nothing started


@pytest.mark.parametrize("name, message", [
    ("../outside", "grid name '../outside' must be letters"),
    ("a/b", "grid name 'a/b' must be letters"),
    ("a\\u0000b", "'name' must not contain a NUL character"),
])
def test_a_grid_name_cannot_leave_the_results_folder(name, message, tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(f'name = "{name}"\nbackends = ["pt-single"]\nmodels = ["small"]\n'
                    f'multiples = [1]\nbatches = [128]\ndevices = [1]\n')
    refused(xbench_here("grid", path, "--dry-run"), message)


# --- paths are resolved once, at the edge; one run per cell -------------------------------------

def test_a_grid_runs_from_any_folder_with_relative_paths(mnist_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = os.path.relpath(mnist_dir, elsewhere)
    grid = write_grid(tmp_path, backends=["pt-single"], max_train_samples=512,
                      max_test_samples=1000)  # the paths are the test, not the test accuracy
    done = xbench("grid", grid, "--data-dir", data, "--results", "out/r.jsonl", cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = read_rows(elsewhere / "out" / "r.jsonl")[0]
    assert row["status"] == "ok", row["error"]
    assert row["dataset_source"] == str(Path(mnist_dir).resolve())
    assert Path(row["log"]).is_absolute() and Path(row["log"]).is_file()


@pytest.mark.processes(
    "the dry run measures pt-single's costs in a real cell (common/running/timings.py)")
def test_duplicated_axis_values_are_one_cell():
    done = xbench_here("grid", "--preset", "smoke", "--backend", "pt-single,pt-single", "--batch",
                       "128,128", "--devices", "1", "--dry-run")
    assert done.returncode == 0 and "1 cells" in done.stdout, done.stdout


def test_a_grid_of_parts_is_every_parts_cells_once(tmp_path):
    """[[parts]] replace the file's axes for their cells (the knobs preset's two halves); a
    configuration two parts share runs once, and the command line's axes narrow every part."""
    path = tmp_path / "parts.toml"
    path.write_text('''name = "parts"
backends = ["pt-ddp", "tf-multiworker"]
models = ["small"]
multiples = [1]
batches = [128]
devices = [2]

[[parts]]
accumulate = [1, 4]
accumulate_sync = ["last", "each"]

[[parts]]
compile = ["off", "on"]
''')
    cells = expand(read_grid_file(path))
    per_backend = {(c.accumulate, c.accumulate_sync, c.compile) for c in cells
                   if c.backend == "pt-ddp"}
    # accumulate 1 syncs once whatever the mode: one cell, shared with the second part's "off"
    assert per_backend == {(1, "last", "off"), (4, "last", "off"), (4, "each", "off"),
                           (1, "last", "on")}
    assert len(cells) == 2 * len(per_backend) == len({c.key for c in cells})
    assert {c.backend for c in expand(read_grid_file(path), {"backends": ["pt-ddp"]})} == {"pt-ddp"}
    assert {c.key for c in expand(read_grid_file(preset_path("knobs")))} >= {
        "pt-ddp|small|x1|global-b128|d2|e2|seed0|mnist|cap4096|auto|acc4-each"
        "|inject-link=400mbit", "pt-ddp|small|x1|global-b128|d2|e2|seed0|mnist|cap4096|auto"
        "|compiled"}


PARTS_GRID = """name = "p"
backends = ["pt-single"]
models = ["small"]
multiples = [1]
batches = [128]
devices = [1]
epochs = 2
"""


def test_the_cell_limit_is_the_whole_grids_every_part_together(tmp_path):
    """Two parts of 60,000 cells each are 120,000, refused at once, before any cell is made
    (it once took each part alone to its limit, and the dry run made all 120,000)."""
    batches = ",".join(str(8 * i) for i in range(1, 61))
    buckets = lambda offset: ",".join(f"{i + offset}" for i in range(1, 1001))  # noqa: E731
    path = tmp_path / "big.toml"
    path.write_text(PARTS_GRID.replace("epochs", "max_train_samples = 60000\nepochs")
                    + "".join(f"[[parts]]\nbatches = [{batches}]\nbucket_mb = [{buckets(o)}]\n"
                              for o in (0, 0.5)))
    done = xbench_here("grid", path, "--data", "synthetic", "--dry-run")
    refused(done, "the grid has 120,000 cells (axes x seeds x repeats, its 2 parts together); "
                  "at most 100,000")


@pytest.mark.parametrize("parts, message", [
    ("[[parts]]\ndevices = [2]\n", "pt-single run on one device only, and --devices 2 has no 1"),
    ("[[parts]]\ndevices = [2]\n[[parts]]\ndevices = [2, 4]\n",
     "pt-single run on one device only, and no part's devices (2; 2,4) has 1")])
def test_a_grid_of_no_cells_names_its_parts_devices(parts, message, tmp_path):
    """The devices that leave no cell are the parts', not the file's (1 here)."""
    path = tmp_path / "p.toml"
    path.write_text(PARTS_GRID + parts)
    refused(xbench_here("grid", path, "--data", "synthetic", "--dry-run"), message)


def test_a_part_sets_axes_only(tmp_path):
    path = tmp_path / "parts.toml"
    path.write_text('name = "p"\n[[parts]]\nepochs = 3\n')
    with pytest.raises(UserError, match="a part may set axes only .*'epochs' is not one"):
        read_grid_file(path)


def bad_text(folder: Path, case: str) -> Path:
    """A --data-dir whose Tiny Shakespeare is `case`."""
    text = folder / "input.txt"
    if case == "a directory":
        text.mkdir()
    elif case == "a fifo":
        os.mkfifo(text)
    elif case != "missing":
        text.write_bytes({"empty": b"", "not UTF-8": b"\xff\xfe First Citizen",
                          "shorter than a window": b"First Citizen:\n"}[case])
    return folder


DRY_RUN_REFUSALS = {
    **{f"Tiny Shakespeare {case}": (["--preset", "gpt-smoke"], case, "Tiny Shakespeare's input.txt")
       for case in ("missing", "empty", "not UTF-8", "shorter than a window", "a directory",
                    "a fifo")},
    "MNIST missing": (["--preset", "smoke"], "missing", "xbench data download"),
    "9 devices": (["--preset", "smoke", "--backend", "jax-dp,pt-ddp", "--devices", "9",
                   "--batch", "144"], None, "beyond 8 (4 per core)"),
}


@pytest.mark.parametrize("arguments, data, message", DRY_RUN_REFUSALS.values(),
                         ids=DRY_RUN_REFUSALS.keys())
def test_the_dry_run_refuses_what_the_run_refuses(arguments, data, message, tmp_path):
    """The dry run checks the data and the device counts as the run does: the same one line and
    exit 2 from both, before anything runs (the test's MNIST and text are out of sight)."""
    where = ["--data-dir", bad_text(tmp_path, data)] if data else []
    said = []
    for dry in (["--dry-run"], []):
        run = xbench_here("grid", *arguments, *where, "--results", tmp_path / "r.jsonl", *dry,
                          env={"XBENCH_DATA_DIR": None})
        assert run.returncode == 2 and message in run.stderr, run.stdout + run.stderr
        said.append(run.stderr)
    assert said[0] == said[1] and not (tmp_path / "r.jsonl").exists()
