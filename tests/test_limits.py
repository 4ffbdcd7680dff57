"""Against the limit: `xbench probe` measures matmul GFLOP/s and gloo all-reduce bandwidth for real,
the report turns them into MFU and achieved-vs-probe bandwidth, and the set-up and GPU check
choose and refuse correctly on this CPU machine."""
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers import REPO, xbench_here
from xbench.common.backends.collectives import Collectives
from xbench.common.machine import install_plan, wants_gpu
from xbench.common.measuring.peaks import (
    all_reduce_record,
    bus_bandwidth,
    flop_utilisation,
    last_launch_seconds,
    peak_flops,
    time_all_reduce,
)
from xbench.common.workload.models import MODELS
from xbench.reports.step_model.calibration import AFTER_BACKWARD_SHARE


def test_probe_measures_matmul_at_every_thread_count_and_gloo_at_both_gradient_sizes(probe):
    _, record, printed = probe
    cores = record["cores"]
    for framework in ("torch", "tensorflow", "jax"):
        rates = {(m["threads"], m["precision"]): m for m in record["matmul"]
                 if m["framework"] == framework}
        # float32 and the mixed precision bf16 (fp16's matmul on a CPU: GPUs only)
        assert set(rates) >= {(t, p) for t in (1, cores) for p in ("fp32", "bf16")}
        for m in rates.values():
            assert m["precision"] in ("fp32", "bf16") and m["device_type"] == "cpu"
            assert 0 < m["gflops_low"] <= m["gflops"] <= m["gflops_high"]
    gloo = {(a["world_size"], a["bytes"]): a for a in record["all_reduce"]}
    assert set(gloo) == {(n, MODELS[m].gradient_bytes()) for n in (2, 3) for m in MODELS}
    for (world, size), a in gloo.items():
        assert a["library"] == "gloo" and a["backend"] == "pt-ddp" and a["nodes"] == 1
        assert a["algbw"] == pytest.approx(size / a["seconds"])
        assert a["busbw"] == pytest.approx(a["algbw"] * 2 * (world - 1) / world)
        assert a["busbw_low"] <= a["busbw"] <= a["busbw_high"]
    assert "GFLOP/s" in printed and "busbw GB/s" in printed and "gloo" in printed
    assert not record["not_measured"]


def test_smoke_report_shows_mfu_per_cell_and_2_device_bandwidth_against_the_probe(probe, smoke,
                                                                             tmp_path):
    folder, record, _ = probe
    shutil.copy(smoke.results, folder / "smoke.jsonl")
    out = tmp_path / "report"
    run = xbench_here("report", folder / "smoke.jsonl", "--out", out, "--include-contended")
    assert run.returncode == 0, run.stderr
    cells = pd.read_csv(out / "cells.csv")
    rows = [r for r in smoke.all if r["status"] == "ok" and not r["threads_pinned"]]
    for row in rows:  # MFU recomputed here from the row and the probe, independently
        cell = cells[cells["cell_key"] == row["cell_key"]].iloc[0]
        threads = min(record["cores"], row["devices"] * row["threads_per_device"])
        gflops = next(m["gflops"] for m in record["matmul"] if m["framework"] == row["framework"]
                      and m["threads"] == threads)
        rate = row["epochs"][1]["rate"]
        assert cell["mfu"] == pytest.approx(MODELS["small"].training_flops_per_sample() * rate
                                            / (gflops * 1e9), rel=1e-6), row["cell_key"]
    ddp = next(r for r in rows if r["backend"] == "pt-ddp" and r["devices"] == 2)
    cell = cells[cells["cell_key"] == ddp["cell_key"]].iloc[0]
    counted = ddp["attribution"]["epochs"][-1]["ranks"][0]["collective"]["bytes_per_step"]
    assert counted == MODELS["small"].gradient_bytes()  # DDP's hook counted every bucket's bytes
    # the small model's last bucket, the one launched after backward, is too small for a rate,
    # and the moving time beside backward waits for cores: the bandwidth is of the step's
    # collectives replayed alone (common.measuring.alone; N = 2: busbw = algbw)
    after = ddp["attribution"]["epochs"][-1]["ranks"][0]["timeline"]["after_backward"]
    assert after["bytes"] < AFTER_BACKWARD_SHARE * counted
    alone = ddp["attribution"]["alone"]
    assert alone["source"] == "replayed" and alone["bytes"] == counted
    assert cell["achieved_busbw"] == pytest.approx(counted / alone["seconds"])
    assert cell["probe_busbw"] == pytest.approx(next(
        a["busbw"] for a in record["all_reduce"]
        if a["world_size"] == 2 and a["bytes"] == MODELS["small"].gradient_bytes()))
    summary = (out / "summary.md").read_text()
    assert "## Against the limit" in summary and "of the collectives alone" in summary


