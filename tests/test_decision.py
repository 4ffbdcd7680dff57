"""The decision table at the top of the report (reports.judging.decision) and SUSPECT ratios named
with their likely cause (reports.judging.suspect), on hand-made rows whose answers are known: no
training."""
from tests.helpers import strict_json, xbench_here
from tests.report_fixtures import make_row, repeated, write_rows
from xbench.reports.page.build import build_report
from xbench.reports.rendering.tables import shorten

CONCLUSIVE = [*repeated("pt-ddp", 1, (98, 100, 102)), *repeated("pt-ddp", 2, (188, 190, 192)),
              *repeated("tf-mirrored", 1, (150, 151, 152), framework="tensorflow",
                        reduction="none")]


def disturbed_rows():
    """pt-ddp's third 1-device run collapsed (20 samples/s; other processes took 8% of its cores
    in epoch 2, under the 10% limit): its 2 devices are 4.25x its 1 device, beyond 2; the best
    1-device cell is tf-mirrored, which pt-ddp's 2 devices do not beat (0.82x)."""
    rows = [*repeated("pt-ddp", 1, (100, 100, 20)), *repeated("pt-ddp", 2, (180, 182, 184)),
            *repeated("tf-mirrored", 1, (220, 222, 224), framework="tensorflow",
                      reduction="none")]
    rows[2]["epochs"][1]["contention"]["other_cpu_share"] = 0.08
    return rows


def summary_of(tmp_path, rows, **options) -> list[str]:
    return build_report([write_rows(tmp_path / "r.jsonl", rows)], tmp_path / "out",
                        formats=["md"], **options)[1]


def test_a_configuration_surely_ahead_is_the_one_to_use(tmp_path):
    summary = summary_of(tmp_path, CONCLUSIVE)
    assert summary[:5] == [
        "Decision:",
        "  small ×1 mnist, global batch 128, cpu, ranked by epoch-2 rate (samples/s):",
        "    1. pt-ddp on 2 devices: 190 [185, 195] samples/s; place sure",
        "    2. tf-mirrored on 1 device: 151 [149, 154] samples/s; place sure",
        "    3. pt-ddp on 1 device: 100 [95, 105] samples/s; place sure"]
    assert summary[5].startswith("    → use pt-ddp on 2 devices: surely faster than the next, "
                                 "tf-mirrored on 1 device (1.26× [")


def test_configurations_within_each_other_s_intervals_say_what_would_settle_them(tmp_path):
    """pt-single at 110 [104, 117] and pt-ddp at 104 [97, 111]: 9 repeats a side would settle
    it (reports.numbers.stats.repeats_to_settle), 6 more than the 3 they have."""
    rows = [*repeated("pt-ddp", 1, (100, 104, 108)), *repeated("pt-single", 1, (106, 110, 114))]
    summary = summary_of(tmp_path, rows)
    assert [line.split(":")[0] for line in summary[2:4]] == ["    1. pt-single on 1 device",
                                                             "    2. pt-ddp on 1 device"]
    assert summary[2].endswith("place not sure") and summary[3].endswith("place not sure")
    assert summary[4].startswith("    → no configuration is surely best: these 2 are within "
                                 "each other's intervals (pt-single on 1 device, pt-ddp on 1 "
                                 "device; the first two: 1.06× [")
    assert summary[4].endswith("); 6 more repeats a side would settle it")


