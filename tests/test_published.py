"""The model checked against the world: published scaling results through the same arithmetic
(`xbench predict --published [FILE]`), and what a measured overlap does to a prediction."""
import json
import os
import tomllib

import pandas as pd
import pytest

from tests.helpers import refused, strict_json, xbench_here
from tests.report_fixtures import known_rows, write_rows
from xbench.common.errors import UserError
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load
from xbench.reports.step_model.published import (
    PUBLISHED_FILE,
    achieved_links,
    against_published,
    published_summary,
)
from xbench.reports.step_model.record_step import SHARING
from xbench.reports.step_model.skill import MODEL
from xbench.reports.step_model.step import expected_largest


def test_collectives_launched_after_backward_hide_nothing(tmp_path):
    """The hand-made rows' all-reduce starts when every rank's compute is done: nothing of it
    overlaps compute, and the step waits for all of it (hidden share 0)."""
    frame, _ = load([write_rows(tmp_path / "r.jsonl", known_rows())])
    cells = analysis.cell_table(frame)
    attributed = analysis.attribution(cells)
    many = attributed[attributed["devices"] > 1]
    assert len(many) and (many["overlap_share"] == 0).all()
    assert many["hidden_share"].to_numpy() == pytest.approx(0.0, abs=1e-12)


def test_the_shipped_records_come_from_several_publications():
    records = tomllib.loads(PUBLISHED_FILE.read_text())
    assert len(records) >= 30
    publishers = {name.split("-")[0] for name in records}
    assert len(publishers) >= 5, publishers
    found = against_published()
    assert len(found) == len(records) and found["sources"].str.len().min() > 300
    assert found["sources"].str.lower().str.contains("assumed").all()
    assert (found["no_overlap"] <= found["predicted"] + 1e-12).all()
    assert (found["predicted"] <= found["full_overlap"] + 1e-12).all()
    summary = published_summary(found)
    assert summary["records"] == len(records) and summary["publishers"] >= 5


RECORD = """[hand]
title = "by hand"
backend = "pt-ddp"
per_device_rate = 100
per_device_batch = 50
parameters = 25e6
devices = 8
nodes = 2
link = "nvlink3"
node_link = "100gbps,5us"
efficiency = 0.9
baseline_devices = 8
gradient_bytes_per_parameter = 4
sources = "by hand"
"""


def test_an_achieved_link_rate_replaces_the_data_sheets(tmp_path):
    """nvlink3 at NVIDIA's published busbw, 230 GB/s, not 300: 100 MB in one bucket over 8 GPUs,
    then 2 nodes at 100 GB/s with 5 us a ring step."""
    assert achieved_links()["nvlink3"].rate == 230e9
    path = tmp_path / "hand.toml"
    path.write_text(RECORD.replace("sources", "bucket_bytes = 100e6\nsources"))
    found = against_published(path).iloc[0]
    within = 2 * (7 / 8 * 100e6 / 230e9 + 7 * 3e-6)
    between = 2 * (1 / 2 * 100e6 / 100e9 + 5e-6)
    assert found["moving"] == pytest.approx(within + between)
    assert found["no_overlap"] == pytest.approx((0.5 + within) / (0.5 + within + between))
    assert found["terms"] == f"achieved nvlink3, sharing x{SHARING.factor:g}"
    # all hidden behind backward, each hidden second of it slowing compute by the cited factor
    slowed = 1 - 1 / SHARING.factor
    assert found["full_overlap"] == pytest.approx(
        (0.5 + slowed * within) / (0.5 + slowed * (within + between)))


def test_accumulation_runs_the_collective_once_per_micro_batches(tmp_path):
    """4 micro-batches of 0.5 s per all-reduce at 2 nodes, 8 at the baseline node; one bucket
    (bucket_bytes): one message a pass. Hidden behind the last micro-batch's backward only."""
    path = tmp_path / "hand.toml"
    path.write_text(RECORD.replace('link = "nvlink3"', 'link = "200gbps,3us"').replace(
        "sources", "accumulation = 4\nbaseline_accumulation = 8\nbucket_bytes = 100e6\n"
                   "sharing_factor = 1.0\nsources"))
    found = against_published(path).iloc[0]
    within = 2 * (7 / 8 * 100e6 / 200e9 + 7 * 3e-6)
    between = 2 * (1 / 2 * 100e6 / 100e9 + 5e-6)
    per_sample_baseline = (8 * 0.5 + within) / 8
    per_sample = (4 * 0.5 + within + between) / 4
    assert found["compute"] == pytest.approx(2.0)
    assert found["terms"] == "accumulation 4 (8 at the baseline)"
    assert found["no_overlap"] == pytest.approx(per_sample_baseline / per_sample)
    assert found["full_overlap"] == pytest.approx(1.0)  # 2/3 of one micro-batch hides them all
    # one bucket, ready when backward ends: its timeline hides none of it
    assert found["predicted"] == pytest.approx(found["no_overlap"]) and found["hidden"] == 0


