"""Time to a target accuracy: the evaluation points and the statistics against hand-computed
cases, the settings' checks (exit 2), the time-to-accuracy preset on a slice of real MNIST (one
seed run here, its 5 seeds recorded: its rows' curves and the report's goodput tables), a target
no run can reach (ok rows, converged: false, counted as such), and one accuracy curve across
frameworks."""
import json
import math

import pytest
from scipy import stats

from tests.helpers import REPO, strict_json, write_grid, xbench, xbench_here
from xbench.common.grids.cell import Cell
from xbench.common.measuring.target import Evaluation, TargetRun
from xbench.common.results.store import read_rows
from xbench.reports.judging.comparisons import verdicts
from xbench.reports.judging.decision import impossible_runs
from xbench.reports.judging.goodput import goodput, smallest_p, target_table, time_statistics
from xbench.reports.numbers.analysis import cell_table
from xbench.reports.numbers.rows import load


def target_run(steps_per_epoch, evals=4, target=0.9):
    return TargetRun(target, evals, steps_per_epoch, global_batch=64)


@pytest.mark.parametrize("steps, evals, points", [
    (16, 4, [4, 8, 12, 16]), (10, 4, [2, 5, 8, 10]), (3, 4, [1, 2, 3]), (7, 1, [7])])
def test_the_test_set_is_evaluated_after_every_fraction_of_an_epoch(steps, evals, points):
    assert target_run(steps, evals).points == points


def test_a_target_reached_in_epoch_1_still_trains_epoch_2_and_evaluates_no_more():
    run = target_run(4, evals=2)
    run.record(1, 2, Evaluation(0.5, 1.2), training=1.0, wall=1.5)
    assert run.due(4) and not run.finished(1)
    run.record(1, 4, Evaluation(0.95, 0.2), training=2.0, wall=3.0)
    run.end_epoch(1, training=2.0, evaluating=1.0)
    assert not run.due(2) and not run.due(4) and not run.finished(1) and run.finished(2)
    summary = run.summary()
    assert summary["converged"] and (summary["samples"], summary["epochs"]) == (4 * 64, 1.0)
    assert (summary["seconds"], summary["training_seconds"]) == (3.0, 2.0)
    # a point of epoch 2 counts epoch 1's time, its evaluations in the wall clock only
    run.reached = None
    run.record(2, 2, Evaluation(0.97, 0.1), training=0.5, wall=0.75)
    assert run.curve[-1] | {"accuracy": 0} == {"epoch": 2, "step": 6, "samples": 6 * 64,
                                               "epochs": 1.5, "accuracy": 0, "loss": 0.1,
                                               "seconds": 3.75, "training_seconds": 2.5}


def test_a_point_at_an_epochs_end_takes_the_epochs_recorded_time():
    """The loop's clock at the evaluation (3.1 s here) is this rank's; the epoch's record (3.0 s
    of training, the slowest rank's, the tracer's time between steps out) is what the row says
    the epoch took: a target reached at the epoch's end took that. A point inside the epoch
    keeps the loop's clock."""
    run = target_run(4, evals=2, target=0.5)
    run.record(1, 2, Evaluation(0.4, 1.2), training=1.5, wall=2.0)
    run.record(1, 4, Evaluation(0.6, 0.9), training=3.1, wall=4.1)
    run.end_epoch(1, training=3.0, evaluating=1.0)
    assert [(p["training_seconds"], p["seconds"]) for p in run.curve] == [(1.5, 2.0), (3.0, 4.0)]
    assert (run.summary()["training_seconds"], run.summary()["seconds"]) == (3.0, 4.0)
    run.end_epoch(2, training=2.5, evaluating=0.0)  # epoch 2 evaluates nothing: no point moves
    assert run.summary()["training_seconds"] == 3.0


def test_a_run_that_never_reaches_its_target_has_no_time_to_it():
    run = target_run(4)
    run.record(1, 4, Evaluation(0.5, 1.2), training=1.0, wall=2.0)
    assert run.summary() | {"curve": None} == {
        "target": 0.9, "metric": "accuracy", "evals_per_epoch": 4, "converged": False,
        "seconds": None, "training_seconds": None, "samples": None, "epochs": None, "curve": None}


