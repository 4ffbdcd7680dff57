"""`xbench trace`: a recorded row's steps as a Chrome / Perfetto trace, checked against the
numbers the row recorded; a cell that is not there, or recorded no timeline, refused."""
import json
from collections import defaultdict

import pytest

from tests.helpers import REPO, refused, strict_json, xbench_here

RECORDED = REPO / "tests" / "data"
TWO_DEVICES = "pt-ddp|small|x1|global-b64|d2|e4|seed0|target0.85-evals2|mnist|cap1024|test1000|auto"
SINGLE = "pt-single|small|x1|global-b128|d1|e2|seed0|mnist|cap512|auto"
DDP = "pt-ddp|small|x1|global-b128|d1|e2|seed0|mnist|cap512|auto"


def rows_of(name: str, key: str) -> list[dict]:
    lines = (RECORDED / f"{name}.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if row["cell_key"] == key]


def test_a_cells_trace_holds_every_rank_epoch_part_and_collective_the_row_recorded(tmp_path):
    out = tmp_path / "two.json"
    done = xbench_here("trace", RECORDED / "time-to-accuracy.jsonl", "--cell", TWO_DEVICES,
                       "--out", out)
    assert done.returncode == 0, done.stderr
    assert str(out) in done.stdout and "2 rank(s), 4 epoch(s)" in done.stdout
    events = strict_json(out.read_text())["traceEvents"]
    (row,) = rows_of("time-to-accuracy", TWO_DEVICES)
    epochs = row["attribution"]["epochs"]
    names = {(e["pid"], e.get("tid"), e["args"]["name"]) for e in events if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    assert names == {(1, None, "rank 0"), (2, None, "rank 1"), (1, 1, "compute"),
                     (1, 2, "collectives"), (2, 1, "compute"), (2, 2, "collectives")}
    steps = [e for e in events if e.get("cat") == "step"]
    assert len(steps) == len(epochs) * 2
    by_step = defaultdict(list)  # (pid, epoch) -> its events but the step's own
    for e in events:
        if e["ph"] in "Xi" and e["cat"] != "step":
            by_step[e["pid"], e["args"]["epoch"]].append(e)
    for number, epoch in enumerate(epochs, 1):
        for rank, recorded in enumerate(epoch["ranks"]):
            found = by_step[rank + 1, number]
            parts = {e["name"]: e["dur"] for e in found if e["cat"] == "part"}
            mean = {part: values["seconds"] / recorded["steps"] * 1e6
                    for part, values in recorded["parts"].items() if values["seconds"] > 0}
            assert parts == pytest.approx(mean)
            (step,) = [s for s in steps if s["pid"] == rank + 1 and s["args"]["epoch"] == number]
            assert sum(parts.values()) == pytest.approx(step["dur"])
            # named for what it is: one step drawn for the epoch's, not the epoch
            assert step["name"] == f"mean step of epoch {number}"
            assert step["args"]["epoch_seconds"] == row["epochs"][number - 1]["seconds"]
            flights = [e for e in found if e["cat"] == "collective"]
            timeline = recorded["timeline"]
            assert [e["args"]["bytes"] for e in flights] == [
                f["bytes"] for f in timeline["collectives"]]
            assert [e["dur"] for e in flights] == pytest.approx(
                [(f["end"] - f["launch"]) * 1e6 for f in timeline["collectives"]])
            assert len([e for e in found if e["name"] == "gradient ready"]) == len(
                timeline["gradients"])
            # DDP's buckets hold whole gradients: each collective's flow starts at the ready
            # moment of its last gradient
            starts = [e["ts"] for e in events if e["ph"] == "s" and e["id"].startswith(
                f"e{number}r{rank}c")]
            readies = sorted(e["ts"] for e in found if e["name"] == "gradient ready")
            assert len(starts) == len(flights) and set(starts) <= set(readies)
    # every rank's epoch starts together, each epoch after the one before
    assert sorted({s["ts"] for s in steps}) == sorted({s["ts"] for s in steps if s["pid"] == 1})


def test_the_newest_run_unless_a_repeat_is_asked_for(tmp_path):
    out = tmp_path / "r1.json"
    assert xbench_here("trace", RECORDED / "repeats.jsonl", "--cell", DDP, "--repeat", 1,
                       "--out", out).returncode == 0
    assert strict_json(out.read_text())["otherData"]["repeat"] == 1
    newest = max(rows_of("repeats", DDP), key=lambda row: row["finished_at"])["repeat"]
    done = xbench_here("trace", RECORDED / "repeats.jsonl", "--cell", DDP, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert strict_json((tmp_path / f"trace-pt-ddp_small_x1_global-b128_d1_e2_seed0_mnist_cap512_"
                                    f"auto-r{newest}.json").read_text())["otherData"]["repeat"] \
        == newest


def test_a_cell_not_there_or_without_a_timeline_is_one_line_and_exit_2(tmp_path):
    results = RECORDED / "repeats.jsonl"
    refused(xbench_here("trace", results, "--cell", DDP.replace("d1", "d3"), cwd=tmp_path),
            f"no cell '{DDP.replace('d1', 'd3')}' in {results} (did you mean '{DDP}'?)")
    refused(xbench_here("trace", results, "--cell", DDP, "--repeat", 9, cwd=tmp_path),
            "has no repeat 9")
    refused(xbench_here("trace", results, "--cell", SINGLE, cwd=tmp_path),
            "pt-single records no timeline: its collectives are not timed apart")
    old = dict(rows_of("repeats", DDP)[0])
    old["attribution"] = {**old["attribution"], "epochs": [
        {**epoch, "ranks": [{**rank, "timeline": None} for rank in epoch["ranks"]]}
        for epoch in old["attribution"]["epochs"]]}
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    refused(xbench_here("trace", tmp_path / "old.jsonl", "--cell", DDP, cwd=tmp_path),
            "before schema 15")
    assert not list(tmp_path.glob("trace-*"))


def test_an_out_under_a_file_says_so_and_a_key_is_echoed_printable(tmp_path):
    """--out beneath a file names the file, not a folder that "does not exist"; a key with a
    control character comes back with it escaped, never raw on the terminal."""
    results = RECORDED / "repeats.jsonl"
    (tmp_path / "demo.jsonl").write_text("")
    refused(xbench_here("trace", results, "--cell", DDP, "--out", "demo.jsonl/x.json",
                        cwd=tmp_path),
            "cannot write the trace to demo.jsonl/x.json: demo.jsonl is a file, not a folder")
    done = xbench_here("trace", results, "--cell", "pt-ddp\x01", cwd=tmp_path)
    refused(done, "no cell 'pt-ddp\\x01' in")
    assert "\x01" not in done.stderr