def test_the_optimizer_is_paid_once_per_update_and_stragglers_by_their_spread(tmp_path):
    """LAMB's 36 bytes a parameter at 1 TB/s: 25e6 parameters, 0.9 ms an update, once per 4
    micro-batches at 2 nodes and once per 8 at the baseline; a 10% spread of the step costs
    the expected largest of 16 draws of it, of 1 at the baseline (none)."""
    path = tmp_path / "hand.toml"
    path.write_text(RECORD.replace("sources", "accumulation = 4\nbaseline_accumulation = 8\n"
                                   "bucket_bytes = 100e6\nsharing_factor = 1.0\n"
                                   "collectives_after_backward = true\noptimizer = \"lamb\"\n"
                                   "memory_bandwidth = 1e12\nstep_spread = 0.1\nsources"))
    found = against_published(path).iloc[0]
    update = 36 * 25e6 / 1e12
    micro = (8 * 0.5 - update) / 8  # the published rate holds 8 micro-batches and one update
    within = 2 * (7 / 8 * 100e6 / 230e9 + 7 * 3e-6)
    between = 2 * (1 / 2 * 100e6 / 100e9 + 5e-6)
    base = (8 * micro + update + within + 8 * micro * 0.1 * expected_largest(8)) / 8
    scaled = (4 * micro + update + within + between
              + 4 * micro * 0.1 * expected_largest(16)) / 4
    assert found["no_overlap"] == pytest.approx(base / scaled)
    assert found["predicted"] == pytest.approx(found["no_overlap"])  # after backward: none hidden
    values = found["term_values"]
    assert values["optimizer"]["seconds"] == pytest.approx(update)
    assert values["accumulation"]["after_backward"] and values["stragglers"]["spread"] == 0.1
    assert "optimizer lamb 0.9 ms" in found["terms"] and "stragglers 10% spread" in found["terms"]


def test_the_summary_scores_the_model_against_trivial_predictors():
    """Three records by hand, all discriminating (bounds 10 points apart or more): the model's
    errors 1, 2 and 10 points, the first two bracketed; its skill against the best trivial
    predictor, whose name it gives."""
    record = pd.DataFrame({"name": ["a-1", "b-1", "c-1"], "published": [0.90, 0.80, 0.70],
                           "no_overlap": [0.80, 0.78, 0.80], "full_overlap": [0.95, 0.9, 0.9],
                           "predicted": [0.91, 0.82, 0.80]})
    summary = published_summary(record)
    telling = summary["scores"]["discriminating"]
    assert summary["discriminating"] == telling["records"] == 3
    assert telling["predictors"][MODEL]["median_points"] == pytest.approx(2.0)
    assert telling["bracketed_share"] == pytest.approx(2 / 3)
    # the published median of the other two: 0.75, 0.80, 0.85; errors 15, 0, 15 points
    loo = telling["predictors"]["the published median, leave-one-out"]
    assert loo["median_points"] == pytest.approx(15.0)
    best = telling["best_trivial"]
    assert telling["skill"]["median_points"] == pytest.approx(
        1 - 2.0 / telling["predictors"][best]["median_points"])
    assert summary["below_no_overlap"] == 1 and summary["publishers"] == 3
    assert not summary["error_goal_met"] and not summary["bracket_goal_met"]  # 3 < 30 records


@pytest.mark.parametrize("change, message", [
    (("per_device_rate = 100\n", ""), "published record [hand]: no per_device_rate"),
    (('link = "nvlink3"', 'link = "nvlink9"'),
     "published record [hand]: link 'nvlink9' is neither"),
    (('backend = "pt-ddp"', 'backend = "mpi"'), "published record [hand]: unknown backend 'mpi'")])