def test_a_target_loss_is_reached_at_or_below_it():
    run = TargetRun(2.0, 2, 4, global_batch=64, metric="loss")
    run.record(1, 2, Evaluation(0.9, 2.5), training=1.0, wall=1.5)
    assert run.reached is None  # a high accuracy does not meet a target loss
    run.record(1, 4, Evaluation(0.1, 2.0), training=2.0, wall=3.0)
    assert run.reached["loss"] == 2.0 and run.summary()["metric"] == "loss"


def test_the_median_interval_and_mlperfs_trimmed_mean_by_hand():
    five = time_statistics([5.0, 1.0, 4.0, 2.0, 3.0])
    # no pair of order statistics of 5 runs covers the median with 95%: the widest, [x1, x5],
    # covers it with 1 - 2 / 2^5
    assert (five["median"], five["low"], five["high"]) == (3.0, 1.0, 5.0)
    assert five["coverage"] == pytest.approx(1 - 2 / 32)
    assert five["trimmed_mean"] == 3.0  # (2 + 3 + 4) / 3: the fastest and the slowest dropped
    ten = time_statistics(list(range(1, 11)))
    interval = stats.quantile_test(list(range(1, 11)), q=5.5).confidence_interval(0.95)
    assert (ten["low"], ten["high"]) == (interval.low, interval.high) == (2, 9)
    assert ten["coverage"] == pytest.approx(1 - 2 * (1 + 10) / 2 ** 10)
    # one run that never converged is the slowest: dropped by the trimmed mean; two are not
    one = time_statistics([1.0, 2.0, 3.0, 4.0, math.inf])
    assert (one["median"], one["trimmed_mean"], one["high"]) == (3.0, 3.0, math.inf)
    two = time_statistics([1.0, 2.0, 3.0, math.inf, math.inf])
    assert math.isinf(two["trimmed_mean"]) and two["median"] == 3.0
    assert math.isnan(time_statistics([1.0, 2.0])["trimmed_mean"])


def test_a_target_gives_five_seeds_each_its_own_cell(tmp_path):
    from xbench.common.grids.grid import expand, read_grid_file
    spec = read_grid_file(write_grid(tmp_path, backends=["pt-single"], target_accuracy=0.9,
                                     seed=7))
    cells = expand(spec)
    assert [c.seed for c in cells] == [7, 8, 9, 10, 11]
    assert all(f"|seed{c.seed}|target0.9-evals4|" in c.key for c in cells)
    assert [c.seed for c in expand(spec, {"seeds": 2})] == [7, 8]
    assert Cell(grid="g", backend="pt-single", model="small", multiple=1, batch=64,
                devices=1).key.count("target") == 0


@pytest.mark.parametrize("flags, message", [
    (["--target-accuracy", "1.5"], "'target_accuracy' must be a number from 0 to 1"),
    (["--target-accuracy", "0.9", "--evals-per-epoch", "0"], "'evals_per_epoch' must be positive"),
    (["--seed", str(2**32 - 2), "--seeds", "3"], "go past 4,294,967,295"),
])
def test_bad_target_settings_are_clear_errors(flags, message):
    run = xbench_here("grid", "--preset", "time-to-accuracy", *flags, "--dry-run")
    assert run.returncode == 2 and message in run.stderr, run.stderr


# The preset's settings for pt-ddp on 1,024 real MNIST images, to 85% in at most 4 epochs: 2
# batches x 2 device counts x its 5 seeds are recorded (tests/data/record.py); one seed is run here.
PRESET = ["--preset", "time-to-accuracy", "--backend", "pt-ddp", "--batch", "64,256", "--epochs",
          "4", "--target-accuracy", "0.85", "--max-train-samples", "1024",
          "--max-test-samples", "1000"]
RECORDED = REPO / "tests" / "data" / "time-to-accuracy.jsonl"


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """The preset's 20 recorded runs (2 batches x 2 device counts x 5 seeds) and their report."""
    folder = tmp_path_factory.mktemp("tta")
    # contended runs too: this test counts runs, and how busy the machine was must not matter
    report = xbench_here("report", RECORDED, "--out", folder / "report", "--format", "md,csv",
                         "--include-contended")
    assert report.returncode == 0, report.stderr
    rows, problems = read_rows(RECORDED)
    assert not problems
    return rows, report.stdout, (folder / "report" / "summary.md").read_text()


