"""`xbench report`: what it is given (formats, --where, several environments, synthetic rows),
what it makes of damaged or missing results files, and what a hostile or careless user gives it:
filters that cannot run code, text that cannot inject, places it cannot write, a file size limit
midway, a pipe among the results. The real command line, in this process but where a limit on
the process is the point."""
import json
import os
import subprocess

import pandas as pd
import pytest

from tests.helpers import REPO, SLOW, XBENCH, refused, xbench, xbench_here
from tests.report_fixtures import known_rows, make_row, write_rows
from xbench.common.errors import UserError
from xbench.reports.numbers.rows import load
from xbench.reports.page.build import build_report, parse_formats


def test_format_chooses_the_files(tmp_path):
    results = write_rows(tmp_path / "known.jsonl", known_rows())
    build_report([results], tmp_path / "out", formats=parse_formats("md,csv"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cells.csv", "summary.md"]
    for wrong in ("html,pdf", "", "md,", " "):  # an empty one once meant every format
        with pytest.raises(UserError, match="--format takes a comma list of html, md, png, svg"):
            parse_formats(wrong)
    refused(xbench_here("report", results, "--format", "", "--out", tmp_path / "none"),
            "--format takes a comma list of html, md, png, svg, csv; got ''")
    assert not (tmp_path / "none").exists()


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
    done = xbench_here("report", results, "--out", tmp_path / "bad", "--where", "modell == 1")
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
    assert summary[:3] == ["Decision:",
                           "  no ok run to rank", "0 rows (0 ok, 0 not ok) from empty.jsonl"]
    assert {"html", "md", "csv"} <= set(written)
    assert "No rows to report" in written["html"].read_text()


def test_malformed_and_partial_files_report_what_they_can(tmp_path):
    good = make_row(devices=1)
    no_backend = {**make_row(devices=2), "backend": None}
    bad_devices = {**make_row(devices=4), "devices": "four"}
    torn = json.dumps(make_row(devices=2))[:80]
    results = write_rows(tmp_path / "damaged.jsonl", [good, no_backend, bad_devices],
                         extra_lines=["not json at all", '{"no": "cell key"}', torn])
    done = xbench_here("report", results, "--out", tmp_path / "out", "--format", "html,csv")
    assert done.returncode == 0, done.stderr
    assert "5 problem(s) in the results files" in done.stderr
    assert "line 4: not valid JSON" in done.stderr and "line 5: not a result row" in done.stderr
    assert "line 6: not valid JSON" in done.stderr
    assert "line 2: not a result row: 'backend' is null in a row with status 'ok'" in done.stderr
    assert "line 3: not a result row: 'devices' is 'four', not int" in done.stderr
    assert "1 row (1 ok, 0 not ok)" in done.stdout
    assert "fastest on 1 device: only pt-ddp ran" in done.stdout
    page = (tmp_path / "out" / "index.html").read_text()
    assert "line 4: not valid JSON" in page
    # one device only: Figure 5a, drawn over one point, is replaced by what it would need
    assert ("Figure 5a: epoch-2 rate vs devices, by model: not drawn: it needs cells at two or "
            "more device counts; these results have only 1" in page)


def test_missing_results_are_clear_errors(tmp_path):
    done = xbench_here("report", tmp_path / "nope.jsonl")
    assert done.returncode == 2 and "does not exist" in done.stderr
    done = xbench_here("report", cwd=tmp_path)
    assert done.returncode == 2 and "no results file" in done.stderr
    assert "Traceback" not in done.stderr


def test_default_is_the_newest_results_file(tmp_path):
    (tmp_path / "results").mkdir()
    write_rows(tmp_path / "results" / "old.jsonl", [make_row()])
    write_rows(tmp_path / "results" / "new.jsonl", [make_row(), make_row(devices=2)])
    os.utime(tmp_path / "results" / "old.jsonl", (1, 1))
    done = xbench_here("report", "--format", "csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "from new.jsonl" in done.stdout
    assert (tmp_path / "reports" / "out" / "new" / "cells.csv").is_file()


def test_a_reader_holds_a_stricter_contention_limit_with_where(tmp_path):
    """Each row carries the largest share of a rank's cores that others took in any epoch, its
    ranks' interrupts and siblings included (taken_share): --where keeps those under a limit."""
    rows = [make_row(repeat=r) for r in range(3)]
    shares = (0.01, 0.06, 0.0)
    for row, other in zip(rows, shares, strict=True):
        for epoch in row["epochs"]:
            epoch["contention"]["per_rank"] = [{"other_cpu_share": other, "interrupt_share": 0.01,
                                                "sibling_share": 0.0, "steal_share": 0.0}]
    rows.append(make_row(repeat=3))  # a row without per-rank records: its epoch's shares
    path = write_rows(tmp_path / "r.jsonl", rows)
    frame, _ = load([path])
    assert list(frame["taken_share"]) == pytest.approx([0.02, 0.07, 0.01, 0.0])
    assert len(load([path], where="taken_share <= 0.05")[0]) == 3


# --- --where compares, never runs code -----------------------------------------------------------

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
    ("global_batch >= '128'", "compares global_batch, a number, with '128', text"),
    ("not " * 5000 + "devices > 1", "too deeply nested"),
])
def test_where_can_only_compare_columns_with_values(query, problem, tmp_path):
    rows_file = write_rows(tmp_path / "rows.jsonl", [make_row(status="failed", error="x")])
    marker = tmp_path / "pwned"
    done = xbench_here("report", rows_file, "--out", tmp_path / "out", "--where",
                       query.format(marker=marker))
    refused(done, problem)
    assert not marker.exists() and "root:" not in done.stdout + done.stderr
    ok = xbench_here("report", rows_file, "--out", tmp_path / "ok", "--format", "csv", "--where",
                     "backend in ['pt-single', 'pt-ddp'] and not devices > 1")
    assert ok.returncode == 0, ok.stderr


# --- text from the results cannot inject ---------------------------------------------------------

HOSTILE_KEY = "x\n```\n# Injected heading\n<img src=x onerror=alert(1)>"


def test_what_the_report_and_export_write_is_escaped_for_each_format(tmp_path):
    row = make_row(status="failed", error="![remote](http://evil.example/x.png) "
                                           "[link](javascript:alert(1))") | {
        "cell_key": HOSTILE_KEY, "backend": '=HYPERLINK("http://evil.example","click")',
        "model": "@SUM(1+1)*cmd|' /C calc'!A0"}
    results = write_rows(tmp_path / "hostile.jsonl", [row])
    done = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md,csv")
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "out" / "summary.md").read_text()
    assert "```" not in markdown and "<img" not in markdown
    assert "\n# Injected" not in markdown
    assert "![remote](" not in markdown and "[link](" not in markdown
    assert not any(line.startswith("#") and "Injected" in line for line in markdown.splitlines())
    cells = pd.read_csv(tmp_path / "out" / "cells.csv")
    assert cells["backend"][0].startswith("'=") and cells["model"][0].startswith("'@")
    export = xbench_here("export", results, tmp_path / "rows.csv")
    assert export.returncode == 0, export.stderr
    exported = pd.read_csv(tmp_path / "rows.csv")
    assert exported["backend"][0].startswith("'=") and exported["model"][0].startswith("'@")