def test_report_json_holds_the_decision_first(tmp_path):
    results = write_rows(tmp_path / "r.jsonl", CONCLUSIVE)
    done = xbench_here("report", results, "--out", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    report = strict_json(done.stdout)
    assert list(report)[:3] == ["meta", "notices", "decision"]
    (decided,) = report["decision"]
    assert decided["ranked_by"] == "epoch-2 rate (samples/s)"
    assert [c["name"] for c in decided["choices"]] == [
        "pt-ddp on 2 devices", "tf-mirrored on 1 device", "pt-ddp on 1 device"]
    assert all(c["sure"] for c in decided["choices"])
    assert decided["best"]["cell_key"] == decided["choices"][0]["cell_key"]
    assert decided["ratio"]["has_interval"] and decided["ratio"]["low"] > 1
    assert decided["sentence"].startswith("use pt-ddp on 2 devices")
    assert decided["contended"] == 0 and decided["suspect"] == [] and decided["left_out"] is None
    assert done.stderr.startswith("Decision:\n  small ×1 mnist, global batch 128, cpu, ranked by "
                                  "epoch-2 rate")


def test_an_impossible_ratio_is_suspect_with_its_disturbed_baseline(tmp_path):
    """No line contradicts itself: the 0.82x of pt-ddp's 2 devices against tf-mirrored is
    SUSPECT because pt-ddp's own speedup (4.25x) is beyond 2 devices, and says so; the cause
    named is pt-ddp's collapsed 1-device run and what took its cores. The decision leaves out
    that run only, not both sides: pt-ddp on 1 device is ranked on its other runs, and its clean
    2-device cell stays."""
    summary = summary_of(tmp_path, disturbed_rows())
    text = "\n".join(summary)
    cause = ("likely a disturbed baseline: pt-ddp on 1 device, its slowest run (repeat 2) at 20 "
             "samples/s against 100–100 in its other runs; what took its cores in that run's "
             "epoch 2: other processes 8% (limit 10%)")
    best = next(line for line in summary if "2 devices at best (pt-ddp)" in line)
    assert best.startswith("    2 devices at best (pt-ddp) vs 1 device at best (tf-mirrored): "
                           "0.82× [")
    assert ("SUSPECT, not taken as a result: pt-ddp on 2 devices ran 4.25× [" in best
            and "the rate of pt-ddp on 1 device, beyond the 2× 2 devices can give; "
            + cause in best)
    assert "efficiency above 100%" not in text and "inconclusive" not in best
    speedup = next(line for line in summary if "pt-ddp on 2 devices: speedup" in line)
    assert "efficiency SUSPECT (212%, above 100%), not taken as a result: " + cause in speedup
    assert summary[2:7] == [
        "    1. tf-mirrored on 1 device: 222 [217, 227] samples/s; place sure",
        "    2. pt-ddp on 2 devices: 182 [177, 187] samples/s; place sure",
        "    3. pt-ddp on 1 device: 100 [100, 100] samples/s; place sure",
        "    → use tf-mirrored on 1 device: surely faster than the next, pt-ddp on 2 devices "
        "(1.22× [1.19, 1.25])",
        "    left out: what makes a ratio SUSPECT (run 2 of pt-ddp on 1 device: see the "
        "verdicts)"]


def test_a_lone_usable_configuration_is_the_only_one_never_sure(tmp_path):
    """One configuration with usable runs has no neighbour to be apart from: its place is "the
    only usable one", in the terminal and in the JSON."""
    results = write_rows(tmp_path / "r.jsonl", [
        make_row(backend="tf-mirrored", framework="tensorflow", rates=(80.0, rate), repeat=repeat)
        for repeat, rate in enumerate((220.0, 222.0, 224.0))])
    done = xbench_here("report", results, "--out", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[2].startswith("    1. tf-mirrored on 1 device: 222 [")
    assert lines[2].endswith("samples/s; place the only usable one")
    assert lines[3] == ("    → only tf-mirrored on 1 device has usable runs: nothing to rank it "
                        "against")
    (decided,) = strict_json(done.stdout)["decision"]
    assert [c["sure"] for c in decided["choices"]] == [False] and decided["best"] is None


def test_a_wrapper_faster_than_no_wrapper_beyond_its_interval_is_suspect(tmp_path):
    rows = [*repeated("pt-single", 1, (100, 101, 102)), *repeated("pt-ddp", 1, (200, 202, 204))]
    line = next(line for line in summary_of(tmp_path, rows) if "the rate of pt-single" in line)
    assert line.startswith("    pt-ddp at 1 device: 2.00× [")
    assert ("(no parallel wrapper): SUSPECT (its interval wholly above 1×: a wrapper adds "
            "work, it cannot be faster than none), not taken as a result: likely a disturbed "
            "baseline: pt-single on 1 device, its slowest run (repeat 0) at 100 samples/s "
            "against 101–102 in its other runs; nothing was recorded taking its cores") in line


def test_the_page_shows_the_decision_first(tmp_path):
    _, _, written = build_report([write_rows(tmp_path / "r.jsonl", CONCLUSIVE)],
                                 tmp_path / "out", formats=["html", "md"])
    html = written["html"].read_text()
    assert html.index('<h2 id="decision">') < html.index('<h2 id="verdicts">') < html.index(
        "<figure")
    assert "<strong>use pt-ddp on 2 devices: surely faster than the next" in html
    md = written["md"].read_text()
    assert md.index("## The decision") < md.index("## What the results say")
    assert r"| 1 | pt-ddp on 2 devices | 190 \[185, 195\] | 3 | sure |" in md


def test_contended_runs_are_counted_where_nothing_ranks(tmp_path):
    rows = repeated("pt-ddp", 1, (98, 100, 102), contended=True)
    summary = summary_of(tmp_path, rows)
    assert summary[1:4] == [
        "  small ×1 mnist, global batch 128, cpu, ranked by epoch-2 rate (samples/s):",
        "    → no configuration to rank: every run was left out (below)",
        "    left out: 3 contended run(s) (--include-contended uses them)"]
    assert "1. pt-ddp on 1 device" in "\n".join(summary_of(tmp_path, rows,
                                                           include_contended=True))


def test_contended_runs_included_are_marked_on_the_decision_and_in_the_banner_above_it(
        tmp_path):
    """With --include-contended the decision's table, its lines and the notice at the top say
    which configurations rest on contended runs, and how many of their runs; without it,
    nothing is marked."""
    rows = [*repeated("pt-ddp", 1, (98, 100, 102)), *repeated("pt-ddp", 2, (188, 190, 192))]
    rows[4]["contended"] = True  # pt-ddp on 2 devices, run 1
    notices, summary, written = build_report(
        [write_rows(tmp_path / "r.jsonl", rows)], tmp_path / "out", formats=["html", "md"],
        include_contended=True)
    assert "    1. pt-ddp on 2 devices: 190 [185, 195] samples/s; place sure; 1 of 3 runs " \
           "contended (included)" in summary
    assert "    2. pt-ddp on 1 device: 100 [95, 105] samples/s; place sure" in summary
    [banner] = [n for n in notices if n.startswith("CONTENDED RUNS INCLUDED")]
    assert "1 run(s) of 1 cell(s)" in banner and f"{rows[4]['cell_key']} (run 1)" in banner
    html = written["html"].read_text()
    assert html.index(banner.split(":")[0]) < html.index('<h2 id="decision">')
    assert "<th>contended runs (included)</th>" in html and "⚠ 1 of 3 runs contended" in html
    md = written["md"].read_text()
    assert r"| 1 | pt-ddp on 2 devices | 190 \[185, 195\] | 3 | sure | ⚠ 1 of 3 runs contended |" \
        in md
    plain, plain_summary, _ = build_report([tmp_path / "r.jsonl"], tmp_path / "plain",
                                           formats=["md"])
    assert not any("CONTENDED RUNS INCLUDED" in n for n in plain)
    assert not any("contended (included)" in line for line in plain_summary)


def test_the_printed_summary_never_cuts_a_decisions_sentence():
    """Each setup's ranking longer than the printed summary shows is cut with how many were left
    for summary.md; its heading, sentence and what it left out are always there, under it."""
    def setup(name):
        return [f"  {name}, cpu:",
                *[f"    {i}. pt-ddp on {i} devices: 100 samples/s; place not sure"
                  for i in range(1, 13)],
                f"    → no configuration of {name} is surely best", "    left out: 3 runs"]
    first, second = setup("small"), setup("large")
    assert shorten(["Decision:", *first, *second, "23 rows"]) == [
        "Decision:", *first[:11], "  ... 2 more (see summary.md)", *first[-2:],
        *second[:11], "  ... 2 more (see summary.md)", *second[-2:], "23 rows"]
