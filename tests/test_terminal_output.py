"""What predict, compare, the grid's table and the report's summary print on a terminal: aligned
text within its width (COLUMNS 80 and 200) by default, Markdown only with `--format md`, no
Markdown escapes in terminal text, and no word cut (real CLI runs on recorded and hand-made
rows)."""
import pytest

from tests.helpers import REPO, xbench_here
from tests.report_fixtures import as_contended, known_rows, make_row, write_rows
from xbench.common.backends.traits import TRAITS
from xbench.common.grids.table import format_rows
from xbench.common.results.store import read_rows

RECORDED = REPO / "tests" / "data" / "repeats.jsonl"  # pt-single and pt-ddp, 3 runs each
WIDTHS = (80, 200)


@pytest.fixture
def contended(tmp_path):
    """The recorded rows, every run contended (tests.report_fixtures.as_contended)."""
    return write_rows(tmp_path / "contended.jsonl", as_contended(read_rows(RECORDED)[0]))


def within(text: str, columns: int) -> None:
    assert text.strip() and "\\_" not in text and "|---|" not in text, text
    too_long = [line for line in text.splitlines() if len(line) > columns]
    assert not too_long, too_long


@pytest.mark.parametrize("columns", WIDTHS)
def test_compare_prints_an_aligned_table_within_the_terminal(contended, columns):
    done = xbench_here("compare", contended, contended, env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    within(done.stdout, columns)
    words = done.stdout.split()
    assert {"pt-single", "pt-ddp", "inconclusive", "(contended)"} <= set(words), done.stdout
    if columns == 200:  # room for every row on one line
        assert [line.split()[0] for line in done.stdout.splitlines()[2:]] == ["pt-single",
                                                                            "pt-ddp"]


def test_compare_prints_markdown_with_format_md(contended):
    done = xbench_here("compare", contended, contended, "--format", "md", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| backend | model |") and lines[1].startswith("|---|")
    assert "| inconclusive (contended) |" in done.stdout


@pytest.mark.parametrize("columns", WIDTHS)
def test_predict_prints_text_within_the_terminal(tmp_path, columns):
    """Hand-made rows of a model file (its name has an underscore Markdown would escape), with
    the published records: their long titles and sources too."""
    rows = [{**row, "model": "/home/someone/models/mlp_mnist.py@0123456789ab"}
            for row in known_rows()]
    results = write_rows(tmp_path / "r.jsonl", rows)
    done = xbench_here("predict", results, "--link", "ib-ndr", "--devices", "1,8",
                       "--published", env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    within(done.stdout, columns)
    assert "mlp_mnist.py@01234567" in done.stdout and "/home/someone" not in done.stdout
    assert "Predicted, not measured" in done.stdout and "Goyal et al. 2017" in done.stdout
    markdown = xbench_here("predict", results, "--link", "ib-ndr", "--devices", "1,8",
                           "--format", "md", env={"COLUMNS": str(columns)})
    assert markdown.returncode == 0, markdown.stderr
    assert "| A | pt-ddp | /home/someone/models/mlp\\_mnist.py@0123456789ab |" in markdown.stdout


@pytest.mark.parametrize("columns", WIDTHS)
def test_the_grids_table_of_recorded_rows_flags_each_contended_row(columns):
    rows = as_contended(read_rows(RECORDED)[0])
    text = format_rows(rows, columns)
    within(text, columns)
    assert "\n6 of 6 rows contended (other work took their cores)" in text
    assert text.split().count("yes") == 6  # the contended column, or each row's block


def test_a_long_reason_in_the_reports_summary_is_cut_between_words(tmp_path):
    """The unsupported pt-dp cell's reason (from its traits) behind a long cell key: the summary's
    line keeps whole words, and says it was cut."""
    reason = (f"unsupported: pt-dp with 2 devices on cpu: "
              f"{TRAITS['pt-dp'].several_devices_need_gpus}; {'and more words ' * 8}")
    results = write_rows(tmp_path / "r.jsonl", [
        *known_rows()[:3], make_row(backend="pt-dp", devices=2, status="unsupported",
                                    error=reason)])
    done = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if "pt-dp" in line and " r0: " in line]
    said = line.split(": unsupported: ", 1)[1]
    kept = said.removesuffix(" …")
    assert said.endswith(" …") and reason.startswith(kept), line
    assert reason[len(kept)] == " " and "CPU mode" in kept  # the cut fell between words


@pytest.mark.parametrize("columns", WIDTHS)
def test_backends_say_what_each_is_needs_and_cannot_do_here_within_the_width(columns):
    """Every backend's lines come from its traits: its framework and wrapper, what it needs and
    whether it is installed, what the run would refuse of it here (this CPU: pt-dp's several
    devices on GPUs only), within the terminal's width; -v adds the reasons."""
    from xbench.common.backends.start import Start
    done = xbench_here("backends", env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    within(done.stdout, columns)
    flat = " ".join(done.stdout.split())
    for name, traits in TRAITS.items():
        assert f"{name} {Start.of(name).what()}" in flat
        assert f"needs {', '.join(traits.requires)}: installed" in flat
    assert "more than 1 device (GPUs only)" in flat.split("pt-dp ")[1].split("pt-ddp ")[0]
    assert "No backend can do here (CPU): precision tf32: TF32 is a math mode" in flat
    reasons = " ".join(xbench_here("-v", "backends", env={"COLUMNS": str(columns)}).stdout.split())
    assert TRAITS["pt-dp"].several_devices_need_gpus in reasons


def test_backends_json_has_the_same_fields():
    from tests.helpers import strict_json
    found = {b["backend"]: b for b in strict_json(xbench_here("backends", "--json").stdout)}
    assert set(found) == set(TRAITS)
    for name, traits in TRAITS.items():
        listed = found[name]
        assert listed["wrapper"] == traits.wrapper and listed["device_kind"] == "cpu"
        assert listed["install_hint"] == (traits.install_hint or traits.framework.install_hint)
        cannot = {c["what"]: c for c in listed["cannot"]}
        assert ("more than 1 device" in cannot) == (not traits.spans_devices
                                                    or bool(traits.several_devices_need_gpus))
        if traits.spans_devices and not traits.bucket_knob:
            assert traits.no_buckets in cannot["bucket_mb"]["why"]
        if traits.spans_devices:
            assert all(f"compression {c}" not in cannot for c in traits.compressions
                       if c not in traits.gpu_only)
        assert ("model files" in cannot) == bool(traits.own_models_only)
        # a capped link crosses between processes: on 2 devices, where a library joins them
        assert ("inject link" in cannot) == (traits.spans_devices and not traits.library)
    assert found["pt-dp"]["cannot"][0] == {
        "what": "more than 1 device", "on_gpus": True,
        "why": f"pt-dp with 2 devices needs 2 CUDA GPUs; "
               f"{TRAITS['pt-dp'].several_devices_need_gpus}"}
    assert found["pt-ddp"]["cannot"] == [{"what": "compression powersgd", "on_gpus": True,
                                          "why": TRAITS["pt-ddp"].gpu_only["powersgd"]},
                                         {"what": "precision tf32", "on_gpus": True,
                                          "why": found["pt-single"]["cannot"][-1]["why"]}]
