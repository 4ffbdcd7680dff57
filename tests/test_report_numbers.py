"""`xbench report`: the numbers of hand-made rows whose answers are known (intervals, speedups,
the step's parts, bus bandwidth, MFU), and the verdicts they allow."""
import math

import pandas as pd
import pytest

from tests.helpers import strict_json, xbench_here
from tests.report_fixtures import (
    SAMPLES,
    harmonic,
    known_rows,
    make_row,
    repeated,
    write_rows,
)
from xbench.common.measuring.peaks import bus_bandwidth
from xbench.common.workload.models import MODELS
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load
from xbench.reports.numbers.stats import summarize
from xbench.reports.page.build import build_report
from xbench.reports.step_model.utilisation import against_limits


def test_ci_for_three_repeats_uses_students_t():
    stats = summarize([100.0, 110.0, 120.0])
    assert stats["n"] == 3 and stats["mean"] == pytest.approx(110.0)
    assert stats["std"] == pytest.approx(10.0)
    assert stats["ci"] == pytest.approx(4.3026527 * 10.0 / math.sqrt(3))  # t(0.975, 2 df)
    assert math.isnan(summarize([5.0])["ci"]) and summarize([])["n"] == 0


def test_speedup_efficiency_and_weak_strong_labels(tmp_path):
    frame, problems = load([write_rows(tmp_path / "r.jsonl", known_rows())])
    assert problems == []
    scaling = analysis.scaling(analysis.cell_table(frame)).set_index(["scaling", "devices"])
    one = harmonic(100, 110, 120)  # rate = samples / mean epoch time, not the mean of rates
    assert scaling.loc[("strong", 1), "rate_1"] == pytest.approx(one)
    assert scaling.loc[("strong", 2), "speedup"] == pytest.approx(180 / one)
    assert scaling.loc[("strong", 2), "efficiency"] == pytest.approx(180 / one / 2)
    assert scaling.loc[("strong", 4), "speedup"] == pytest.approx(330 / one)
    assert scaling.loc[("strong", 4), "efficiency"] == pytest.approx(330 / one / 4)
    assert not scaling.loc[("strong", 4), "speedup_ratio"].has_interval  # one 4-device run
    assert scaling.loc[("weak", 2), "efficiency"] == pytest.approx(0.75)
    assert scaling.loc[("weak", 4), "speedup"] == pytest.approx(2.0)
    assert set(scaling.loc["weak", "batch_mode"]) == {"per_device"}
    assert set(scaling.loc["strong", "batch_mode"]) == {"global"}