# --- where it writes, and what a failed write leaves ---------------------------------------------

def test_a_report_into_a_folder_it_cannot_write_is_one_line(tmp_path):
    results = write_rows(tmp_path / "base.jsonl", [make_row(rates=(80, 100))])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused(xbench_here("report", results, "--out", blocker / "out"), "cannot write the report")
    refused(xbench_here("report", results, "--out", "/proc/xbench-report"),
            "cannot write the report")


@pytest.mark.parametrize("command, target", [
    (["export", "{base}", "{out}/rows.csv"], "rows.csv"),
    (["export", "{base}", "{out}/rows.parquet"], "rows.parquet"),
    (["report", "{base}", "--out", "{out}", "--format", "md,csv,png"], "summary.md")])
def test_a_file_size_limit_midway_is_one_line_and_no_half_written_file(tmp_path, command,
                                                                        target):
    """`ulimit -f 1`: a write beyond 1 KiB fails (EFBIG), as on a full disk. A process of its
    own, under the limit."""
    base = write_rows(tmp_path / "base.jsonl", [make_row(rates=(80, 100))])
    out = tmp_path / "out"
    out.mkdir()
    arguments = [a.format(base=base, out=out) for a in command]
    done = subprocess.run(["bash", "-c", 'ulimit -f 1; exec "$@"', "limited", *XBENCH,
                           *arguments], cwd=REPO, capture_output=True, text=True, timeout=SLOW)
    refused(done, "nothing half-written was left under its name")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    left = [p.name for p in out.iterdir()]
    assert target not in left and not [name for name in left if ".partial-" in name], left
    assert all(p.stat().st_size < 1024 for p in out.iterdir())  # what is there is whole


# --- readers open only regular files -------------------------------------------------------------

def test_a_fifo_among_the_results_is_skipped_not_read(tmp_path):
    """Processes of their own, each with a time limit: a reader that opened the pipe would wait
    for a writer forever."""
    folder = tmp_path / "results"
    folder.mkdir()
    write_rows(folder / "ok.jsonl", [make_row(rates=(80, 100))])
    os.mkfifo(folder / "zz-pipe.jsonl")
    os.utime(folder / "ok.jsonl", (1, 1))  # the pipe is the newest
    # the newest *.jsonl of results/, which is the pipe
    done = xbench("report", "--out", tmp_path / "out", "--format", "md", cwd=folder.parent,
                  timeout=60)
    assert done.returncode == 0, done.stderr
    dry = xbench("grid", "--preset", "smoke", "--results", folder / "new.jsonl", "--dry-run",
                 timeout=120)
    assert dry.returncode == 0, dry.stderr
    refused(xbench("report", folder / "zz-pipe.jsonl", timeout=60), "not a regular file")
