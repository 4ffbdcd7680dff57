"""`xbench grid --until-conclusive`: repeats added until the report's comparisons settle, or it
says why they cannot."""
import itertools
import json

from tests.helpers import MNIST_DIR, xbench, xbench_here
from tests.report_fixtures import hand_cell, make_row, write_rows
from xbench.common.results.store import read_rows
from xbench.reports.judging.comparisons import judged
from xbench.reports.judging.settle import settle
from xbench.reports.judging.verdict import finding_lines
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load


def test_until_conclusive_adds_repeats_until_settled_or_says_why_not(tmp_path):
    """pt-ddp on 1 and 2 devices, 2 repeats, then repeats until the comparison is settled or
    the budget is spent: every run it added is one more repeat of a cell of an open comparison,
    and it ends saying which. Half a minute: room for a round of both cells (a few seconds
    each), and the loop's time is the budget's (a minute took half the test's time)."""
    results = tmp_path / "r.jsonl"
    done = xbench("grid", "--preset", "smoke", "--backend", "pt-ddp", "--devices", "1,2",
                  "--repeat", "2", "--max-train-samples", "512", "--data-dir", MNIST_DIR,
                  "--results", results, "--until-conclusive", "--budget", "0.5")
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
        report = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md")
        line = next(l for l in report.stdout.splitlines() if "pt-ddp on 2 devices: speedup" in l)
        assert "pays off" in line or "does not pay off" in line, line


def until_conclusive(tmp_path, rates, budget_minutes, added_rates):
    """`xbench grid --until-conclusive`'s loop on hand-made runs of pt-ddp on 1 and 2 devices
    (`rates`: each cell's last-epoch rate per repeat); every repeat it asks for runs at the next
    of its cell's `added_rates`. (the rows it added, what it said)."""
    cells = [hand_cell(devices=devices) for devices in (1, 2)]
    results = write_rows(tmp_path / "r.jsonl", [  # the grid's own repeats: the first look
        make_row(devices=cell.devices, rates=(80.0, rate), repeat=repeat, look=1)
        for cell in cells for repeat, rate in enumerate(rates[cell.devices])])
    pending = {devices: iter(added) for devices, added in added_rates.items()}
    said = []

    def run(more):
        rows = [make_row(devices=c.devices, rates=(80.0, next(pending[c.devices])),
                         repeat=c.repeat, look=c.look) for c in more]
        with open(results, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        return rows
    return (settle(cells, results, budget_minutes, lambda text, **_: said.append(text), run),
            "\n".join(said))


def test_until_conclusive_adds_repeats_of_the_open_comparison_until_it_settles(tmp_path):
    """Two repeats a side leave it open at the plan's first look (1 device 90 and 110, 2 devices
    130 and 170 samples/s); every added repeat runs at 100 and 150: a few pairs settle it, each
    pair the next repeat of both cells, and the report's verdict is then stated."""
    added, said = until_conclusive(tmp_path, {1: (90.0, 110.0), 2: (130.0, 170.0)},
                                   60, {1: itertools.repeat(100.0), 2: itertools.repeat(150.0)})
    pairs = len(added) // 2
    assert added and len(added) == 2 * pairs
    assert [(r["devices"], r["repeat"]) for r in added] == [
        (devices, repeat) for repeat in range(2, 2 + pairs) for devices in (1, 2)]
    assert [r["look"] for r in added] == [look for look in range(2, 2 + pairs) for _ in (1, 2)]
    assert said.count(" of at most 10, one more repeat of") == pairs
    assert said.endswith(f"until conclusive: {len(added)} run(s) added; every comparison of the "
                         f"grid's cells is settled")
    frame, _ = load([tmp_path / "r.jsonl"])
    families, _ = judged(analysis.cell_table(frame))
    lines = [line for family in families for verdict in family.verdicts
             for line in finding_lines(verdict)]
    assert any("pt-ddp on 2 devices: speedup" in line and line.endswith(
        f"pays off (after {pairs + 1} looks of --until-conclusive, tested at 5% / 10)")
        for line in lines), lines


def test_until_conclusive_stops_at_its_budget_and_says_what_is_open(tmp_path):
    added, said = until_conclusive(tmp_path, {1: (90.0, 110.0), 2: (130.0, 170.0)},
                                   0, {1: [], 2: []})
    assert added == [] and "the budget of 0 min is spent" in said
    assert "0 run(s) added; " in said and " still open: " in said
    assert "|d1|" in said and "|d2|" in said and "repeats a side would settle it" in said


def test_until_conclusive_runs_nothing_where_repeats_cannot_settle_it(tmp_path):
    """The same rates on both sides: no number of repeats shows a difference."""
    added, said = until_conclusive(tmp_path, {1: (100.0, 120.0), 2: (100.0, 120.0)},
                                   60, {1: [], 2: []})
    assert added == [] and "0 run(s) added; " in said and " still open: " in said
    assert "within the noise: more repeats are unlikely to settle it" in said


def test_every_cell_without_an_uncontended_run_gets_its_repeat(tmp_path):
    """Two cells whose runs were all contended; the 1-device cell's repeats stay contended, the
    2-device cell's first added one is not: each gets one more repeat a round, so the second is
    measured in the first round, not after the first has spent its looks."""
    cells = [hand_cell(devices=devices) for devices in (1, 2)]
    results = write_rows(tmp_path / "r.jsonl", [
        make_row(devices=cell.devices, repeat=repeat, contended=True)
        for cell in cells for repeat in (0, 1)])
    added = []

    def run(more):
        rows = [make_row(devices=c.devices, repeat=c.repeat, contended=c.devices == 1,
                         look=c.look) for c in more]
        with open(results, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        added.extend(rows)
        return rows
    settle(cells, results, 60, lambda text, **_: None, run)
    assert [(r["devices"], r["repeat"]) for r in added[:2]] == [(1, 2), (2, 2)]
    # its looks run out at 10 (the sequential plan), before its 50 repeats
    assert [r["repeat"] for r in added if r["devices"] == 1] == list(range(2, 12))
