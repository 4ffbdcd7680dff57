"""The edges a hostile or careless user finds: paths from anywhere, filters that cannot run code,
values that cannot harm the machine, rows of any shape, text that cannot inject, one run per cell,
no row lost at the file, and an exit code that says what happened. Real processes where the case
involves them."""
import json
import os
import resource
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, SLOW, XBENCH, write_grid

from xbench.common.grids.cell import Cell
from xbench.common.results.schema import SCHEMA_VERSION, make_row, now
from xbench.common.results.store import read_rows

SLICE = 512


def run(*args, cwd=REPO, preexec_fn=None):
    return subprocess.run([*XBENCH, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=SLOW, preexec_fn=preexec_fn)


def grid(folder, results, mnist_dir, *options, **settings):
    return run("grid", write_grid(folder, **settings), "--data-dir", mnist_dir, "--results",
               results, *options)


def refused(done, message):
    """Exit 2, one message naming the problem, no traceback."""
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert message in done.stderr, done.stderr


def hand_row(key="k", repeat=0, status="failed", **fields):
    cell = Cell(grid="hand", backend="pt-single", model="small", multiple=1, batch=128, devices=1,
                epochs=2, batch_mode="global", seed=0, max_train_samples=SLICE, data="mnist",
                device="cpu", timeout=60, repeat=repeat)
    row = make_row(cell, "hand", now(), status, "hand-made", None, None, {}, None, 0.0, 1)
    return {**row, "cell_key": key, **fields}


# --- 1. paths are resolved once, at the edge ---------------------------------------------------

def test_a_grid_runs_from_any_folder_with_relative_paths(mnist_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = os.path.relpath(mnist_dir, elsewhere)
    done = run("grid", write_grid(tmp_path, backends=["pt-single"], max_train_samples=SLICE),
               "--data-dir", data, "--results", "out/r.jsonl", cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = read_rows(elsewhere / "out" / "r.jsonl")[0]
    assert row["status"] == "ok", row["error"]
    assert row["dataset_source"] == str(Path(mnist_dir).resolve())
    assert Path(row["log"]).is_absolute() and Path(row["log"]).is_file()


# --- 2. --where compares, never runs code -------------------------------------------------------

@pytest.fixture
def rows_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(hand_row()) + "\n")
    return path


@pytest.mark.parametrize("query, problem", [
    ("@pd.io.common.os.system('touch {marker}') == 0", "SyntaxError"),
    ("__import__('os').system('touch {marker}') == 0", "Call is not allowed"),
    ("backend.str.startswith(open('/etc/passwd').read())", "Call is not allowed"),
    ("devices + 1", "BinOp is not allowed"),
    ("modell == 1", "no column 'modell'"),
    # a value of another kind than its column's would match nothing: an empty report, exit 0
    ("devices == 'two'", "compares devices, a number, with 'two', text"),
    ("model == 2", "compares model, text, with 2, a number"),
    ("devices in ('a', 'b')", "compares devices, a number, with 'a', text"),
    ("'small' != devices", "compares devices, a number, with 'small', text"),
])
def test_where_can_only_compare_columns_with_values(query, problem, rows_file, tmp_path):
    marker = tmp_path / "pwned"
    done = run("report", rows_file, "--out", tmp_path / "out", "--where",
               query.format(marker=marker))
    refused(done, problem)
    assert not marker.exists() and "root:" not in done.stdout + done.stderr
    ok = run("report", rows_file, "--out", tmp_path / "ok", "--format", "csv", "--where",
             "backend in ['pt-single', 'pt-ddp'] and not devices > 1")
    assert ok.returncode == 0, ok.stderr


# --- 3. values a cell can mean, memory it can have ----------------------------------------------

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
    done = grid(tmp_path, tmp_path / "r.jsonl", mnist_dir, *options, max_train_samples=SLICE)
    refused(done, message)
    assert not (tmp_path / "r.jsonl.logs").exists()  # nothing started


def test_a_cell_too_large_for_the_machine_is_an_oom_row_that_never_started(mnist_dir, tmp_path):
    """The large model at a global batch of 60,000 on one device: about 250 GiB of activations."""
    done = grid(tmp_path, tmp_path / "r.jsonl", mnist_dir, backends=["pt-single"],
                models=["large"], batches=[60000], max_train_samples=0)
    assert done.returncode == 0, done.stderr  # oom is a result
    [row] = read_rows(tmp_path / "r.jsonl")[0]
    assert row["status"] == "oom" and row["error"].startswith("not started: this cell needs about")
    assert row["log"] is None and row["cell_seconds"] < 5


# --- 4. rows of any shape are validated on read --------------------------------------------------

def wrong_shapes():
    key = hand_row()["cell_key"]
    return [
        "[" * 100_000,
        json.dumps(hand_row(repeat=0) | {"repeat": [1]}),
        json.dumps(hand_row() | {"cell_key": {"a": 1}}),
        json.dumps(hand_row() | {"backend_details": [1, 2]}),
        json.dumps(hand_row() | {"epochs": [{"x": 1}]}),
        json.dumps(hand_row() | {"error": "\ud800"}),
        json.dumps({"status": "ok", "cell_key": key}),
        json.dumps(hand_row() | {"schema_version": 0}),
        json.dumps(hand_row() | {"schema_version": 999}),
        json.dumps(hand_row() | {"schema_version": "two"}),
    ]


def test_every_reader_reports_a_wrong_row_by_line_and_skips_it(mnist_dir, tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text("\n".join(wrong_shapes()) + "\n")
    export = run("export", results, tmp_path / "rows.csv")
    assert export.returncode == 0, export.stderr
    for number in range(1, 11):
        assert f"line {number}:" in export.stderr
    assert "line 1: nested too deeply" in export.stderr
    assert "line 6: not a result row: a text in it is not valid Unicode" in export.stderr
    assert "line 7: not a result row: no 'schema_version' field" in export.stderr
    assert f"schema_version 0 is not {SCHEMA_VERSION}" in export.stderr
    assert "'schema_version' is str, not a whole number" in export.stderr
    report = run("report", results, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0 and "10 problem(s) in the results files" in report.stderr
    # resume counts none of them as done: the cell of line 7 ("ok" alone) runs
    cell = Cell(grid="hand", backend="pt-single", model="small", multiple=1, batch=128,
                devices=1, epochs=2, batch_mode="global", seed=0, max_train_samples=SLICE,
                data="mnist", device="auto", timeout=SLOW)
    lines = results.read_text().splitlines()
    lines[6] = json.dumps({"status": "ok", "cell_key": cell.key})
    results.write_text("\n".join(lines) + "\n")
    done = grid(tmp_path, results, mnist_dir, name="hand", backends=["pt-single"],
                max_train_samples=SLICE)
    assert done.returncode == 0, done.stderr
    assert "done in" not in done.stdout and "line 7: not a result row" in done.stdout
    assert [r["status"] for r in read_rows(results)[0]] == ["ok"]


# --- 5. text from the results cannot inject -----------------------------------------------------

HOSTILE_KEY = "x\n```\n# Injected heading\n<img src=x onerror=alert(1)>"


def test_what_the_report_and_export_write_is_escaped_for_each_format(tmp_path):
    row = hand_row(key=HOSTILE_KEY, repeat=0) | {
        "error": "![remote](http://evil.example/x.png) [link](javascript:alert(1))",
        "backend": '=HYPERLINK("http://evil.example","click")',
        "model": "@SUM(1+1)*cmd|' /C calc'!A0"}
    results = tmp_path / "hostile.jsonl"
    results.write_text(json.dumps(row) + "\n")
    done = run("report", results, "--out", tmp_path / "out", "--format", "md,csv")
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "out" / "summary.md").read_text()
    assert "```" not in markdown and "<img" not in markdown
    assert "\n# Injected" not in markdown
    assert "![remote](" not in markdown and "[link](" not in markdown
    assert not any(line.startswith("#") and "Injected" in line for line in markdown.splitlines())
    cells = pd.read_csv(tmp_path / "out" / "cells.csv")
    assert cells["backend"][0].startswith("'=") and cells["model"][0].startswith("'@")
    export = run("export", results, tmp_path / "rows.csv")
    assert export.returncode == 0, export.stderr
    exported = pd.read_csv(tmp_path / "rows.csv")
    assert exported["backend"][0].startswith("'=") and exported["model"][0].startswith("'@")


# --- 6. one run per cell ------------------------------------------------------------------------

def test_duplicated_axis_values_are_one_cell(mnist_dir, tmp_path):
    done = run("grid", "--preset", "smoke", "--backend", "pt-single,pt-single", "--batch",
               "128,128", "--devices", "1", "--dry-run")
    assert done.returncode == 0 and "1 cells" in done.stdout, done.stdout


def test_two_grids_on_one_results_file_share_the_cells(mnist_dir, tmp_path):
    """Started together on the same two cells: each cell runs once, in one grid or the other."""
    results = tmp_path / "shared.jsonl"
    spec = {"backends": ["pt-single"], "batches": [64, 128], "max_train_samples": SLICE}
    grids = [write_grid(tmp_path, **spec), write_grid(tmp_path, **spec)]
    outputs = [None, None]

    def start(i):
        outputs[i] = run("grid", grids[i], "--data-dir", mnist_dir, "--results", results)
    threads = [threading.Thread(target=start, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    rows = read_rows(results)[0]
    assert sorted(r["global_batch"] for r in rows) == [64, 128]
    skipped = "".join(o.stdout for o in outputs)
    assert skipped.count("being run by another grid") + skipped.count("done in") == 2


# --- 7. the results file: kinds refused, rows never lost or torn ---------------------------------

@pytest.mark.parametrize("target, message", [
    ("/dev/full", "/dev/full exists and is not a regular file"),
    ("{tmp}/fifo", "fifo exists and is not a regular file"),
    ("{tmp}/link", "link is a symbolic link"),
    ("{tmp}/dangling", "dangling is a symbolic link"),
])
def test_special_files_and_links_are_refused_up_front(target, message, mnist_dir, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "real.jsonl").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "real.jsonl")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere.jsonl")
    done = grid(tmp_path, target.format(tmp=tmp_path), mnist_dir)
    refused(done, message)
    assert not Path("/dev/full.logs").exists() and not (tmp_path / "nowhere.jsonl").exists()
    assert (tmp_path / "real.jsonl").read_text() == ""


@pytest.mark.parametrize("name, message", [
    ("../outside", "grid name '../outside' must be letters"),
    ("a/b", "grid name 'a/b' must be letters"),
    ("a\\u0000b", "'name' must not contain a NUL character"),
])
def test_a_grid_name_cannot_leave_the_results_folder(name, message, tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(f'name = "{name}"\nbackends = ["pt-single"]\nmodels = ["small"]\n'
                    f'multiples = [1]\nbatches = [128]\ndevices = [1]\n')
    refused(run("grid", path, "--dry-run"), message)


def test_a_row_the_file_cannot_take_is_kept_beside_it_and_no_half_row_stays(mnist_dir, tmp_path):
    """A file size limit (as a full disk would) cuts the append short: the half line is cut off
    again, the row is kept in <results>.unsaved.jsonl, and the grid says so and stops (exit 2)."""
    results = tmp_path / "r.jsonl"  # an earlier row larger than any file the cell itself writes
    results.write_text(json.dumps(hand_row(key="earlier", error="x" * 50_000)) + "\n")
    before = results.read_bytes()
    limit = len(before) + 2000

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    done = run("grid", write_grid(tmp_path, backends=["pt-single"], max_train_samples=SLICE),
               "--data-dir", mnist_dir, "--results", results, preexec_fn=small_files)
    refused(done, "cannot append to the results file")
    side = Path(f"{results}.unsaved.jsonl")
    assert f"the row was kept in {side}" in done.stderr
    assert results.read_bytes() == before
    [kept] = read_rows(side)[0]
    assert kept["status"] == "ok" and kept["backend"] == "pt-single"


# --- 8. the exit code says whether every cell finished ------------------------------------------

def test_a_grid_whose_cells_time_out_exits_non_zero(mnist_dir, tmp_path):
    done = grid(tmp_path, tmp_path / "r.jsonl", mnist_dir, backends=["pt-single"], timeout=1)
    assert done.returncode == 3, done.stderr
    assert "1 cell(s) failed or timeout" in done.stderr
    assert [r["status"] for r in read_rows(tmp_path / "r.jsonl")[0]] == ["timeout"]
