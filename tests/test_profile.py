"""`xbench profile`: ResNet-18's units timed forward and backward in both frameworks on the CPU,
through the real command line; what the record holds and how its numbers fit together; bad
input exits 2 with one line, before it measures; SIGTERM stops it (and `xbench probe`, its
sibling measurer) cleanly, leaving nothing behind."""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.helpers import REPO, XBENCH, refused, strict_json, xbench, xbench_here
from xbench.common.running.profile import MIN_STEPS, STEP_PASSES
from xbench.common.workload.models import MODELS
from xbench.reports.rendering.profile import ms, table_text

BATCH = 8
NARROW = 80  # the terminal's width the profile prints at (its table had 181-character lines)


@pytest.fixture(scope="module")
def resnet_profile(tmp_path_factory):
    """One profile of every unit of resnet18 with pt-single and tf-single, printed on a terminal
    of NARROW columns: (record, stdout, out)."""
    out = tmp_path_factory.mktemp("profile")
    run = xbench("profile", "--model", "resnet18", "--batch", BATCH, "--steps", MIN_STEPS,
                 "--warmup", 1, "--device", "cpu", "--out", out, timeout=900,
                 env={**os.environ, "COLUMNS": str(NARROW)})
    assert run.returncode == 0, run.stderr
    return json.loads((out / "profile.json").read_text()), run.stdout, out


