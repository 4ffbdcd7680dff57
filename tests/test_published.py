"""The model checked against the world: published scaling results through the same arithmetic
(`xbench predict --published [FILE]`), and what a measured overlap does to a prediction."""
import tomllib

import pytest

from tests.helpers import strict_json, xbench_here
from tests.report_fixtures import known_rows, write_rows
from xbench.reports import analysis
from xbench.reports.load import load
from xbench.reports.published import PUBLISHED_FILE, against_published


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
    assert len(records) >= 8
    publishers = {name.split("-")[0] for name in records}
    assert len(publishers) >= 3, publishers
    found = against_published()
    assert len(found) == len(records) and found["sources"].str.len().min() > 100
    assert (found["no_overlap"] <= found["predicted"] + 1e-12).all()
    assert (found["predicted"] <= found["full_overlap"] + 1e-12).all()


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
    assert found["no_overlap"] < 1.0 and found["full_overlap"] == pytest.approx(1.0)
    run = xbench_here("predict", write_rows(tmp_path / "r.jsonl", known_rows()), "--published",
                      path, "--json")
    assert run.returncode == 0, run.stderr
    mine = strict_json(run.stdout)["published"]["mine"]
    assert set(mine) >= {"published", "no_overlap", "full_overlap", "predicted", "hidden"}
    assert mine["published"] == 0.9
    assert mine["no_overlap"] <= mine["predicted"] <= mine["full_overlap"]


def test_published_prints_every_record_beside_three_predictions(tmp_path):
    run = xbench_here("predict", write_rows(tmp_path / "r.jsonl", known_rows()), "--published")
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("| NVIDIA DLE") >= 8 and "| Goyal et al. 2017" in run.stdout
    assert "| none hidden |" in run.stdout and "| predicted (its timeline) |" in run.stdout \
        and "| all hidden behind backward |" in run.stdout


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