def test_the_step_attribution_and_bus_bandwidth(tmp_path):
    """Every hand-made step is 5% input, 25% forward, 45% backward, 10% optimizer, 15% host on 1
    device; on N > 1, 20% of it is moved from backward to the all-reduce, launched when every
    rank was ready: the bus bandwidth is of that time alone."""
    frame, _ = load([write_rows(tmp_path / "r.jsonl", known_rows())])
    attributed = analysis.attribution(analysis.cell_table(frame))
    weak = attributed[attributed["batch_mode"] == "per_device"].set_index("devices")
    grad = MODELS["small"].gradient_bytes()
    step = SAMPLES / 150 / (SAMPLES // 64)  # 2 devices at 150 samples/s, 64 samples a step
    assert weak.loc[2, "communication_step"] == pytest.approx(0.2 * step)
    assert weak.loc[2, "backward_step"] == pytest.approx(0.25 * step)
    assert weak.loc[2, "communication_share"] == pytest.approx(0.2)
    assert weak.loc[2, "moving_seconds"] == pytest.approx(0.2 * step)
    assert weak.loc[2, "algbw"] == pytest.approx(grad / (0.2 * step))
    assert weak.loc[2, "busbw"] == pytest.approx(grad / (0.2 * step) * 2 * 1 / 2)  # N = 2
    four = SAMPLES / 200 / (SAMPLES // 128)
    assert weak.loc[4, "busbw"] == pytest.approx(grad / (0.2 * four) * 2 * 3 / 4)  # N = 4: 1.5x
    # an epoch's compute and communication add up to its time
    assert (weak.loc[4, "compute_epoch_seconds"] + weak.loc[4, "comm_epoch_seconds"]
            == pytest.approx(SAMPLES / 200))
    assert weak.loc[1, "communication_step"] == 0 and math.isnan(weak.loc[1, "busbw"])
    assert attributed["adds_up"].all()
    assert bus_bandwidth(10.0, 2) == 10.0 and bus_bandwidth(10.0, 4) == 15.0
    # every collective ran after backward on every step that carries one: nothing hidden, and
    # their time alone is their own on those steps (common.measuring.basis)
    assert weak.loc[2, "alone_source"] == "after backward" and weak.loc[2, "hidden_share"] == 0
    assert weak.loc[2, "alone_seconds"] == pytest.approx(0.2 * step)
    assert weak.loc[2, "basis_steps"] == SAMPLES // 64 and weak.loc[2, "broken"] == ()


def test_report_files_hold_the_known_numbers(tmp_path):
    results = write_rows(tmp_path / "known.jsonl", known_rows())
    done = xbench_here("report", results, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert f"report: {tmp_path / 'out' / 'index.html'}" in done.stdout
    assert ("pt-ddp on 4 devices: speedup 3.02×, efficiency 75%; inconclusive: one run on a side "
            "has no interval (run --repeat 3)" in done.stdout)
    assert "1 unsupported" in done.stdout and "needs 2 CUDA GPUs" in done.stdout
    cells = pd.read_csv(tmp_path / "out" / "cells.csv")
    three = cells[cells["n"] == 3].iloc[0]
    seconds = summarize([SAMPLES / r for r in (100, 110, 120)])
    assert three["epoch2_rate"] == pytest.approx(harmonic(100, 110, 120))
    assert three["epoch2_seconds_mean"] == pytest.approx(seconds["mean"])
    assert three["epoch2_rate_ci95_low"] == pytest.approx(
        SAMPLES / (seconds["mean"] + seconds["ci"]))
    assert three["epoch2_rate_ci95_high"] == pytest.approx(
        SAMPLES / (seconds["mean"] - seconds["ci"]))
    assert len(cells) == 7 and set(cells["statuses"]) >= {"3 ok", "1 unsupported"}
    written = {p.name for p in (tmp_path / "out").iterdir()}
    for name in ("index.html", "summary.md", "cells.csv", "fig5a_rate_vs_devices.png",
                 "fig5a_rate_vs_devices.svg", "scaling.png", "step_parts.png",
                 "accuracy.png", "memory.png", "overhead.png"):
        assert name in written
    page = (tmp_path / "out" / "index.html").read_text()
    assert "gets no ring bandwidth" in page and "busbw = algbw × 2(N−1)/N" in page
    assert page.count("data:image/png;base64,") == len([n for n in written if n.endswith(".png")])
    assert "http://" not in page and "https://" not in page
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| env | backend |" in summary and "![Figure 5a" in summary


def test_verdicts_state_what_the_intervals_support_and_mark_the_suspect(tmp_path):
    """pt-ddp: 1 device ~100 samples/s, 2 devices ~190 (3 repeats each): 2 devices pay off.
    hvd-torch: 2 devices ~240 against ~100 on one: efficiency above 100% is SUSPECT. pt-dp and
    pt-ddp at 1 device are within each other's noise: inconclusive. tf-mirrored's reduction to
    one device gets no bus bandwidth."""
    rows = [*repeated("pt-ddp", 1, (98, 100, 102), step=0.010),
            *repeated("pt-ddp", 2, (188, 190, 192), step=0.012),
            *repeated("hvd-torch", 1, (99, 100, 101)), *repeated("hvd-torch", 2, (238, 240, 242)),
            *repeated("pt-dp", 1, (90, 105, 110)),
            *repeated("tf-mirrored", 1, (99, 100, 101), step=0.010, framework="tensorflow",
                      reduction="none"),
            *repeated("tf-mirrored", 2, (150, 151, 152), step=0.014, framework="tensorflow",
                      reduction="reduce-to-one")]
    results = write_rows(tmp_path / "r.jsonl", rows)
    _, summary, written = build_report([results], tmp_path / "out", formats=["md"])
    text = "\n".join(summary)
    assert "pt-ddp on 2 devices: speedup 1.90× [1." in text and "efficiency 95%: pays off" in text
    assert "hvd-torch on 2 devices: speedup 2.40×" in text
    assert "efficiency SUSPECT (120%, above 100%" in text and "not taken as a result" in text
    assert ("fastest on 2 devices: hvd-torch is fastest (hvd-torch 240 samples/s vs pt-ddp 190: "
            "1.26× [" in text)
    assert "test accuracy: the same on every device count, in every backend (0.9000" in text
    fastest_one = next(line for line in summary if "fastest on 1 device" in line)
    assert "inconclusive" in fastest_one
    best = next(line for line in summary if "2 devices at best (hvd-torch) vs 1 device" in line)
    # hvd-torch's 2 devices are 240% of the best single device: no verdict on a SUSPECT number
    assert ("SUSPECT (beyond the 2× 2 devices can give), not taken as a result: likely a "
            "disturbed baseline: pt-dp on 1 device, its slowest run (repeat 0) at 90 samples/s "
            "against 105–110 in its other runs; nothing was recorded taking its cores") in best
    assert "devices pay off here" not in text
    attributed = analysis.attribution(analysis.cell_table(load([results])[0]))
    two = attributed[attributed["devices"] == 2].set_index("backend")
    assert not math.isnan(two.loc["pt-ddp", "busbw"])
    assert math.isnan(two.loc["tf-mirrored", "busbw"])
    assert "reduce-to-one: no ring bandwidth" in written["md"].read_text()


def test_contended_runs_are_left_out_unless_asked(tmp_path):
    rows = [*repeated("pt-ddp", 1, (98, 100, 102)),
            *repeated("pt-ddp", 2, (188, 190, 192)),
            make_row(backend="pt-ddp", devices=2, rates=(20, 20), repeat=3, contended=True)]
    results = write_rows(tmp_path / "r.jsonl", rows)
    _, summary, written = build_report([results], tmp_path / "out", formats=["csv"])
    text = "\n".join(summary)
    assert "1 run(s) were contended" in text and "left out of every number and verdict" in text
    cells = pd.read_csv(written["csv"]).set_index("devices")
    assert cells.loc[2, "n"] == 3 and cells.loc[2, "statuses"] == "4 ok (1 contended)"
    assert cells.loc[2, "epoch2_rate"] == pytest.approx(harmonic(188, 190, 192))
    _, summary, written = build_report([results], tmp_path / "all", formats=["csv"],
                                       include_contended=True)
    assert "included at your request" in "\n".join(summary)
    assert pd.read_csv(written["csv"]).set_index("devices").loc[2, "n"] == 4


def test_a_verdict_the_false_discovery_control_does_not_allow_is_held_back():
    """Alone, 1.10× [1.05, 1.15] (p = 0.003) would be stated; among 20 comparisons where
    the rest show nothing, Benjamini-Hochberg holds it back (it needs p <= 0.0025); 1.20×
    (p = 0.00002) is stated either way."""
    from xbench.reports.judging.comparisons import Judge
    from xbench.reports.judging.verdict import control_text
    from xbench.reports.numbers.stats import false_discoveries_controlled, ratio_of_means
    weak, strong = ([1.10, 1.13, 1.14], [1.0, 1.02, 1.04]), ([1.2, 1.21, 1.22], [1.0, 1.01, 1.02])
    nothing = ([1.0, 1.05, 0.95], [1.0, 1.04, 0.96])
    for pairs, expected in (([weak, nothing], "above"), ([weak] + [nothing] * 19, "held"),
                            ([strong] + [nothing] * 19, "above")):
        collected = Judge()
        for pair in pairs:
            collected.judge(ratio_of_means(*pair), *pair)
        judge = Judge(false_discoveries_controlled(collected.p_values))
        decided = [judge.judge(ratio_of_means(*pair), *pair).side for pair in pairs]
        assert decided[0] == expected and set(decided[1:]) == {None}
        assert "Benjamini-Hochberg" in control_text(judge.control())


def test_an_mfu_above_the_peak_is_suspect_not_a_result(tmp_path):
    """MFU over 100% means the peak is the wrong one (another precision, another device) or the
    rate was disturbed: marked SUSPECT and not shown as a result."""
    from xbench.reports.rendering.tables import limits_table
    results = write_rows(tmp_path / "r.jsonl", [make_row(rates=(80, 100)),
                                                make_row(rates=(80, 100), batch=64)])
    frame, _ = load([results])
    cells = analysis.cell_table(frame)
    shown = []
    for gflops in (0.1, 10.0):  # the small model trains at 100 x 3.3 MFLOP = 0.33 GFLOP/s
        probe = {"matmul": [{"framework": "torch", "device_type": "cpu", "precision": "fp32",
                             "threads": 1, "gflops": gflops}], "all_reduce": []}
        limits = against_limits(cells, analysis.attribution(cells), {"A": probe})
        column = limits_table(limits)["MFU, 95% CI of the rate"]
        shown.append(column.iloc[0])
    assert shown[0].startswith("SUSPECT: 33") and shown[0].endswith("not a result")
    assert shown[1].startswith("3.3%") and "SUSPECT" not in shown[1]


def test_a_run_that_crashed_and_ran_again_is_named(tmp_path):
    rows = known_rows()
    rows[3]["crashes"] = ["crashed: exit code 134 (a process killed by signal 6, Aborted). ..."]
    _, summary, _ = build_report([write_rows(tmp_path / "r.jsonl", rows)], tmp_path / "out",
                                 formats=["md"])
    text = "\n".join(summary)
    assert "Runs that crashed and ran again: 1" in text
    assert f"{rows[3]['cell_key']} r0: 1 crash(es), then ok" in text
    assert "crashed and ran again" not in "\n".join(build_report(
        [write_rows(tmp_path / "k.jsonl", known_rows())], tmp_path / "k", formats=["md"])[1])


def test_the_precision_table_pairs_each_precision_with_its_own_setup(tmp_path):
    """Four cells: framework-default and bf16, each with and without fp16 gradient compression.
    Each precision is shown beside the other of the same compression, never across them."""
    from xbench.reports.sections.data import Options, ReportData
    from xbench.reports.sections.precision import precision_table
    rows = []
    for precision, compression, rate in (("framework-default", "none", 100.0),
                                         ("bf16", "none", 150.0),
                                         ("framework-default", "fp16", 110.0),
                                         ("bf16", "fp16", 160.0)):
        row = make_row(rates=(80.0, rate))
        lower = {"bf16": "bfloat16"}.get(precision)
        row.update(precision=precision, compression=compression,
                   cell_key=row["cell_key"] + (f"|{precision}" if lower else "")
                   + ("|compress-fp16" if compression != "none" else ""))
        row["backend_details"]["math"] = {"matmul": "fp32", "convolution": "fp32",
                                          "precision": precision, "lower": lower}
        rows.append(row)
    made = precision_table(ReportData(Options((write_rows(tmp_path / "r.jsonl", rows),))))
    shown = made.text()  # as the pages show it; its values are the rates themselves
    assert sorted(made.values["epoch-2 rate (samples/s)"]) == [100.0, 110.0, 150.0, 160.0]
    assert list(shown["precision"]) == ["bf16", "framework-default"] * 2
    compressed = ["compressed fp16" in t for t in shown["training"]]
    assert compressed in ([False, False, True, True], [True, True, False, False])
    assert set(shown["MFU at its precision's peak, 95% CI"]) == {"— (no probe of it)"}


def test_report_json_holds_each_figure_s_data_and_each_table_s_numbers(tmp_path):
    """The scaling figure's data, read from the drawn figure, is the scaling table's numbers:
    pt-ddp's speedups at 1, 2 and 4 devices (strong scaling) and the ideal line."""
    _, _, written = build_report([write_rows(tmp_path / "r.jsonl", known_rows())],
                                 tmp_path / "out", formats=["md"], as_json=True)
    report = strict_json(written["json"].read_text())
    scaling = next(t for t in report["tables"] if t["name"] == "scaling")
    at = {name: scaling["columns"].index(name) for name in ("scaling", "devices",
                                                            "speedup, 95% CI")}
    strong = {row[at["devices"]]: row[at["speedup, 95% CI"]]["value"]
              for row in scaling["rows"] if row[at["scaling"]] == "strong"}
    assert set(strong) == {2, 4} and all(isinstance(v, float) for v in strong.values())
    figure = next(f for f in report["figures"] if f["name"] == "scaling")
    speedup = figure["axes"][0]
    assert speedup["y_label"] == "speedup R(N)/R(1) (×)" and "strong" in speedup["title"]
    drawn = next(e for e in speedup["error_bars"] if e["label"] == "pt-ddp")
    assert dict(zip(drawn["x"], drawn["y"], strict=True)) == pytest.approx({1: 1.0, **strong})
    ideal = next(line for line in speedup["lines"] if line["label"] == "ideal")
    assert ideal["x"] == ideal["y"] == [1, 2, 4]
    assert figure["caption"] and figure["not_drawn"] is None
