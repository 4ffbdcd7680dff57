"""While a grid runs and before: live progress on a terminal (a real pseudo-terminal), plain lines
when piped, and the --dry-run plan: done cells, unsupported cells with their reason, estimates."""
import dataclasses
import json
import os
import re
import subprocess

import pytest

from tests.helpers import REPO, SLOW, XBENCH, run_in_terminal, write_grid, xbench_here
from xbench.common.grids.cell import Cell
from xbench.common.results.schema import Measurement, make_row, now
from xbench.common.running.progress import GridProgress
from xbench.common.running.timings import probe_key, reference_key
from xbench.common.workload.models import MODELS

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
    """Plain lines; the grid's ETA from the start is the forecast the dry run before it kept:
    its framework's reference, measured once."""
    grid = write_grid(tmp_path, **LONG_EPOCHS)
    cache = {**os.environ, "XBENCH_CACHE": str(tmp_path / "cache")}
    arguments = [*XBENCH, "grid", str(grid), "--data-dir", str(mnist_dir), "--results",
                 str(tmp_path / "r.jsonl")]
    plan = subprocess.run([*arguments, "--dry-run"], cwd=REPO, capture_output=True, text=True,
                          timeout=SLOW, env=cache)
    assert "(from PyTorch's reference here (pt-single, small, measured now)" in plan.stdout, \
        plan.stderr
    kept = next((tmp_path / "cache" / "timings").iterdir())
    assert list(json.loads(kept.read_text())) == [reference_key("torch", "auto")]  # one, kept
    done = subprocess.run(arguments, cwd=REPO, capture_output=True, text=True, timeout=SLOW,
                          env=cache)
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout + done.stderr
    progress = [line for line in done.stdout.splitlines() if MID_EPOCH.search(line)]
    assert progress and all(line.startswith("[1/1] pt-single") for line in progress)
    assert all(re.search(r"grid ETA ~\d+ s \(forecast\)$", line) for line in progress)
    quiet = subprocess.run([*XBENCH, "-q", "grid", str(grid), "--data-dir", str(mnist_dir),
                            "--results", str(tmp_path / "quiet.jsonl")], cwd=REPO,
                           capture_output=True, text=True, timeout=SLOW)
    assert quiet.returncode == 0 and not MID_EPOCH.search(quiet.stdout)
    assert "results:" in quiet.stdout and "cells ->" not in quiet.stdout


def earlier_ok_row(key_settings, seconds):
    """An ok row of this machine for the cell, as an earlier grid would have written it."""
    from xbench.common.running.env import capture
    cell = plan_cell(**key_settings)
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
                   seconds, 2, model=MODELS[cell.model])
    return row


def plan_cell(backend="pt-single", devices=1, **settings):
    return Cell(grid="plan", backend=backend, model="small", multiple=1, batch=128,
                devices=devices, epochs=2, batch_mode="global", seed=0, max_train_samples=512,
                data="mnist", device="auto", timeout=SLOW, **settings)


# What a framework's probe cell left, as kept: 1 s of start-up, 1 ms a sample, 0.5 s more in
# its first epoch, 2 s of finish.
COSTS = {"start": 1.0, "per_sample": 0.001, "first_epoch_extra": 0.5, "finish": 2.0}


def keep_timings(cache, frameworks, costs=None):
    """This machine's timings file in `cache` as an earlier dry run leaves it: the probe cells
    of `frameworks` ({backend of the framework: costs, or a damaged entry}) for plan_cell."""
    import socket
    folder = cache / "timings"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{socket.gethostname()}.json"
    path.write_text(json.dumps({probe_key(plan_cell(backend)): costs or COSTS
                                for backend in frameworks}))
    return path


def plan_line(lines, label):
    return next(line for line in lines if f"] {label} r0" in line)


