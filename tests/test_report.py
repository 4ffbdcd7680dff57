"""`xbench report`: known numbers from hand-made rows, damaged inputs, escaping, a real run, and
the page rendered in headless Chromium (checked through the DevTools protocol)."""
import fcntl
import itertools
import json
import math
import os
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xbench.common.errors import UserError
from xbench.common.grids.cell import Cell
from xbench.common.measuring.attribution import MARKED, Step
from xbench.common.measuring.attribution import summarize as summarize_steps
from xbench.common.results import schema
from xbench.common.results.store import read_rows
from xbench.common.workload.models import gradient_bytes, parameter_count
from xbench.reports import analysis
from xbench.reports.build import build_report, parse_formats
from xbench.reports.load import load
from xbench.reports.screenshot import chromium_command, screenshot
from xbench.reports.stats import summarize
from xbench.reports.verdicts import judged

MNIST = Path(__file__).resolve().parents[2] / "shared/data/mnist"
XBENCH = Path(sys.executable).parent / "xbench"
SAMPLES = 4096


SHARES = {"input": 0.05, "forward": 0.25, "backward": 0.45, "optimizer": 0.1, "host": 0.15}


def hand_attribution(epoch_seconds, steps, devices, comm):
    """The step attribution of a run whose epochs take `epoch_seconds`, `steps` steps each,
    every step split by SHARES on each of `devices` ranks, with `comm` of it (a share) moved from
    the backward pass to an all-reduce of the model's gradients after every rank was ready; made
    by the loop's own arithmetic (common.measuring.attribution)."""
    def steps_of(seconds):
        made = []
        for index in range(steps):
            step, at = Step(index * seconds), index * seconds
            for part, share in SHARES.items():
                share -= comm if part == "backward" else 0
                step.intervals.append((part, at, at + share * seconds, MARKED))
                at += share * seconds
            step.end = at + comm * seconds
            if comm:
                step.ready, step.collective_end = at, step.end
                step.collective_busy, step.collective_bytes = comm * seconds, gradient_bytes("small")
            made.append(step)
        return made
    epochs = []
    for seconds in epoch_seconds:
        ranks = [summarize_steps(steps_of(seconds / steps), [None] * steps, seconds)] * devices
        epochs.append({"ranks": ranks, "slowest_rank": None})
    return {"how": {}, "epochs": epochs, "traced_steps": None}


def hand_cell(backend="pt-ddp", devices=1, batch=128, mode="global", epochs=2, dataset="mnist",
              model="small", threads=0, repeat=0):
    """The cell of a hand-made row."""
    return Cell(grid="hand", backend=backend, model=model, multiple=1, batch=batch,
                devices=devices, epochs=epochs, batch_mode=mode, seed=0, max_train_samples=0,
                data=dataset, device="cpu", timeout=600, threads=threads, repeat=repeat)


def make_row(backend="pt-ddp", devices=1, batch=128, mode="global", rates=(80.0, 100.0), step=0.01,
             repeat=0, status="ok", error=None, host="node-a", dataset="mnist", model="small",
             contended=False, reduction="all-reduce", test_accuracy=0.9, framework="torch",
             threads=0, comm=None):
    """A result row as the runner writes it, with the given measurements (`comm`: the share of
    each step exposed communication takes; default 20% on N > 1 devices)."""
    cell = hand_cell(backend, devices, batch, mode, len(rates), dataset, model, threads, repeat)
    env = {"host": host, "cpu_count": 2, "python": "3.11.7",
           "packages": {"torch": "2.13.0"}, "git_commit": None}
    contention = {"other_cpu_share": 0.5 if contended else 0.0, "steal_share": 0.0,
                  "load_1m": 1.0, "other_gpu_processes": None, "cpu_per_wall_per_rank": [1.0],
                  "contended": contended}
    measurement = None if status != "ok" else schema.Measurement(
        framework_version="2.13.0", params=parameter_count(model), dataset_source="hand-made",
        train_samples=SAMPLES, device_type="cpu", device_name="CPU",
        epochs=[{"epoch": e, "seconds": SAMPLES / r, "samples": SAMPLES, "rate": r,
                 "loss": 1.0 / e, "accuracy": 0.5 + 0.2 * e, "seconds_per_rank": [SAMPLES / r],
                 "contention": contention} for e, r in enumerate(rates, 1)],
        startup_seconds=3.0, step_time_p50=step, step_time_p90=step, test_accuracy=test_accuracy,
        peak_memory_per_device=[(300 if i == 0 else 200) * 2**20 for i in range(devices)],
        model_state_per_device=[3 * 4 * parameter_count(model)] * devices,
        hosts=[host] * devices, threads={"per_device": {"compute": 1, "inter_op": 1, "input_pipeline": 1},
                 "per_process": {"intra_op": 1, "inter_op": 1, "input_pipeline": 1}},
        contended=contended,
        evidence={"replica_weight_digests": ["w"] * devices, "global_batches_digests": ["g"],
                  "shard_overlap": [0], "samples_trained": [SAMPLES],
                  "replica_sample_digests": [["s"]] * devices},
        backend_details={"reduction": reduction},
        attribution=hand_attribution(
            [SAMPLES / r for r in rates], SAMPLES // (batch if mode == "global" else batch * devices),
            devices, (0.2 if devices > 1 else 0.0) if comm is None else comm))
    return schema.make_row(cell, f"hand-run-{next(RUNS)}", schema.now(), status, error, framework,
                           measurement, env, None, 1.0, 1)


