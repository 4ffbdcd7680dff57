"""`xbench report` of real runs: single runs (the shared grid's) draw no verdict; three repeats
(recorded real rows, tests/data/repeats.jsonl) state only what their intervals support."""
import json
import re

import pandas as pd

from tests.helpers import REPO, xbench_here
from tests.test_report_browser import render_in_chromium

REPEATS = REPO / "tests" / "data" / "repeats.jsonl"


def test_report_of_a_real_run_of_single_runs_draws_no_verdict(smoke, tmp_path):
    results = tmp_path / "real.jsonl"
    results.write_text("".join(json.dumps(smoke.rows[key]) + "\n" for key in
                               (("pt-single", 1), ("pt-dp", 1), ("pt-dp", 2))))
    done = xbench_here("report", results, "--out", tmp_path / "out", "--format", "html,csv",
                       "--include-contended")  # a busy machine must not leave a side out
    assert done.returncode == 0, done.stderr
    # pt-single and pt-dp on 1 device; pt-dp on 2 cannot run on a CPU
    assert "3 rows (2 ok, 1 not ok)" in done.stdout
    fastest = next(line for line in done.stdout.splitlines() if "fastest on 1 device" in line)
    assert "inconclusive: one run on a side has no interval (run --repeat 3)" in fastest
    assert " is fastest" not in done.stdout and "pays off" not in done.stdout
    cells = pd.read_csv(tmp_path / "out" / "cells.csv").set_index(["backend", "devices",
                                                                    "global_batch"])
    assert cells.loc[("pt-dp", 1, 128), "n"] == 1
    assert cells.loc[("pt-dp", 1, 128), "epoch2_rate"] > 0
    assert cells.loc[("pt-dp", 2, 128), "statuses"] == "1 unsupported"
    images, errors, _ = render_in_chromium(tmp_path / "out" / "index.html")
    assert images and all(images) and errors == []


INTERVAL = re.compile(r"(\d+\.\d+)× \[(-?\d+\.\d+|−∞), (\d+\.\d+|∞)\]")


def test_report_of_three_repeats_states_only_what_its_intervals_support(tmp_path):
    """pt-single and pt-ddp on one device, 3 repeats each (alternated): every comparison is
    either stated with an interval that excludes 1, or inconclusive with what would settle it."""
    # contended runs too: what is asserted is how verdicts follow intervals, whatever else the
    # machine was doing when they were recorded (a busy machine marks runs contended)
    done = xbench_here("report", REPEATS, "--out", tmp_path / "out", "--format", "md",
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