def test_dry_run_says_what_is_done_what_cannot_run_and_how_long_the_rest_takes(tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(earlier_ok_row({}, 12.0)) + "\n")
    keep_timings(tmp_path / "cache", ["pt-single"])
    grid = write_grid(tmp_path, name="plan", backends=["pt-single", "pt-dp"], devices=[1, 2])
    done = xbench_here("grid", grid, "--results", results, "--dry-run",
                       env={"XBENCH_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "done: an ok row in r.jsonl" in plan_line(lines, "pt-single small x1 b128 d1")
    pt_dp_two = plan_line(lines, "pt-dp small x1 b128 d2")
    assert "unsupported: pt-dp with 2 devices needs 2 CUDA GPUs" in pt_dp_two
    # 1 s of start-up, 2 epochs of 512 samples at 1 ms and 0.5 s more, 2 s of finish
    assert ("about 5 s (as a 8-step pt-single cell kept ran: start-up 1 s (1 process(es)), "
            "training, finish 2 s)") in plan_line(lines, "pt-dp small x1 b128 d1")
    assert lines[-1].startswith("3 cells: 1 done already, 1 unsupported here, 1 to run: about 5 s")


def test_forecasts_differ_by_backend_from_kept_probes_and_a_damaged_one_is_probed_again(
        mnist_dir, tmp_path, monkeypatch):
    """Each backend's cell is forecast from its framework's probe cell: its processes (and
    launcher) each pay the start-up. The probe cells kept by a dry run with --probe are read,
    not run again (the grid run reads them too, and runs none); with --probe a damaged entry is
    run again (a real probe cell, seconds) and kept."""
    from xbench.common.running.estimate import forecasts
    from xbench.common.running.local import LocalLauncher
    cache = tmp_path / "cache"
    kept = keep_timings(cache, ["pt-single", "tf-single"])
    before = kept.read_text()
    grid = write_grid(tmp_path, name="plan", backends=["pt-single", "pt-ddp", "tf-single"],
                      devices=[1, 2])
    plan = xbench_here("grid", grid, "--results", tmp_path / "r.jsonl", "--data-dir", mnist_dir,
                       "--dry-run", env={"XBENCH_CACHE": str(cache)})
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert kept.read_text() == before  # nothing was run: every probe was kept
    seconds = {label: plan_line(lines, label).split("  about ")[1].split(" (")[0]
               for label in ("pt-single small x1 b128 d1", "pt-ddp small x1 b128 d2",
                             "tf-single small x1 b128 d1")}
    # pt-ddp: 2 processes on 2 cores and torchrun before them, 1 s each
    assert seconds == {"pt-single small x1 b128 d1": "5 s", "pt-ddp small x1 b128 d2": "6 s",
                       "tf-single small x1 b128 d1": "5 s"}
    assert "as a 8-step tf-single cell kept ran" in plan_line(lines, "tf-single small x1 b128 d1")
    monkeypatch.setenv("XBENCH_CACHE", str(cache))
    cells = [plan_cell("pt-single"), plan_cell("jax-single")]
    assert forecasts(cells, tmp_path / "r.jsonl", True, LocalLauncher()) == [
        pytest.approx(4.524), None]

    keep_timings(cache, ["pt-single"], costs={**COSTS, "per_sample": "fast"})
    again = xbench_here("grid", grid, "--results", tmp_path / "r.jsonl", "--data-dir", mnist_dir,
                        "--backend", "pt-single", "--devices", "1", "--dry-run", "--probe",
                        env={"XBENCH_CACHE": str(cache)})
    assert again.returncode == 0, again.stderr
    assert "as a 8-step pt-single cell now ran" in again.stdout
    costs = json.loads(kept.read_text())[probe_key(plan_cell("pt-single"))]
    assert all(costs[part] > 0 for part in COSTS)


def test_the_grid_eta_starts_from_the_forecasts_and_corrects_as_cells_finish():
    progress = GridProgress(3, print, live=False, quiet=True, forecasts=[10.0, 0.0, 20.0])
    progress.cell_started(1, "first")
    assert progress.grid_eta() == "grid ETA ~30 s (forecast)"
    assert progress.grid_eta(4.0) == "grid ETA ~24 s (forecast)"
    progress.cell_ended(20.0)  # twice its forecast: the rest are scaled by 2
    progress.cell_skipped(2)
    progress.cell_started(3, "third")
    assert progress.grid_eta() == "grid ETA ~40 s (forecast x2.00, from 1 cell(s) done)"


def test_an_eta_with_cells_left_unforecast_is_unknown_until_a_cell_ends():
    """A sum that leaves cells out is no ETA: unknown, and how many it lacks, until a cell ends
    ok; then the cells without a forecast count as the mean of those done."""
    partly = GridProgress(3, print, live=False, quiet=True, forecasts=[10.0, 20.0, None])
    partly.cell_started(1, "first")
    unknown = "grid ETA unknown until the first cell ends ok (1 of 3 cell(s) left have no forecast)"
    assert partly.grid_eta() == partly.grid_eta(4.0) == unknown
    partly.cell_ended(None)  # a cell that failed says nothing of the others
    partly.cell_started(2, "second")
    assert partly.grid_eta().startswith("grid ETA unknown until the first cell ends ok")
    partly.cell_ended(40.0)  # twice its forecast
    partly.cell_started(3, "third")  # without a forecast: the mean of those done, 40 s
    assert partly.grid_eta() == "grid ETA ~40 s (forecast x2.00, from 1 cell(s) done)"
    unforecast = GridProgress(2, print, live=False, quiet=True)
    unforecast.cell_started(1, "first")
    assert unforecast.grid_eta() == ("grid ETA unknown until the first cell ends ok (2 of 2 "
                                     "cell(s) left have no forecast)")
    unforecast.cell_ended(30.0)
    unforecast.cell_started(2, "second")
    assert unforecast.grid_eta() == "grid ETA ~30 s (the mean of 1 cell(s) done)"


def keep_reference(cache, framework, costs, compile="off"):
    """This machine's timings file in `cache` holding `framework`'s reference (compiled or not)
    beside what it kept already, as a dry run leaves it."""
    import socket
    path = cache / "timings" / f"{socket.gethostname()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**kept, reference_key(framework, "auto", compile): costs}))
    return path


def test_a_compiled_cell_scales_its_frameworks_compiled_reference(tmp_path, monkeypatch):
    """Compiling's cost is in a compiled reference's first epoch: a cell that compiles scales
    that one, kept apart from the eager one, and says so; without it, it has no forecast."""
    from xbench.common.running.estimate import estimate
    from xbench.common.running.local import LocalLauncher
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "cache"))
    keep_reference(tmp_path / "cache", "torch", {**COSTS, "per_test_sample": 0.002})
    eager, compiled = plan_cell(), dataclasses.replace(plan_cell(), compile="on")
    found = estimate([eager, compiled], tmp_path / "r.jsonl", True, LocalLauncher())
    assert found[0].seconds is not None and found[1].seconds is None
    assert found[1].source == ("no earlier rows, and PyTorch's compiled reference is not kept "
                               "here (`xbench grid --dry-run` measures it)")
    keep_reference(tmp_path / "cache", "torch",
                   {**COSTS, "per_test_sample": 0.002, "first_epoch_extra": 15.0}, "on")
    found = estimate([eager, compiled], tmp_path / "r.jsonl", True, LocalLauncher())
    assert found[1].seconds == pytest.approx(found[0].seconds - COSTS["first_epoch_extra"] + 15)
    assert found[1].source.startswith("from PyTorch's compiled reference here (pt-single, small, "
                                      "kept)")


