"""`xbench report`: what it is given (formats, --where, several environments, synthetic rows) and
what it makes of damaged or missing results files."""
import json
import os

import pandas as pd
import pytest

from tests.report_fixtures import known_rows, make_row, write_rows, xbench
from xbench.common.errors import UserError
from xbench.reports.build import build_report, parse_formats
from xbench.reports.load import load


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