def test_report_without_a_probe_says_how_to_get_one(smoke, tmp_path):
    shutil.copy(smoke.results, tmp_path / "smoke.jsonl")
    run = xbench_here("report", tmp_path / "smoke.jsonl", "--out", tmp_path / "out", "--format",
                      "md")
    assert run.returncode == 0, run.stderr
    assert "no probe of this machine beside the results: run `xbench probe`" in (
        tmp_path / "out" / "summary.md").read_text().replace("\\", "")


def test_probe_refuses_bad_input_with_exit_2(tmp_path):
    for args, message in ((["--backend", "pt-dp"], "no probe for pt-dp"),
                          (["--devices", "0"], "'devices' must be positive"),
                          (["--nodes", "2"], "needs --launcher slurm")):
        run = xbench_here("probe", *args, "--results-dir", tmp_path)
        assert run.returncode == 2 and message in run.stderr, run.stderr
    assert not (tmp_path / "probe.jsonl").exists()


@pytest.mark.processes("the probe records the commit it ran (`git rev-parse`)")
def test_a_probe_that_measured_nothing_exits_non_zero_and_appends_nothing(tmp_path):
    done = xbench_here("probe", "--backend", "pt-single", "--device", "cuda", "--results-dir",
                       tmp_path)
    assert done.returncode == 3 and "measured nothing" in done.stderr, done.stderr
    assert not (tmp_path / "probe.jsonl").exists()


def test_the_formulas():
    record = all_reduce_record(4 * 2**20, 4, [0.010, 0.020, 0.040])
    assert record["seconds"] == 0.020 and record["algbw"] == pytest.approx(4 * 2**20 / 0.020)
    assert record["busbw"] == pytest.approx(record["algbw"] * 1.5)
    assert record["busbw_low"] == pytest.approx(bus_bandwidth(4 * 2**20 / 0.040, 4))
    assert flop_utilisation(3e6, 1000, 3e9) == pytest.approx(1.0)  # a step's FLOPs x rate / peak
    matmul = [{"framework": "torch", "device_type": "cpu", "precision": "fp32", "threads": t,
               "gflops": g} for t, g in ((1, 50.0), (2, 90.0))]
    # a CPU device is its share of the cores: 2 devices x 1 thread use the 2-thread rate
    assert peak_flops(matmul, "torch", "cpu", 1, 2, 1, 2)["flops"] == 90e9
    # oversubscribed (4 devices on 2 cores): still the 2 cores' rate, not 4 x one thread's
    assert peak_flops(matmul, "torch", "cpu", 1, 4, 1, 2)["flops"] == 90e9
    assert peak_flops(matmul, "torch", "cpu", 2, 1, 1, 2)["flops"] == 100e9  # 2 nodes
    assert peak_flops(matmul, "tensorflow", "cpu", 1, 1, 1, 2) is None
    gpu = [{"framework": "torch", "device_type": "cuda", "precision": "fp32", "threads": None,
            "gflops": 50000.0}]
    assert peak_flops(gpu, "torch", "cuda", 2, 4, 1, 16)["flops"] == 8 * 50e12


class LateRank(Collectives):
    """Rank 0 of two whose partner left each barrier 10 s earlier and waited there for it."""
    rank, world = 0, 2

    def barrier(self):
        pass

    def gather(self, value):
        return [value, [10.0 + seconds for seconds in value]]

    def sum(self, values):
        return values