def test_a_cell_without_rows_or_its_own_probe_is_its_frameworks_reference_scaled(
        tmp_path, monkeypatch):
    """Nothing of the cell kept: its framework's reference (the small CNN), a sample's seconds,
    trained or tested, scaled by the cell's FLOPs over the reference's (to FLOPS_EXPONENT), its
    test evaluation by the cell's test set; the line says so. Nothing is measured where the
    reference is kept."""
    from xbench.common.running.estimate import FLOPS_EXPONENT, REFERENCES, estimate
    from xbench.common.running.local import LocalLauncher
    from xbench.common.running.timings import REFERENCE_TEST_SAMPLES
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "cache"))
    costs = {**COSTS, "per_test_sample": 0.002}  # a test sample: 2 ms
    kept = keep_reference(tmp_path / "cache", "torch", costs)
    before = kept.read_text()
    small, large = plan_cell(), dataclasses.replace(plan_cell(), model="large")
    found = estimate([small, large], tmp_path / "r.jsonl", True, LocalLauncher(), REFERENCES)
    assert kept.read_text() == before
    work = (MODELS["large"].flops_per_sample() / MODELS["small"].flops_per_sample()
            ) ** FLOPS_EXPONENT
    for estimated, scale in zip(found, (1.0, work)):
        finish = (COSTS["finish"] - 0.002 * REFERENCE_TEST_SAMPLES  # without its own test set
                  + 0.002 * scale * 10_000)  # MNIST's
        assert estimated.seconds == pytest.approx(
            COSTS["start"] + 2 * 512 * COSTS["per_sample"] * scale
            + COSTS["first_epoch_extra"] + finish)
        assert estimated.source.startswith(
            f"from PyTorch's reference here (pt-single, small, kept) scaled to this cell's FLOPs "
            f"(x{scale:.3g}) and samples: start-up 1 s (1 process(es)), training, finish")
        assert not estimated.measured