def test_every_unit_in_both_frameworks(resnet_profile):
    record, printed, out = resnet_profile
    assert record["model"] == "resnet18" and record["batch"] == BATCH
    assert record["data"] == "synthetic" and not record["not_measured"]
    assert [f["backend"] for f in record["frameworks"]] == ["pt-single", "tf-single"]
    units = [unit for unit, _, _ in MODELS["resnet18"].named_layers()]
    assert units[:3] == ["conv1", "bn1", "block1"] and units[-1] == "fc1"
    for framework in record["frameworks"]:
        assert framework["device_type"] == "cpu" and framework["all_units"]
        assert [u["unit"] for u in framework["units"]] == units
        # the raw seconds of every kept round are in the file, every pass once per round
        for name, seconds in framework["seconds"].items():
            assert len(seconds) == MIN_STEPS and all(s > 0 for s in seconds), name
        assert {f"step.{p}" for p in STEP_PASSES} <= set(framework["seconds"])
        assert "contended" in framework["contention"]
        printed_table = printed.split(f"{framework['backend']}: {framework['framework']} ")[1]
        for unit in units:
            assert f"\n{unit} " in printed_table
    assert (out / "profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "resnet18, batch 8" in (out / "profile.txt").read_text()


def test_the_printed_profile_keeps_to_the_terminals_width(resnet_profile):
    """At 80 columns the table leaves out what does not fit on a line a unit, and says so; the
    same record at 200 columns shows more; every line within its width, no number cut."""
    record, printed, out = resnet_profile
    assert max(len(line) for line in printed.splitlines()) <= NARROW
    assert f"(left out to fit {NARROW} columns: layer" in printed
    wide = table_text(record, 200)
    assert max(len(line) for line in wide.splitlines()) <= 200
    assert "fwd GFLOP/s [95% CI]" in wide and "residual 64->64/1: 2 convs" in wide
    for framework in record["frameworks"]:
        for unit in framework["units"]:  # each median and its interval whole on its line
            assert f"\n{unit['unit']} " in printed and ms(unit["forward"]) in printed
            assert ms(unit["backward"]) in printed
    assert max(len(line) for line in (out / "profile.txt").read_text().splitlines()) <= 200


def test_the_numbers_fit_together(resnet_profile):
    record = resnet_profile[0]
    for framework in record["frameworks"]:
        units, step = framework["units"], framework["step"]
        # the spec's counts: every parameter and FLOP of the model is in one unit
        assert sum(u["params"] for u in units) == MODELS["resnet18"].parameters()
        forward = MODELS["resnet18"].flops_per_sample()
        assert sum(u["forward_flops"] for u in units) == forward * BATCH
        conv1, block1, pool = units[0], units[2], units[-2]
        assert conv1["backward_flops"] == conv1["forward_flops"]  # no input gradient
        assert block1["backward_flops"] == 2 * block1["forward_flops"]
        assert pool["forward_gflops"] is None and pool["params"] == 0
        # every derived number is the median of its per-round values, inside its interval
        seconds = {name: np.asarray(values) for name, values in framework["seconds"].items()}
        total = sum(seconds[f"step.{name}"] for name in STEP_PASSES)
        assert block1["forward_gflops"]["median"] == pytest.approx(
            np.median(block1["forward_flops"] / seconds["block1.forward"] / 1e9))
        for unit in units:
            both = seconds[f"{unit['unit']}.forward"] + seconds[f"{unit['unit']}.backward"]
            assert unit["share_of_step"]["median"] == pytest.approx(np.median(both / total))
            for summary in (unit["forward"], unit["backward"], unit["share_of_step"],
                            unit["forward_gflops"] or unit["forward"]):
                assert summary["low"] <= summary["median"] <= summary["high"]
        units_total = sum(seconds[f"{u['unit']}.{p}"]
                          for u in units for p in ("forward", "backward"))
        assert framework["units_seconds"]["median"] == pytest.approx(np.median(units_total))
        assert framework["rest_seconds"]["median"] == pytest.approx(np.median(total - units_total))
        # the whole step runs every unit forward and backward: longer than any one unit alone
        assert step["total"]["median"] > max(u["forward"]["median"] for u in units)


def test_some_layers_only(tmp_path):
    run = xbench("profile", "--model", "vgg19", "--batch", 4, "--backend", "pt-single",
                 "--layer", "conv1,fc1", "--steps", MIN_STEPS, "--warmup", 1, "--device", "cpu",
                 "--json", "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    (framework,) = strict_json(run.stdout)["frameworks"]
    assert [u["unit"] for u in framework["units"]] == ["conv1", "fc1"]
    assert not framework["all_units"] and framework["step"]["total"]["n"] == MIN_STEPS
    assert (tmp_path / "profile.json").is_file()


@pytest.mark.parametrize("args, message", [
    (["--model", "resnet18", "--batch", 8, "--layer", "block9"],
     "resnet18 has no layer 'block9' (did you mean 'block8'?); its layers are conv1, bn1"),
    (["--model", "resnet81", "--batch", 8], "unknown model 'resnet81' (did you mean 'resnet18'?)"),
    (["--model", "small", "--batch", 8, "--backend", "pt-ddp"],
     "backend 'pt-ddp' is not one of pt-single, tf-single"),
    (["--model", "small", "--batch", 8, "--steps", 3], f"--steps must be from {MIN_STEPS}"),
    (["--model", "small", "--batch", 0], "--batch must be at least 1"),
])
def test_bad_input_exits_2_with_one_line(args, message, tmp_path):
    run = xbench_here("profile", *args, "--out", tmp_path)
    assert run.returncode == 2 and message in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.parametrize("options, message", [
    (["--seed", "-1"], "--seed must be from 0"), (["--steps", "100000"], "--steps"),
    (["--warmup", "100000"], "--warmup")])
def test_profile_bounds_its_numbers(options, message):
    refused(xbench_here("profile", "--model", "small", "--batch", "8", *options), message)


def test_a_profile_into_a_folder_it_cannot_make_fails_before_it_measures(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = xbench_here("profile", "--model", "small", "--batch", "8", "--backend", "pt-single",
                       "--out", blocker / "sub")
    refused(done, "cannot write the profile")
    assert "pt-single" not in done.stdout  # nothing was measured


@pytest.mark.parametrize("command", [
    ["probe", "--backend", "pt-single,pt-ddp", "--devices", "2"],
    ["profile", "--model", "small", "--batch", "8", "--backend", "pt-single", "--steps", "500"]])
def test_sigterm_stops_probe_and_profile_cleanly(command, tmp_path):
    """The measuring processes' temporary folders go in a folder of the test's own (TMPDIR),
    where no other test's can appear."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()

    def leftovers():
        return {p.name for p in temporary.glob("xbench-*") if p.name.startswith(
            ("xbench-probe-", "xbench-profile-"))}
    extra = ["--results-dir", tmp_path] if command[0] == "probe" else ["--out", tmp_path / "p"]
    process = subprocess.Popen([*XBENCH, *map(str, command), *map(str, extra)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(temporary)})
    deadline = time.monotonic() + 120
    while not leftovers() and time.monotonic() < deadline:  # it has started measuring
        time.sleep(0.2)
    assert leftovers(), "it never started measuring"
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "resume" not in stderr
    assert leftovers() == set()
    assert not (tmp_path / "probe.jsonl").exists()
