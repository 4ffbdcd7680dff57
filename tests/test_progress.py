"""While a grid runs and before: live progress on a terminal (a real pseudo-terminal), plain lines
when piped, and the --dry-run plan: done cells, unsupported cells with their reason, estimates."""
import json
import os
import re
import subprocess

from tests.helpers import REPO, SLOW, XBENCH, run_in_terminal, write_grid, xbench_here
from xbench.common.grids.cell import Cell
from xbench.common.results.schema import Measurement, make_row, now

# 512 images at batch 32, each step waiting 200 ms for its batch (an injected input delay): 16
# steps an epoch, 3 s or more whatever the machine's speed, so the progress file (written once a
# second) changes within an epoch, while the cell leaves the cores to whatever else runs. Tested
# on a tenth of the test set (1,000 images): the progress is the epochs'.
LONG_EPOCHS = {"backends": ["pt-single"], "max_train_samples": 512, "batches": [32],
               "max_test_samples": 1000, "inject": ["input-delay=200"]}
MID_EPOCH = re.compile(r"epoch (\d)/2, ([\d,]+)/512 samples, [\d,]+ samples/s, cell ETA")


def test_a_terminal_sees_progress_updates_during_an_epoch(mnist_dir, tmp_path):
    grid = write_grid(tmp_path, **LONG_EPOCHS)
    code, output = run_in_terminal([*XBENCH, "grid", str(grid), "--data-dir", str(mnist_dir),
                                    "--results", str(tmp_path / "r.jsonl")],
                                   env={**os.environ, "COLUMNS": "300"})
    assert code == 0, output
    updates = MID_EPOCH.findall(output)
    within_an_epoch = [done for epoch, done in updates if done not in ("0", "512")]
    assert len(set(within_an_epoch)) >= 2, output  # it moved while the epoch ran
    assert "\x1b[" in output  # a live display (cursor movements), not lines
    assert "grid ETA" in output


def test_piped_output_is_plain_lines(mnist_dir, tmp_path):
    grid = write_grid(tmp_path, **LONG_EPOCHS)
    done = subprocess.run([*XBENCH, "grid", str(grid), "--data-dir", str(mnist_dir), "--results",
                           str(tmp_path / "r.jsonl")], cwd=REPO, capture_output=True, text=True,
                          timeout=SLOW)
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout + done.stderr
    progress = [line for line in done.stdout.splitlines() if MID_EPOCH.search(line)]
    assert progress and all(line.startswith("[1/1] pt-single") for line in progress)
    quiet = subprocess.run([*XBENCH, "-q", "grid", str(grid), "--data-dir", str(mnist_dir),
                            "--results", str(tmp_path / "quiet.jsonl")], cwd=REPO,
                           capture_output=True, text=True, timeout=SLOW)
    assert quiet.returncode == 0 and not MID_EPOCH.search(quiet.stdout)
    assert "results:" in quiet.stdout and "cells ->" not in quiet.stdout


def earlier_ok_row(key_settings, seconds):
    """An ok row of this machine for the cell, as an earlier grid would have written it."""
    from xbench.common.running.env import capture
    cell = Cell(grid="plan", backend="pt-single", model="small", multiple=1, batch=128,
                devices=1, epochs=2, batch_mode="global", seed=0, max_train_samples=512,
                data="mnist", device="auto", timeout=SLOW, **key_settings)
    epochs = [{"epoch": e, "seconds": 0.5, "samples": 512, "rate": 1024.0, "loss": 1.0,
               "accuracy": 0.5, "seconds_per_rank": [0.5],
               "contention": {"contended": False, "other_cpu_share": 0.0, "steal_share": 0.0,
                              "load_1m": 0.1, "other_gpu_processes": None,
                              "cpu_per_wall_per_rank": [1.0]}, "untimed_seconds": 0.0}
              for e in (1, 2)]
    measurement = Measurement(
        framework_version="2.13.0", params=402_442, dataset_source="mnist", train_samples=512,
        device_type="cpu", device_name="cpu", epochs=epochs, startup_seconds=3.0,
        step_time_p50=0.1, step_time_p90=0.1, test_accuracy=0.7, peak_memory_per_device=[1],
        model_state_per_device=[1],
        hosts=["h"], threads={}, contended=False, evidence={}, backend_details={},
        attribution=None)
    row = make_row(cell, "earlier", now(), "ok", None, "torch", measurement, capture(), None,
                   seconds, 2)
    return row


def test_dry_run_says_what_is_done_what_cannot_run_and_how_long_the_rest_takes(tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(earlier_ok_row({}, 12.0)) + "\n")
    grid = write_grid(tmp_path, name="plan", backends=["pt-single", "pt-dp"], devices=[1, 2])
    done = xbench_here("grid", grid, "--results", results, "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "done: an ok row in r.jsonl" in next(line for line in lines if "pt-single" in line)
    pt_dp_two = next(line for line in lines if "pt-dp small x1 b128 d2" in line)
    assert "unsupported: pt-dp with 2 devices needs 2 CUDA GPUs" in pt_dp_two
    pt_dp_one = next(line for line in lines if "pt-dp small x1 b128 d1" in line)
    assert "about 12 s (1 earlier row(s) of the same model)" in pt_dp_one
    assert lines[-1].startswith("3 cells: 1 done already, 1 unsupported here, 1 to run: about 12 s")