def test_references_not_kept_are_measured_only_within_the_dry_runs_time(tmp_path, monkeypatch):
    """The dry run gives its references PROBES_SECONDS in all: past them nothing more is
    measured, and the cells left say why they have no forecast; the grid run measures none."""
    from xbench.common.running import estimate as estimates
    from xbench.common.running.local import LocalLauncher
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(estimates, "PROBES_SECONDS", 0)
    cells = [plan_cell("pt-single"), plan_cell("tf-single")]
    dry = estimates.estimate(cells, tmp_path / "r.jsonl", True, LocalLauncher(),
                             estimates.REFERENCES)
    assert [e.seconds for e in dry] == [None, None]
    assert dry[1].source == ("no earlier rows, and TensorFlow's reference was not measured: the "
                             "0 s the dry run gives its references went to the others (the "
                             "next dry run measures it)")
    run = estimates.estimate(cells, tmp_path / "r.jsonl", True, LocalLauncher())
    assert run[0].source == ("no earlier rows, and PyTorch's reference is not kept here "
                             "(`xbench grid --dry-run` measures it)")
    assert not (tmp_path / "cache" / "timings").exists()


def test_a_capped_link_adds_its_gradients_time_once_a_step_or_once_a_micro_batch():
    """Each step's gradients through the ring's passes at the link's rate: 2 passes of half the
    bytes each from each of 2 ranks, all through the one capped loopback, once a step, or K times
    with accumulate_sync each; nothing for a cell of one device."""
    from xbench.common.running.estimate import link_seconds
    capped = plan_cell("pt-ddp", devices=2, inject="link=400mbit", accumulate=4)
    steps = 2 * 512 // 128
    crossing = 2 * (2 * 0.5 * MODELS["small"].gradient_bytes()) / 50e6
    assert link_seconds(capped, MODELS["small"]) == pytest.approx(steps * crossing)
    each = dataclasses.replace(capped, accumulate_sync="each")
    assert link_seconds(each, MODELS["small"]) == pytest.approx(4 * steps * crossing)
    assert link_seconds(plan_cell("pt-ddp", devices=2), MODELS["small"]) == 0.0