def assert_stops_at_its_target(row):
    """A run of the preset evaluates after every half epoch until the target, records its curve,
    and stops at the epoch that reached it (epoch 2 at least)."""
    assert row["status"] == "ok", row["error"]
    target, curve = row["time_to_target"], row["time_to_target"]["curve"]
    steps = 1024 // row["global_batch"]
    assert target["target"] == row["target_accuracy"] == 0.85
    # evaluated after every half of every epoch it trained (the preset's), until the target
    assert [p["step"] for p in curve] == [
        (e - 1) * steps + s for e in range(1, curve[-1]["epoch"] + 1)
        for s in (steps // 2, steps)][:len(curve)]
    assert all(p["samples"] == p["step"] * row["global_batch"] for p in curve)
    assert all(p["training_seconds"] < p["seconds"] for p in curve)
    below = [p["accuracy"] < 0.85 for p in curve]
    if target["converged"]:
        assert below == [True] * (len(curve) - 1) + [False]  # its first point at the target
        reached = curve[-1]
        assert {k: target[k] for k in ("seconds", "training_seconds", "samples", "epochs")} \
            == {k: reached[k] for k in ("seconds", "training_seconds", "samples", "epochs")}
        assert len(row["epochs"]) == max(2, reached["epoch"])  # that epoch, and epoch 2
    else:
        assert all(below) and len(curve) == 4 * 2 and len(row["epochs"]) == 4
        assert target["seconds"] is None
    assert all(e["evaluation_seconds"] > 0 for e in row["epochs"][:curve[-1]["epoch"]])


def test_a_run_of_the_preset_records_its_curve_and_stops_at_its_target(mnist_dir, tmp_path):
    """One seed of the preset run here, each configuration once."""
    results = tmp_path / "tta.jsonl"
    run = xbench("grid", *PRESET, "--seeds", "1", "--data-dir", mnist_dir, "--results", results)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = read_rows(results)[0]
    assert {(r["global_batch"], r["devices"], r["seed"]) for r in rows} == {
        (64, 1, 0), (64, 2, 0), (256, 1, 0), (256, 2, 0)}
    for row in rows:
        assert_stops_at_its_target(row)
    assert any(r["time_to_target"]["converged"] for r in rows)


def test_every_recorded_run_of_the_preset_records_its_curve_and_stops_at_its_target(preset):
    rows, _, _ = preset
    assert len(rows) == 20
    assert {(r["global_batch"], r["devices"]) for r in rows} == {(64, 1), (64, 2), (256, 1),
                                                                 (256, 2)}
    assert sorted(r["seed"] for r in rows) == sorted(list(range(5)) * 4)
    for row in rows:
        assert_stops_at_its_target(row)
    assert any(r["time_to_target"]["converged"] for r in rows)


def test_the_report_names_the_shortest_time_to_target_beside_the_highest_throughput(preset):
    rows, printed, summary = preset
    section = summary.split("## Time to accuracy")[1].split("\n## ")[0]
    table = section.split("### Time to the target accuracy")[1].split("###")[0]
    lines = [line for line in table.splitlines() if line.startswith("| A | pt-ddp")]
    assert len(lines) == 4  # one per batch and device count, its 5 seeds together
    for line in lines:
        batch, devices = line.split(" | ")[5:7]
        runs = [r for r in rows if f"global {r['global_batch']}" == batch
                and str(r["devices"]) == devices]
        converged = sum(r["time_to_target"]["converged"] for r in runs)
        assert f"| {converged} of 5 |" in line
    goodput = section.split("### The shortest time to the target beside the highest throughput")[1]
    line = next(line for line in goodput.splitlines() if line.startswith("| A | pt-ddp"))
    shortest, settled, fastest, same = line.split(" | ")[4:8]
    assert shortest.startswith("global batch") and " s \\[" in shortest
    assert settled.startswith(("inconclusive: not surely", "yes: shorter", "the only",
                               "no verdict possible")), settled
    assert fastest.startswith("global batch") and fastest.endswith("samples/s")
    assert same.rstrip(" |") in ("the same configuration", "different")
    assert "Time to target (median [interval]):" in printed
    assert "pt-ddp (adam 0.001), to accuracy 0.85: shortest at global batch" in printed


def test_the_ranking_leaves_evaluations_out_and_three_seeds_cannot_be_sure(preset, tmp_path):
    """Rank 0 evaluates the whole test set at every device count: the shortest is ranked by the
    training time, evaluations out. With 3 seeds a configuration the smallest Mann-Whitney p
    is 0.1: no 'surely' is possible, and the report says why."""
    rows, _, summary = preset
    assert "ranked by the training time to the target, evaluations left out" in summary
    for seeds, possible in ((5, True), (3, False)):
        path = tmp_path / f"seeds{seeds}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["seed"] < seeds))
        targets = target_table(load([path], include_contended=True)[0])
        for _, g in goodput(targets).iterrows():
            group = targets[targets["series"] == g["series"]]
            medians = {c: t["median"] for c, t in zip(group["configuration"],
                                                      group["training_seconds"], strict=True)}
            assert g["shortest"]["configuration"] == min(medians, key=medians.get)
            assert g["settled"].startswith("no verdict possible") != possible, g["settled"]
            assert possible or "it takes 4 or more seeds" in g["settled"]
    assert smallest_p(3, 3) == pytest.approx(0.1) and smallest_p(4, 4) < 0.05


def test_a_target_no_run_reaches_is_ok_and_counted_as_not_converged(mnist_dir, tmp_path):
    # 3 seeds, the fewest whose trimmed mean the report computes (and shows as not reached)
    grid = write_grid(tmp_path, name="unreachable", backends=["pt-single"], batches=[128],
                      target_accuracy=0.999, evals_per_epoch=2, max_test_samples=1000, seeds=3)
    results = tmp_path / "unreachable.jsonl"
    run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", results)
    assert run.returncode == 0, run.stderr
    rows, _ = read_rows(results)
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    assert all(r["time_to_target"]["converged"] is False and len(r["epochs"]) == 2
               and len(r["time_to_target"]["curve"]) == 4 for r in rows)
    report = xbench_here("report", results, "--out", tmp_path / "report", "--format", "md",
                         "--include-contended")
    assert report.returncode == 0, report.stderr
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "| not reached | not reached | not reached | 0 of 3 |" in summary
    assert "no configuration reached the target" in report.stdout


@pytest.fixture(scope="module")
def curves(mnist_dir, tmp_path_factory):
    """PyTorch and TensorFlow, one process (pt-single, tf-single) and two (hvd-torch,
    tf-multiworker), to a target no run reaches: 2 epochs of 8 steps, the test set evaluated 4
    times an epoch; TensorFlow traces every step of epoch 2. (tf-multiworker and hvd-torch on
    one process would tell rank 0's accuracy through the gather that every cell's record is
    gathered by, as on two: the smoke grid has those cells.)"""
    folder = tmp_path_factory.mktemp("curves")
    results = folder / "curves.jsonl"
    for backends, devices in ((["pt-single", "tf-single"], 1),
                              (["tf-multiworker", "hvd-torch"], 2)):
        grid = write_grid(folder, name="curves", backends=backends, devices=[devices],
                          batches=[128], target_accuracy=0.999, seeds=1, epochs=2,
                          max_train_samples=1024, max_test_samples=1000)
        run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", results)
        assert run.returncode == 0, run.stdout + run.stderr
    rows, _ = read_rows(results)
    ok = {(r["backend"], r["devices"]): r for r in rows if r["status"] == "ok"}
    assert len(ok) == 4, json.dumps([(r["backend"], r["devices"], r["error"]) for r in rows])
    return ok


def test_one_accuracy_curve_across_frameworks(curves):
    """The same evaluations of the same weights: PyTorch and TensorFlow, one process and two
    (the ranks learn rank 0's accuracy through each library's gather)."""
    reference = curves[("pt-single", 1)]["time_to_target"]["curve"]
    for key, row in curves.items():
        curve = row["time_to_target"]["curve"]
        # never reached: every backend evaluates at the same 8 points
        assert [p["samples"] for p in curve] == [p["samples"] for p in reference], key
        assert len(curve) == 8, key
        # one trajectory (float32 losses agree to ~3e-6): at most 3 of the 1,000 images differ
        assert max(abs(p["accuracy"] - q["accuracy"]) for p, q in zip(curve, reference)) \
            <= 0.003, key


def test_the_time_to_a_point_leaves_the_tracer_out_as_the_epochs_do(curves):
    """TensorFlow's tracer, started and stopped between the traced steps of epoch 2, is the
    epoch's untimed seconds: a point evaluated at an epoch's end counts the epochs' timed
    seconds as recorded, and none of the tracer's."""
    for (backend, devices), row in curves.items():
        epochs = row["epochs"]
        if row["framework"] == "tensorflow":
            assert epochs[1]["untimed_seconds"] > 0, (backend, devices)  # the tracer ran
        ends = [p for p in row["time_to_target"]["curve"] if p["epochs"] == p["epoch"]]
        assert [p["epoch"] for p in ends] == [1, 2], (backend, devices)
        for point in ends:
            timed = epochs[:point["epoch"]]
            assert point["training_seconds"] == pytest.approx(
                sum(e["seconds"] for e in timed), rel=1e-12), (backend, devices)
            assert point["seconds"] == pytest.approx(
                sum(e["seconds"] + e["evaluation_seconds"] for e in timed), rel=1e-12)


def test_the_decision_ranks_by_time_to_the_target_over_the_seeds(preset, tmp_path):
    """With a target the decision is per target, the global batch a knob, ranked by the median
    training time over the seeds as the time-to-target table gives it; with 3 seeds a side no
    place can be sure, and the sentence says it takes 4."""
    rows, printed, summary = preset
    frame = load([RECORDED], include_contended=True)[0]
    # a SUSPECT ratio's disturbed run is left out of its configuration's seeds (and named)
    runs, _ = impossible_runs(verdicts(cell_table(frame), frame, include_contended=True))
    targets = target_table(frame[[(key, repeat) not in runs for key, repeat
                                  in zip(frame["cell_key"], frame["repeat"])]])
    # a configuration none of whose seeds reached the target has no usable run: not ranked
    medians = sorted((t["median"], g, d, t["n"]) for t, g, d in zip(
        targets["training_seconds"], targets["global_batch"], targets["devices"], strict=True)
        if t["n"] > 0)
    batches = {g for _, g, _, _ in medians}  # a knob where it varies among those ranked
    decision = summary.split("## The decision")[1].split("\n## ")[0]
    assert "**small ×1 mnist, cpu, to accuracy 0.85:**" in decision
    ranked = [line for line in decision.splitlines() if line.startswith("| ") and "pt-ddp" in line]
    assert medians and [line.split(" | ")[1] for line in ranked] == [
        f"pt-ddp on {d} device{'s' * (d > 1)}"
        + (f" (global\\_batch={g})" if len(batches) > 1 else "") for _, g, d, _ in medians]
    assert [line.split(" | ")[3] for line in ranked] == [str(n) for *_, n in medians]  # seeds
    for line, (median, _, _, _) in zip(ranked, medians, strict=True):
        shown = line.split(" | ")[2]
        assert shown == "not reached" if math.isinf(median) else \
            shown.startswith(f"{median:.1f} \\[")
    three = tmp_path / "seeds3.jsonl"
    three.write_text("".join(json.dumps(r) + "\n" for r in rows if r["seed"] < 3))
    done = xbench_here("report", three, "--out", tmp_path / "out", "--format", "md",
                       "--include-contended", "--json")
    [decided] = strict_json(done.stdout)["decision"]
    assert decided["ranked_by"] == "training time to accuracy 0.85 (median over seeds, s)"
    assert not any(c["sure"] for c in decided["choices"]) and decided["best"] is None
    assert "it takes 4 or more seeds a configuration (--seeds 4)" in decided["sentence"]