RUNS = itertools.count()  # each hand-made row is its own run, as each grid's rows are


def harmonic(*rates):
    """The rate of repeats at these rates: samples / mean epoch time."""
    return 1 / np.mean([1 / r for r in rates])


def known_rows():
    """Strong scaling (global batch 128): 1 device in 3 repeats (rates 100, 110, 120), 2 and 4
    devices; weak scaling (32 per device) on 1, 2, 4 devices with step times 10, 12, 15 ms."""
    return [*[make_row(devices=1, rates=(80, r), step=0.030, repeat=i)
              for i, r in enumerate((100, 110, 120))],
            make_row(devices=2, rates=(150, 180), step=0.020),
            make_row(devices=4, rates=(300, 330), step=0.020),
            make_row(devices=1, batch=32, mode="per_device", rates=(90, 100), step=0.010),
            make_row(devices=2, batch=32, mode="per_device", rates=(140, 150), step=0.012),
            make_row(devices=4, batch=32, mode="per_device", rates=(190, 200), step=0.015),
            make_row(backend="pt-dp", devices=2, status="unsupported",
                     error="pt-dp with 2 devices needs 2 CUDA GPUs")]


def write_rows(path, rows, extra_lines=()):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return path


def xbench(*args, cwd=None):
    return subprocess.run([str(XBENCH), *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


# --- the numbers -----------------------------------------------------------------------------

def test_ci_for_three_repeats_uses_students_t():
    stats = summarize([100.0, 110.0, 120.0])
    assert stats["n"] == 3 and stats["mean"] == pytest.approx(110.0)
    assert stats["std"] == pytest.approx(10.0)
    assert stats["ci"] == pytest.approx(4.3026527 * 10.0 / math.sqrt(3))  # t(0.975, 2 df)
    assert math.isnan(summarize([5.0])["ci"]) and summarize([])["n"] == 0


def test_speedup_efficiency_and_weak_strong_labels(tmp_path):
    frame, problems = load([write_rows(tmp_path / "r.jsonl", known_rows())])
    assert problems == []
    scaling = analysis.scaling(analysis.cell_table(frame)).set_index(["scaling", "devices"])
    one = harmonic(100, 110, 120)  # rate = samples / mean epoch time, not the mean of rates
    assert scaling.loc[("strong", 1), "rate_1"] == pytest.approx(one)
    assert scaling.loc[("strong", 2), "speedup"] == pytest.approx(180 / one)
    assert scaling.loc[("strong", 2), "efficiency"] == pytest.approx(180 / one / 2)
    assert scaling.loc[("strong", 4), "speedup"] == pytest.approx(330 / one)
    assert scaling.loc[("strong", 4), "efficiency"] == pytest.approx(330 / one / 4)
    assert not scaling.loc[("strong", 4), "speedup_ratio"].has_interval  # one 4-device run
    assert scaling.loc[("weak", 2), "efficiency"] == pytest.approx(0.75)
    assert scaling.loc[("weak", 4), "speedup"] == pytest.approx(2.0)
    assert set(scaling.loc["weak", "batch_mode"]) == {"per_device"}
    assert set(scaling.loc["strong", "batch_mode"]) == {"global"}


def test_the_step_attribution_and_bus_bandwidth(tmp_path):
    """Every hand-made step is 5% input, 25% forward, 45% backward, 10% optimizer, 15% host on 1
    device; on N > 1, 20% of it is moved from backward to the all-reduce."""
    frame, _ = load([write_rows(tmp_path / "r.jsonl", known_rows())])
    attributed = analysis.attribution(analysis.cell_table(frame))
    weak = attributed[attributed["batch_mode"] == "per_device"].set_index("devices")
    grad = gradient_bytes("small")
    step = SAMPLES / 150 / (SAMPLES // 64)  # 2 devices at 150 samples/s, 64 samples a step
    assert weak.loc[2, "communication_step"] == pytest.approx(0.2 * step)
    assert weak.loc[2, "backward_step"] == pytest.approx(0.25 * step)
    assert weak.loc[2, "communication_share"] == pytest.approx(0.2)
    assert weak.loc[2, "moving_seconds"] == pytest.approx(0.2 * step)
    assert weak.loc[2, "algbw"] == pytest.approx(grad / (0.2 * step))
    assert weak.loc[2, "busbw"] == pytest.approx(grad / (0.2 * step) * 2 * 1 / 2)  # N = 2
    four = SAMPLES / 200 / (SAMPLES // 128)
    assert weak.loc[4, "busbw"] == pytest.approx(grad / (0.2 * four) * 2 * 3 / 4)  # N = 4: 1.5x
    # an epoch's compute and communication add up to its time
    assert (weak.loc[4, "compute_epoch_seconds"] + weak.loc[4, "comm_epoch_seconds"]
            == pytest.approx(SAMPLES / 200))
    assert weak.loc[1, "communication_step"] == 0 and math.isnan(weak.loc[1, "busbw"])
    assert attributed["adds_up"].all()
    assert analysis.bus_bandwidth(10.0, 2) == 10.0 and analysis.bus_bandwidth(10.0, 4) == 15.0


def test_report_files_hold_the_known_numbers(tmp_path):
    results = write_rows(tmp_path / "known.jsonl", known_rows())
    done = xbench("report", results, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert f"report: {tmp_path / 'out' / 'index.html'}" in done.stdout
    assert ("pt-ddp on 4 devices: speedup 3.02×, efficiency 75%; inconclusive: one run on a side "
            "has no interval (run --repeat 3)" in done.stdout)
    assert "1 unsupported" in done.stdout and "needs 2 CUDA GPUs" in done.stdout
    cells = pd.read_csv(tmp_path / "out" / "cells.csv")
    three = cells[cells["n"] == 3].iloc[0]
    seconds = summarize([SAMPLES / r for r in (100, 110, 120)])
    assert three["epoch2_rate"] == pytest.approx(harmonic(100, 110, 120))
    assert three["epoch2_seconds_mean"] == pytest.approx(seconds["mean"])
    assert three["epoch2_rate_ci95_low"] == pytest.approx(SAMPLES / (seconds["mean"] + seconds["ci"]))
    assert three["epoch2_rate_ci95_high"] == pytest.approx(SAMPLES / (seconds["mean"] - seconds["ci"]))
    assert len(cells) == 7 and set(cells["statuses"]) >= {"3 ok", "1 unsupported"}
    written = {p.name for p in (tmp_path / "out").iterdir()}
    for name in ("index.html", "summary.md", "cells.csv", "fig5a_rate_vs_devices.png",
                 "fig5a_rate_vs_devices.svg", "scaling.png", "step_parts.png",
                 "accuracy.png", "memory.png", "overhead.png"):
        assert name in written
    page = (tmp_path / "out" / "index.html").read_text()
    assert "gets no ring bandwidth" in page and "busbw = algbw × 2(N−1)/N" in page
    assert page.count("data:image/png;base64,") == len([n for n in written if n.endswith(".png")])
    assert "http://" not in page and "https://" not in page
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| env | backend |" in summary and "![Figure 5a" in summary


def repeated(backend, devices, rates, **kwargs):
    return [make_row(backend=backend, devices=devices, rates=(r, r), repeat=i, **kwargs)
            for i, r in enumerate(rates)]


def test_verdicts_state_what_the_intervals_support_and_mark_the_suspect(tmp_path):
    """pt-ddp: 1 device ~100 samples/s, 2 devices ~190 (3 repeats each): 2 devices pay off.
    hvd-torch: 2 devices ~240 against ~100 on one: efficiency above 100% is SUSPECT. pt-dp and
    pt-ddp at 1 device are within each other's noise: inconclusive. tf-mirrored's reduction to
    one device gets no bus bandwidth."""
    rows = [*repeated("pt-ddp", 1, (98, 100, 102), step=0.010),
            *repeated("pt-ddp", 2, (188, 190, 192), step=0.012),
            *repeated("hvd-torch", 1, (99, 100, 101)), *repeated("hvd-torch", 2, (238, 240, 242)),
            *repeated("pt-dp", 1, (90, 105, 110)),
            *repeated("tf-mirrored", 1, (99, 100, 101), step=0.010, framework="tensorflow",
                      reduction="none"),
            *repeated("tf-mirrored", 2, (150, 151, 152), step=0.014, framework="tensorflow",
                      reduction="reduce-to-one")]
    results = write_rows(tmp_path / "r.jsonl", rows)
    _, summary, written = build_report([results], tmp_path / "out", formats=["md"])
    text = "\n".join(summary)
    assert "pt-ddp on 2 devices: speedup 1.90× [1." in text and "efficiency 95%: pays off" in text
    assert "hvd-torch on 2 devices: speedup 2.40×" in text
    assert "efficiency SUSPECT (120%, above 100%" in text and "not taken as a result" in text
    assert "fastest on 2 devices: hvd-torch is fastest (hvd-torch 240 samples/s vs pt-ddp 190: 1.26× [" in text
    assert "test accuracy: the same on every device count, in every backend (0.9000" in text
    fastest_one = next(line for line in summary if "fastest on 1 device" in line)
    assert "inconclusive" in fastest_one
    assert "2 devices at best (hvd-torch) vs 1 device at best" in text
    attributed = analysis.attribution(analysis.cell_table(load([results])[0]))
    two = attributed[attributed["devices"] == 2].set_index("backend")
    assert not math.isnan(two.loc["pt-ddp", "busbw"]) and math.isnan(two.loc["tf-mirrored", "busbw"])
    assert "reduce-to-one: no ring bandwidth" in written["md"].read_text()


def test_contended_runs_are_left_out_unless_asked(tmp_path):
    rows = [*repeated("pt-ddp", 1, (98, 100, 102)),
            *repeated("pt-ddp", 2, (188, 190, 192)),
            make_row(backend="pt-ddp", devices=2, rates=(20, 20), repeat=3, contended=True)]
    results = write_rows(tmp_path / "r.jsonl", rows)
    _, summary, written = build_report([results], tmp_path / "out", formats=["csv"])
    text = "\n".join(summary)
    assert "1 run(s) were contended" in text and "left out of every number and verdict" in text
    cells = pd.read_csv(written["csv"]).set_index("devices")
    assert cells.loc[2, "n"] == 3 and cells.loc[2, "statuses"] == "4 ok (1 contended)"
    assert cells.loc[2, "epoch2_rate"] == pytest.approx(harmonic(188, 190, 192))
    _, summary, written = build_report([results], tmp_path / "all", formats=["csv"],
                                       include_contended=True)
    assert "included at your request" in "\n".join(summary)
    assert pd.read_csv(written["csv"]).set_index("devices").loc[2, "n"] == 4


def test_format_chooses_the_files(tmp_path):
    results = write_rows(tmp_path / "known.jsonl", known_rows())
    build_report([results], tmp_path / "out", formats=parse_formats("md,csv"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cells.csv", "summary.md"]
    with pytest.raises(UserError, match="--format takes a comma list of html, md, png, svg, csv"):
        parse_formats("html,pdf")


def test_where_filters_rows_and_a_bad_query_is_a_clear_error(tmp_path):
    results = write_rows(tmp_path / "known.jsonl", known_rows())
    notices, summary, _ = build_report([results], tmp_path / "out", formats=["csv"],
                                       where="batch_mode == 'per_device' and devices > 1")
    assert len(pd.read_csv(tmp_path / "out" / "cells.csv")) == 2
    notices, _, _ = build_report([results], tmp_path / "none", formats=["csv"],
                                 where="devices > 99")
    assert "No rows to report match --where 'devices > 99'" in notices[0]
    for query, problem in (("modell == 'small'", "modell"), ("devices >", "SyntaxError"),
                           ("devices + 1", "BinOp is not allowed"),
                           ("model", "does not give true/false")):
        with pytest.raises(UserError, match=problem):
            load([results], query)
    done = xbench("report", results, "--out", tmp_path / "bad", "--where", "modell == 1")
    assert done.returncode == 2
    assert "error: --where 'modell == 1' is not a valid filter: no column 'modell'" in done.stderr
    assert "Traceback" not in done.stderr


def test_environments_and_synthetic_rows_are_never_mixed(tmp_path):
    a = write_rows(tmp_path / "a.jsonl", [make_row(rates=(80, 100), host="node-a")])
    b = write_rows(tmp_path / "b.jsonl", [make_row(rates=(80, 300), host="node-b"),
                                         make_row(rates=(80, 50), dataset="synthetic")])
    notices, summary, written = build_report([a, b], tmp_path / "out", formats=["md", "csv"])
    assert any("2 environments" in n and "never averaged together" in n for n in notices)
    assert "3 of 3 measured cells ran once (n = 1)" in notices[0]
    assert any("SYNTHETIC" in n for n in notices)
    cells = pd.read_csv(written["csv"])
    assert sorted(cells["epoch2_rate"]) == [50.0, 100.0, 300.0]
    markdown = written["md"].read_text()
    assert "pt-ddp (synthetic)" in markdown and "pt-ddp \\[env B\\]" in markdown
    assert "| A | node-a |" in markdown and "| B | node-b |" in markdown


# --- damaged or missing input ------------------------------------------------------------------

def test_empty_results_file_still_writes_an_empty_report(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    notices, summary, written = build_report([empty], tmp_path / "out")
    assert notices == ["No rows to report: the report is empty."]
    assert summary[0] == "0 rows (0 ok, 0 not ok) from empty.jsonl"
    assert {"html", "md", "csv"} <= set(written)
    assert "No rows to report" in written["html"].read_text()


def test_malformed_and_partial_files_report_what_they_can(tmp_path):
    good = make_row(devices=1)
    no_backend = {**make_row(devices=2), "backend": None}
    bad_devices = {**make_row(devices=4), "devices": "four"}
    torn = json.dumps(make_row(devices=2))[:80]
    results = write_rows(tmp_path / "damaged.jsonl", [good, no_backend, bad_devices],
                         extra_lines=["not json at all", '{"no": "cell key"}', torn])
    done = xbench("report", results, "--out", tmp_path / "out", "--format", "html,csv")
    assert done.returncode == 0, done.stderr
    assert "5 problem(s) in the results files" in done.stderr
    assert "line 4: not valid JSON" in done.stderr and "line 5: not a result row" in done.stderr
    assert "line 6: not valid JSON" in done.stderr
    assert "line 2: not a result row: 'backend' is null in a row with status 'ok'" in done.stderr
    assert "line 3: not a result row: 'devices' is str, not int" in done.stderr
    assert "1 row (1 ok, 0 not ok)" in done.stdout
    assert "fastest on 1 device: only pt-ddp ran" in done.stdout
    page = (tmp_path / "out" / "index.html").read_text()
    assert "line 4: not valid JSON" in page
    # one device only: Figure 5a, drawn over one point, is replaced by what it would need
    assert ("Figure 5a: epoch-2 rate vs devices, by model: not drawn: it needs cells at two or "
            "more device counts; these results have only 1" in page)


def test_missing_results_are_clear_errors(tmp_path):
    done = xbench("report", tmp_path / "nope.jsonl")
    assert done.returncode == 2 and "does not exist" in done.stderr
    done = xbench("report", cwd=tmp_path)
    assert done.returncode == 2 and "no results file" in done.stderr
    assert "Traceback" not in done.stderr


def test_default_is_the_newest_results_file(tmp_path):
    (tmp_path / "results").mkdir()
    write_rows(tmp_path / "results" / "old.jsonl", [make_row()])
    write_rows(tmp_path / "results" / "new.jsonl", [make_row(), make_row(devices=2)])
    os.utime(tmp_path / "results" / "old.jsonl", (1, 1))
    done = xbench("report", "--format", "csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "from new.jsonl" in done.stdout
    assert (tmp_path / "reports" / "out" / "new" / "cells.csv").is_file()


# --- escaping and the browser ----------------------------------------------------------------

HOSTILE = "<script>console.error('escaped?')</script>"


def hostile_rows():
    """The known rows plus names and errors that are HTML, and a $ that matplotlib reads as math."""
    return [*known_rows(), make_row(backend=f"x{HOSTILE}$y$", devices=1),
            make_row(backend="pt-ddp", devices=8, status="failed",
                     error=f'<img src="nowhere.png" onerror="console.error(1)"> {HOSTILE}')]


class DevTools:
    """Headless Chromium driven over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated
    JSON): no extra package, and the browser's own events say what loaded and what failed."""

    def __init__(self, profile, timeout=120):
        to_browser, self.send_fd = os.pipe()
        self.receive_fd, from_browser = os.pipe()
        # Above fd 4, so that bash's "3<&a 4>&b" cannot overwrite one end with the other.
        to_browser, from_browser = (high_fd(to_browser), high_fd(from_browser))
        command = chromium_command(profile, "--remote-debugging-pipe", "about:blank")
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}', *command],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.deadline = time.monotonic() + timeout
        self.buffer, self.events, self.last_id = b"", [], 0

    def close(self):
        """Ask the browser to quit (so it stops writing its profile); kill it if it does not."""
        os.write(self.send_fd, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.send_fd)
        os.close(self.receive_fd)

    def call(self, method, params=None, session=None):
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.send_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self.receive()
            if reply.get("id") == self.last_id:
                assert "error" not in reply, (method, reply)
                return reply["result"]

    def wait_for(self, method):
        while not any(e["method"] == method for e in self.events):
            self.receive()

    def receive(self):
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            ready = left > 0 and select.select([self.receive_fd], [], [], left)[0]
            assert ready, "Chromium did not answer in time"
            chunk = os.read(self.receive_fd, 1 << 16)
            assert chunk, "Chromium closed the DevTools pipe"
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message = json.loads(raw)
        if "method" in message:
            self.events.append(message)
        return message


def high_fd(fd):
    """`fd` moved to a number of 10 or more."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


def render_in_chromium(page):
    """(image loaded flags, console errors, number of script elements) of `page` once loaded."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = DevTools(profile)
        try:
            target = next(t for t in browser.call("Target.getTargets")["targetInfos"]
                          if t["type"] == "page")
            session = browser.call("Target.attachToTarget",
                                   {"targetId": target["targetId"], "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                browser.call(f"{domain}.enable", session=session)
            browser.call("Page.navigate", {"url": Path(page).resolve().as_uri()}, session)
            browser.wait_for("Page.loadEventFired")
            probe = ("JSON.stringify({images: [...document.images].map(i => i.complete && "
                     "i.naturalWidth > 0), scripts: document.scripts.length, headings: "
                     "[...document.querySelectorAll('h1,h2,h3')].map(h => h.textContent), "
                     "text: document.body.innerText})")
            found = json.loads(browser.call("Runtime.evaluate", {"expression": probe,
                                                                  "returnByValue": True},
                                            session)["result"]["value"])
        finally:
            browser.close()
    errors = [e for e in browser.events
              if e["method"] == "Runtime.exceptionThrown"
              or (e["method"] == "Runtime.consoleAPICalled"
                  and e["params"]["type"] in ("error", "assert"))
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    render_in_chromium.last = found  # headings and visible text, for the page's checks
    return found["images"], errors, found["scripts"]


def test_the_checker_sees_broken_images_and_errors(tmp_path):
    """The browser check itself: a page with a missing image and a throwing script fails it."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="missing.png">'
                    '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">'
                    '<script>throw new Error("boom")</script></body></html>')
    images, errors, _ = render_in_chromium(page)
    assert images == [False, False]
    assert any("boom" in json.dumps(e) for e in errors)
    assert any("missing.png" in json.dumps(e) for e in errors)


def test_report_page_is_escaped_and_renders_in_chromium_with_every_figure(tmp_path):
    results = write_rows(tmp_path / "hostile.jsonl", hostile_rows())
    _, _, written = build_report([results], tmp_path / "out", formats=["html"])
    page = written["html"].read_text()
    assert "<script" not in page and '<img src="nowhere' not in page
    assert "&lt;script&gt;console.error(&#x27;escaped?&#x27;)&lt;/script&gt;" in page
    assert "&lt;img src=&quot;nowhere.png&quot;" in page
    images, errors, scripts = render_in_chromium(written["html"])
    assert len(images) == page.count("<figure") == 9 and all(images)  # predicted.png the 9th
    assert errors == []
    assert scripts == 0
    seen = render_in_chromium.last
    assert len(seen["headings"]) == len(set(seen["headings"]))  # no heading twice
    # one global batch and one dataset multiple: figures 5b and 5e say what they would need
    assert ("Figure 5b: epoch-2 rate vs batch size: not drawn: it needs cells at two or more "
            "batch sizes; these results have only 128" in seen["text"])
    assert "Figure 5e: epoch-2 rate vs dataset multiple: not drawn" in seen["text"]
    assert "step_parts" not in seen["text"] and "No data for" not in seen["text"]
    shot = screenshot(written["html"], tmp_path / "shot.png", height=800)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- a real run ----------------------------------------------------------------------------------

def test_report_of_a_real_run_of_single_runs_draws_no_verdict(tmp_path):
    results = tmp_path / "real.jsonl"
    grid = xbench("grid", "--preset", "smoke", "--backend", "pt-single,pt-dp", "--devices", "1,2",
                  "--max-train-samples", "512", "--data-dir", MNIST, "--results", results)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    done = xbench("report", results, "--out", tmp_path / "out", "--format", "html,csv",
                  "--include-contended")  # a busy machine must not leave a side out
    assert done.returncode == 0, done.stderr
    # pt-single and pt-dp on 1 device; pt-dp on 2 cannot run on a CPU
    assert "3 rows (2 ok, 1 not ok)" in done.stdout
    fastest = next(line for line in done.stdout.splitlines() if "fastest on 1 device" in line)
    assert "inconclusive: one run on a side has no interval (run --repeat 3)" in fastest
    assert " is fastest" not in done.stdout and "pays off" not in done.stdout
    cells = pd.read_csv(tmp_path / "out" / "cells.csv").set_index(["backend", "devices",
                                                                    "global_batch"])
    assert cells.loc[("pt-dp", 1, 128), "n"] == 1 and cells.loc[("pt-dp", 1, 128), "epoch2_rate"] > 0
    assert cells.loc[("pt-dp", 2, 128), "statuses"] == "1 unsupported"
    images, errors, _ = render_in_chromium(tmp_path / "out" / "index.html")
    assert images and all(images) and errors == []


INTERVAL = re.compile(r"(\d+\.\d+)× \[(-?\d+\.\d+|−∞), (\d+\.\d+|∞)\]")


def test_report_of_three_repeats_states_only_what_its_intervals_support(tmp_path):
    """pt-single and pt-ddp on one device, 3 repeats each (alternated): every comparison is
    either stated with an interval that excludes 1, or inconclusive with what would settle it."""
    results = tmp_path / "repeated.jsonl"
    grid = xbench("grid", "--preset", "smoke", "--backend", "pt-single,pt-ddp", "--devices", "1",
                  "--repeat", "3", "--max-train-samples", "512", "--data-dir", MNIST,
                  "--results", results)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    # contended runs too: what is asserted is how verdicts follow intervals, whatever else the
    # machine was doing (a busy machine marks runs contended, which would leave no verdict)
    done = xbench("report", results, "--out", tmp_path / "out", "--format", "md",
                  "--include-contended")
    assert done.returncode == 0, done.stderr
    verdicts = [line for line in done.stdout.splitlines()
                if "fastest on 1 device" in line or "the rate of pt-single" in line]
    assert len(verdicts) == 2, done.stdout
    for line in verdicts:
        low, high = (float(v.replace("−∞", "-inf").replace("∞", "inf"))
                     for v in INTERVAL.search(line).groups()[1:])
        if low > 1 or high < 1:  # stated, or held back by the false-discovery control
            assert "inconclusive" not in line, line
            assert any(word in line for word in (" is fastest", "costs time", "faster than",
                                                 "not stated: its interval excludes")), line
        else:
            assert "inconclusive: " in line and ("repeats each would settle it" in line
                                                 or "within the noise" in line), line


def test_an_unbounded_interval_is_drawn_and_printed_as_unbounded():
    """Fieller's interval is unbounded where the denominator's runs do not bound it: the figure
    draws a dotted line through the plot and says so, the text prints ∞ (a missing error bar
    would look like certainty)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from xbench.reports.figures import lines
    from xbench.reports.stats import Ratio
    from xbench.reports.verdicts import interval_text
    unbounded, bounded = Ratio(1.2, -math.inf, math.inf, (3, 3)), Ratio(1.9, 1.7, 2.1, (3, 3))
    cells = pd.DataFrame({"series": ["pt-ddp"] * 2, "backend": ["pt-ddp"] * 2, "env": ["A"] * 2,
                          "dataset": ["mnist"] * 2, "devices": [2, 4], "speedup": [1.2, 1.9],
                          "speedup_ratio": [unbounded, bounded]})
    figure, ax = plt.subplots()
    lines(ax, cells, "devices", "speedup", "devices", "speedup")
    dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
    assert len(dotted) == 1 and list(dotted[0].get_xdata()) == [2, 2]
    assert [text.get_text() for text in ax.texts] == ["95% CI unbounded"]
    plt.close(figure)
    assert interval_text(unbounded) == "1.20× [−∞, ∞], unbounded"
    assert interval_text(bounded) == "1.90× [1.70, 2.10]"


def test_a_verdict_the_false_discovery_control_does_not_allow_is_held_back():
    """Alone, 1.10× [1.05, 1.15] (p = 0.003) would be stated; among 20 comparisons where
    the rest show nothing, Benjamini-Hochberg holds it back (it needs p <= 0.0025); 1.20×
    (p = 0.00002) is stated either way."""
    from xbench.reports.stats import false_discoveries_controlled, ratio_of_means
    from xbench.reports.verdicts import Judge
    weak, strong = ([1.10, 1.13, 1.14], [1.0, 1.02, 1.04]), ([1.2, 1.21, 1.22], [1.0, 1.01, 1.02])
    nothing = ([1.0, 1.05, 0.95], [1.0, 1.04, 0.96])
    for pairs, expected in (([weak, nothing], "above"), ([weak] + [nothing] * 19, "held"),
                            ([strong] + [nothing] * 19, "above")):
        collected = Judge()
        for pair in pairs:
            collected.decide(ratio_of_means(*pair), *pair)
        judge = Judge(false_discoveries_controlled(collected.p_values))
        decided = [judge.decide(ratio_of_means(*pair), *pair) for pair in pairs]
        assert decided[0] == expected and set(decided[1:]) == {None}
        assert "Benjamini-Hochberg" in judge.note()[0]


def test_until_conclusive_adds_repeats_until_settled_or_says_why_not(tmp_path):
    """pt-ddp on 1 and 2 devices, 2 repeats, then repeats until the comparison is settled or
    the budget is spent: every run it added is one more repeat of a cell of an open comparison,
    and it ends saying which."""
    results = tmp_path / "r.jsonl"
    done = xbench("grid", "--preset", "smoke", "--backend", "pt-ddp", "--devices", "1,2",
                  "--repeat", "2", "--max-train-samples", "512", "--data-dir", MNIST,
                  "--results", results, "--until-conclusive", "--budget", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = read_rows(results)[0]
    added = len(rows) - 4
    said = done.stdout + done.stderr
    assert f"until conclusive: {added} run(s) added; " in said
    repeats = sorted((r["cell_key"], r["repeat"]) for r in rows)
    for key in {r["cell_key"] for r in rows}:  # repeats numbered on, none twice
        mine = [repeat for k, repeat in repeats if k == key]
        assert mine == list(range(len(mine)))
    assert ("every comparison of the grid's cells is settled" in said
            or " still open: " in said)
    if "is settled" in said:
        report = xbench("report", results, "--out", tmp_path / "out", "--format", "md")
        line = next(l for l in report.stdout.splitlines() if "pt-ddp on 2 devices: speedup" in l)
        assert "pays off" in line or "does not pay off" in line, line


def until_conclusive(tmp_path, monkeypatch, rates, budget_minutes, added_rates):
    """`xbench grid --until-conclusive`'s loop on hand-made runs of pt-ddp on 1 and 2 devices
    (`rates`: each cell's last-epoch rate per repeat); every repeat it asks for runs at the next
    of its cell's `added_rates`. (the rows it added, what it said)."""
    from xbench.cli import grid as grid_command
    cells = [hand_cell(devices=devices) for devices in (1, 2)]
    results = write_rows(tmp_path / "r.jsonl", [
        make_row(devices=cell.devices, rates=(80.0, rate), repeat=repeat)
        for cell in cells for repeat, rate in enumerate(rates[cell.devices])])
    pending = {devices: iter(added) for devices, added in added_rates.items()}
    said = []

    def run_grid(more, path, **_):
        rows = [make_row(devices=c.devices, rates=(80.0, next(pending[c.devices])),
                         repeat=c.repeat) for c in more]
        with open(path, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        return rows
    monkeypatch.setattr(grid_command, "run_grid", run_grid)
    monkeypatch.setattr(grid_command, "say", lambda text, **_: said.append(text))
    return grid_command.settle(cells, results, budget_minutes, None), "\n".join(said)


def test_until_conclusive_adds_repeats_of_the_open_comparison_until_it_settles(tmp_path,
                                                                               monkeypatch):
    """Two repeats a side overlap (1 device 90 and 130, 2 devices 110 and 160 samples/s); every
    added repeat runs at 100 and 150: a few pairs settle it, each pair the next repeat of both
    cells, and the report's verdict is then stated."""
    added, said = until_conclusive(tmp_path, monkeypatch, {1: (90.0, 130.0), 2: (110.0, 160.0)},
                                   60, {1: itertools.repeat(100.0), 2: itertools.repeat(150.0)})
    pairs = len(added) // 2
    assert added and len(added) == 2 * pairs
    assert [(r["devices"], r["repeat"]) for r in added] == [
        (devices, repeat) for repeat in range(2, 2 + pairs) for devices in (1, 2)]
    assert said.count("until conclusive: one more repeat of") == pairs
    assert said.endswith(f"until conclusive: {len(added)} run(s) added; every comparison of the "
                         f"grid's cells is settled")
    frame, _ = load([tmp_path / "r.jsonl"])
    lines, _ = judged(analysis.cell_table(frame))
    assert any("pt-ddp on 2 devices: speedup" in line and "pays off" in line
               for line in lines), lines


def test_until_conclusive_stops_at_its_budget_and_says_what_is_open(tmp_path, monkeypatch):
    added, said = until_conclusive(tmp_path, monkeypatch, {1: (90.0, 130.0), 2: (110.0, 160.0)},
                                   0, {1: [], 2: []})
    assert added == [] and "the budget of 0 min is spent" in said
    assert "0 run(s) added; " in said and " still open: " in said
    assert "|d1|" in said and "|d2|" in said and "repeats a side would settle it" in said


def test_until_conclusive_runs_nothing_where_repeats_cannot_settle_it(tmp_path, monkeypatch):
    """The same rates on both sides: no number of repeats shows a difference."""
    added, said = until_conclusive(tmp_path, monkeypatch, {1: (100.0, 120.0), 2: (100.0, 120.0)},
                                   60, {1: [], 2: []})
    assert added == [] and "0 run(s) added; " in said and " still open: " in said
    assert "within the noise: more repeats are unlikely to settle it" in said


def test_an_mfu_above_the_peak_is_suspect_not_a_result(tmp_path):
    """MFU over 100% means the peak is the wrong one (another precision, another device) or the
    rate was disturbed: marked SUSPECT and not shown as a result."""
    from xbench.reports.tables import limits_table
    results = write_rows(tmp_path / "r.jsonl", [make_row(rates=(80, 100)),
                                                make_row(rates=(80, 100), batch=64)])
    frame, _ = load([results])
    cells = analysis.cell_table(frame)
    shown = []
    for gflops in (0.1, 10.0):  # the small model trains at 100 x 3.3 MFLOP = 0.33 GFLOP/s
        probe = {"matmul": [{"framework": "torch", "device_type": "cpu", "precision": "fp32",
                             "threads": 1, "gflops": gflops}], "all_reduce": []}
        limits = analysis.against_limits(cells, analysis.attribution(cells), {"A": probe})
        column = limits_table(limits)["MFU, 95% CI of the rate"]
        shown.append(column.iloc[0])
    assert shown[0].startswith("SUSPECT: 33") and shown[0].endswith("not a result")
    assert shown[1].startswith("3.3%") and "SUSPECT" not in shown[1]


def test_a_run_that_crashed_and_ran_again_is_named(tmp_path):
    rows = known_rows()
    rows[3]["crashes"] = ["crashed: exit code 134 (a process killed by signal 6, Aborted). ..."]
    _, summary, _ = build_report([write_rows(tmp_path / "r.jsonl", rows)], tmp_path / "out",
                                 formats=["md"])
    text = "\n".join(summary)
    assert "Runs that crashed and ran again: 1" in text
    assert f"{rows[3]['cell_key']} r0: 1 crash(es), then ok" in text
    assert "crashed and ran again" not in "\n".join(build_report(
        [write_rows(tmp_path / "k.jsonl", known_rows())], tmp_path / "k", formats=["md"])[1])


def test_the_precision_table_pairs_each_precision_with_its_own_setup(tmp_path):
    """Four cells: framework-default and bf16, each with and without fp16 gradient compression.
    Each precision is shown beside the other of the same compression, never across them."""
    from xbench.reports.tables import precision_table
    rows = []
    for precision, compression, rate in (("framework-default", "none", 100.0), ("bf16", "none", 150.0),
                                         ("framework-default", "fp16", 110.0),
                                         ("bf16", "fp16", 160.0)):
        row = make_row(rates=(80.0, rate))
        lower = {"bf16": "bfloat16"}.get(precision)
        row.update(precision=precision, compression=compression,
                   cell_key=row["cell_key"] + (f"|{precision}" if lower else "")
                   + ("|compress-fp16" if compression != "none" else ""))
        row["backend_details"]["math"] = {"matmul": "fp32", "convolution": "fp32",
                                          "precision": precision, "lower": lower}
        rows.append(row)
    frame, _ = load([write_rows(tmp_path / "r.jsonl", rows)])
    cells = analysis.cell_table(frame)
    shown = precision_table(cells, analysis.against_limits(cells, analysis.attribution(cells), {}))
    assert len(shown) == 4
    assert list(shown["precision"]) == ["bf16", "framework-default"] * 2
    compressed = ["compressed fp16" in t for t in shown["training"]]
    assert compressed in ([False, False, True, True], [True, True, False, False])
    assert set(shown["MFU at its precision's peak, 95% CI"]) == {"— (no probe of it)"}