def test_an_all_reduce_is_timed_from_the_last_rank_s_launch():
    """A row's collective time leaves out the wait for the slowest rank (in flight less
    waiting), so the probe's does too: a repeat's time is the rank's that launched last. Timed
    as the slowest rank's, a partner that left Horovod's barrier early (its ranks see it done by
    polling with 1 ms naps) lent its wait to the all-reduce, and hvd-torch's rows read a bus
    bandwidth above the probe's."""
    assert last_launch_seconds([[0.009, 0.030, 0.004], [0.002, 0.031, 0.005]]) == [
        0.002, 0.030, 0.004]
    (record,) = time_all_reduce(LateRank(), lambda size: [0.0] * (size // 4), lambda: None,
                                [4096], repeats=5)
    assert record["repeats"] == 5 and record["world_size"] == 2 and record["bytes"] == 4096
    assert record["seconds"] < 10.0  # this rank's own launch-to-completion, not its partner's


# --- set-up on a GPU machine ---------------------------------------------------------------------

def test_install_plan_chooses_cuda_builds_only_for_gpus():
    assert not wants_gpu("auto", []) and wants_gpu("auto", ["GPU 0: NVIDIA H100"])
    assert wants_gpu("1", []) and not wants_gpu("0", ["GPU 0: NVIDIA H100"])
    with pytest.raises(ValueError, match="GPU=1"):
        wants_gpu("yes", [])
    cpu = install_plan(False)
    assert cpu == {"TORCH_ARGS": "torch==2.13.0", "EXTRAS": "tf,jax,ray,dev", "EXPECT_GPU": "0"}
    gpu = install_plan(True, "https://download.pytorch.org/whl/cu128")
    assert gpu["TORCH_ARGS"].endswith("torch==2.13.0") and "cu128" in gpu["TORCH_ARGS"]
    assert "tf-gpu" in gpu["EXTRAS"] and "tf," not in gpu["EXTRAS"] and gpu["EXPECT_GPU"] == "1"


def test_setup_plan_follows_what_nvidia_smi_lists(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'\n"
                    "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)'\n")
    fake.chmod(0o755)
    for path, expected in ((f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
                            "tf-gpu,jax-gpu,gpu-watch,ray,dev"),
                           (os.environ["PATH"], "tf,jax,ray,dev")):
        plan = subprocess.run([sys.executable, "-m", "xbench.common.machine"], cwd=REPO, text=True,
                              capture_output=True, env={**os.environ, "PATH": path})
        assert plan.returncode == 0 and f"EXTRAS={expected}\n" in plan.stdout, plan.stderr
    assert "2 NVIDIA GPU(s)" in subprocess.run(
        [sys.executable, "-m", "xbench.common.machine"], cwd=REPO, text=True, capture_output=True,
        env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}).stderr


def test_gpu_check_refuses_cleanly_without_a_gpu():
    run = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", "/nonexistent/x"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "gpu-check: nothing run: torch" in run.stderr and "sees no CUDA device" in run.stderr


def test_cli_runs_uninstalled_from_a_checkout(tmp_path):
    """make gpu-check runs xbench with no install: the checkout's folders linked as the packages
    pyproject.toml maps them to, on PYTHONPATH; its version comes from pyproject.toml then."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from gpu_check import link_packages
    finally:
        sys.path.pop(0)
    packages = link_packages(tmp_path / "packages")
    code = ("import importlib.metadata as m, sys\n"
            "def missing(name): raise m.PackageNotFoundError(name)\n"
            "m.version = missing\n"
            "import xbench.common.grids.settings\n"
            "from xbench.cli.console import own_version\n"
            "print(own_version()); print(xbench.common.grids.settings.__file__)")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(packages)})
    assert run.returncode == 0, run.stderr
    version, where = run.stdout.splitlines()
    assert version == "0.1.0 (uninstalled)"
    assert where == str(packages / "xbench" / "common" / "grids" / "settings.py")