def test_a_bad_record_is_one_user_error_naming_it(change, message, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(RECORD.replace(*change))
    with pytest.raises(UserError) as raised:
        against_published(path)
    assert message in str(raised.value)


BAD_RECORDS = [  # (what replaces what in RECORD, the field the one-line refusal names)
    *[(("per_device_rate = 100", f"per_device_rate = {v}"), "per_device_rate")
      for v in ("0", "-100", "inf", "nan", '"100"', "1e-320")],
    # a batch of 50 in under 1 µs: the model put its efficiency at 1e-297 beside 0.9659
    (("per_device_rate = 100", "per_device_rate = 1e308"),
     "per_device_rate = 1e+308: a step of 50 samples in 5e-307 s, under 1 µs"),
    *[(("gradient_bytes_per_parameter = 4", f"gradient_bytes_per_parameter = {v}"),
       "gradient_bytes_per_parameter") for v in ('"four"', "16", "1e300")],
    *[(('sources = "by hand"', f'sources = "{v}"'), f"sources = {v!r} is empty")
      for v in ("", "  ")],
    (('title = "by hand"', 'title = ""'), "title = '' is empty"),
    *[(("baseline_devices = 8", f"baseline_devices = {v}"), "baseline_devices")
      for v in ('"x"', "0", "16")],
    *[(("devices = 8", f"devices = {v}"), "devices") for v in ("0", "-2", "2.5", "100000")],
    (("nodes = 2", "nodes = 0"), "nodes"),
    *[(("parameters = 25e6", f"parameters = {v}"), "parameters")
      for v in ("0", "-1", "1e300", "1e308")],
    *[(("efficiency = 0.9", f"efficiency = {v}"), "efficiency") for v in ("2.0", "-0.5", "nan")],
    (("per_device_batch = 50", "per_device_batch = 0"), "per_device_batch"),
    (("accumulation = 2", "accumulation = 0"), "accumulation"),
    (('backend = "pt-ddp"', 'backend = "pt-single"'),
     "devices = 8, nodes = 2 on backend pt-single"),
    (('backend = "pt-ddp"', 'backend = "pt-dp"'), "nodes = 2 on backend pt-dp"),
    (('backend = "pt-ddp"', 'backend = ["pt-ddp"]'), "backend"),
    (('link = "nvlink3"', 'link = 3'), "link"),
    (("accumulation = 2", 'accumulation = 2\noptimizer = "rmsprop"'), "optimizer"),
    (("accumulation = 2", 'accumulation = 2\noptimizer = "adam"'), "optimizer"),  # no bandwidth
    (("accumulation = 2", "accumulation = 2\nstep_spread = 2"), "step_spread"),
    (("accumulation = 2", "accumulation = 2\nsharing_factor = 0.5"), "sharing_factor"),
    (("accumulation = 2", 'accumulation = 2\ncollectives_after_backward = "yes"'),
     "collectives_after_backward"),
]


@pytest.mark.parametrize("change, field", BAD_RECORDS)
def test_a_bad_record_is_refused_as_the_grid_refuses_a_cell(change, field, tmp_path):
    """Each record is checked as a cell is (types, finite numbers, the grid's own ranges, the
    backend's reach) before anything is read or modelled: one line naming the file, the record
    and the field, exit 2."""
    path = tmp_path / "bad.toml"
    text = RECORD.replace("sources", "accumulation = 2\nsources")
    assert change[0] in text
    path.write_text(text.replace(*change, 1))
    done = xbench_here("predict", "--published", path)
    refused(done, f"{path}: published record [hand]: {field}")
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder", "large"])
def test_a_published_file_is_read_only_from_a_regular_file_of_a_bounded_size(kind, tmp_path):
    """A FIFO would never end, /dev/zero never stop: refused before a byte is read, as results
    files are; a regular file larger than the records could be is refused unread too."""
    path = tmp_path / "records.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "large":
        path.write_text(RECORD + "#" * (16 * 2**20))
    else:
        path = kind
    done = xbench_here("predict", "--published", path)
    refused(done, f"{path}: larger than 16 MiB" if kind == "large"
            else f"{path} is not a regular file")


def test_a_users_own_records_with_links_given_as_rate_and_latency(tmp_path):
    """Records of one's own, links as RATE,LATENCY, efficiency against 8 devices on a node."""
    path = tmp_path / "mine.toml"
    path.write_text("""[mine]
title = "my cluster"
backend = "pt-ddp"
per_device_rate = 100
per_device_batch = 50
parameters = 25e6
devices = 8
nodes = 4
link = "100gbps,3us"
node_link = "100gbit,10us"
efficiency = 0.9
baseline_devices = 8
gradient_bytes_per_parameter = 2
sources = "measured by hand"
""")
    found = against_published(path).iloc[0]
    assert found["devices"] == 32 and found["baseline"] == 8
    assert found["no_overlap"] < found["full_overlap"] < 1.0  # compute slowed beside collectives
    run = xbench_here("predict", write_rows(tmp_path / "r.jsonl", known_rows()), "--published",
                      path, "--json")
    assert run.returncode == 0, run.stderr
    mine = strict_json(run.stdout)["published"]["mine"]
    assert set(mine) >= {"published", "no_overlap", "full_overlap", "predicted", "hidden", "terms"}
    assert mine["terms"]["sharing"]["factor"] == SHARING.factor
    assert mine["published"] == 0.9
    assert mine["no_overlap"] <= mine["predicted"] <= mine["full_overlap"]


def test_published_prints_every_record_beside_three_predictions(tmp_path):
    run = xbench_here("predict", write_rows(tmp_path / "r.jsonl", known_rows()), "--published",
                      "--format", "md")
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("| NVIDIA DLE") >= 8 and "| Goyal et al. 2017" in run.stdout
    assert "| none hidden |" in run.stdout and "| predicted (its timeline) |" in run.stdout \
        and "| all hidden behind backward |" in run.stdout and "| terms |" in run.stdout


def test_the_published_check_alone_needs_no_results_of_this_machine(tmp_path):
    """Where no results file is named and results/ has none, `--published` checks the records
    alone; a prediction for a link still needs measured cells and says so."""
    done = xbench_here("predict", "--published", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = strict_json(done.stdout)
    assert set(data) == {"published", "published_scores"}
    assert data["published_scores"]["records"] == len(tomllib.loads(PUBLISHED_FILE.read_text()))
    shown = xbench_here("predict", "--published", "--format", "md", cwd=tmp_path)
    assert shown.returncode == 0 and "| none hidden |" in shown.stdout, shown.stderr
    linked = xbench_here("predict", "--published", "--link", "nvlink4", cwd=tmp_path)
    assert linked.returncode == 2 and "no results file" in linked.stderr


# A record's text that would act on a terminal or a Markdown page: the bell, an escape that
# recolours the screen, the right-to-left override, code, a table's bar, a script.
HOSTILE = "bell\x07 esc\x1b[31m rlo\u202e `code` a|b <script>alert(1)</script>"


@pytest.mark.parametrize("form", ["text", "md"])
def test_a_records_text_is_printable_on_a_terminal_and_inert_in_markdown(form, tmp_path):
    """Its title and sources reach the terminal with every control character as its escape,
    and a Markdown page as inert text (code, bars and HTML escaped), in its table and in its
    line of sources alike."""
    path = tmp_path / "mine.toml"
    path.write_text(RECORD.replace('"by hand"', json.dumps(HOSTILE)))
    run = xbench_here("predict", write_rows(tmp_path / "r.jsonl", known_rows()), "--published",
                      path, "--format", form)
    assert run.returncode == 0, run.stderr
    assert not {"\x07", "\x1b", "\u202e"} & set(run.stdout)
    assert "\\x07" in run.stdout and "\\u202e" in run.stdout
    if form == "md":
        assert "<script>" not in run.stdout and "&lt;script&gt;" in run.stdout
        assert "\\`code\\`" in run.stdout and "a\\|b" in run.stdout
        assert "`code`" not in run.stdout.replace("\\`", "")


@pytest.mark.parametrize("text, message", [
    ("[broken\n", "cannot read it as TOML"),
    ("[x]\ntitle = 'x'\n", "published record [x]: no backend"),
    ("""[x]
title = "x"
backend = "pt-ddp"
per_device_rate = 1
per_device_batch = 1
parameters = 1
devices = 2
nodes = 1
link = "0gbit"
efficiency = 1
sources = "x"
""", "published record [x]: link '0gbit': a link's rate must be above 0")])
def test_a_bad_published_file_is_one_line_and_exit_2(text, message, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    run = xbench_here("predict", write_rows(tmp_path / "r.jsonl", known_rows()), "--published",
                      path)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, \
        run.stderr
