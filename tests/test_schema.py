"""One named upgrade per schema version (common.results.upgrades), each tested on a row of its
version: a row of today's schema, less what every later version added, reads back as today's row
with what the older one had implicitly; the recorded real rows (tests/data) as written; and rows
of any shape read by every reader (export, report, compare, the grid's resume): a row that fails
the checks is a skipped line, said by its number."""
import json

import pytest

from tests.data.record import RECORDINGS
from tests.helpers import REPO, SLOW, write_grid, xbench, xbench_here
from tests.report_fixtures import make_row as hand_made_row
from tests.report_fixtures import write_rows
from xbench.common.grids.cell import Cell
from xbench.common.results.schema import FIELDS, SCHEMA_VERSION, make_row, now, row_problem
from xbench.common.results.store import read_rows
from xbench.common.results.upgrades import UPGRADES, VERSIONS, upgrade
from xbench.common.workload.models import MODELS

DATA = REPO / "tests" / "data"

# What each version first recorded, by hand: the test's own account of the history.
ADDED_IN = {
    3: ["optimizer", "lr", "momentum", "weight_decay", "lr_scaling", "reference_batch",
        "warmup_epochs", "set_epoch", "batch_sweep"],
    4: ["max_test_samples", "host_memory", "loader_workers", "batchnorm"],
    5: ["inject", "attribution"],
    6: [],  # gpu_math, which version 8 renamed precision
    7: ["pin_ranks", "compression", "powersgd_rank"],
    8: ["crashes"],
    9: ["target_accuracy", "evals_per_epoch", "time_to_target"],
    10: ["reshard", "model_state_per_device"],
    11: ["epochs_given"],
    12: ["bucket_mb"],
    13: ["look"],
    14: ["target_loss", "test_loss"],
    15: [],  # each rank's timeline, nested in the attribution
    16: ["accumulate", "accumulate_sync", "compile", "warmup_seconds"],
    17: ["omp_wait"],
    18: ["invariants"],  # and the basis and the replay, nested in the attribution
    19: ["cluster"],
}


def todays_row(**fields) -> dict:
    cell = Cell(grid="hand", backend="pt-ddp", model="small", multiple=1, batch=128, devices=2,
                epochs=3, batch_mode="global", seed=0, max_train_samples=512, data="mnist",
                device="cpu", timeout=60)
    return {**make_row(cell, "hand", now(), "failed", "hand-made", None, None, {}, None, 0.0, 1,
                       model=MODELS["small"]), **fields}


def as_of(row: dict, version: int) -> dict:
    """`row` as version `version` wrote it."""
    old = {k: v for k, v in row.items()
           if not any(k in ADDED_IN[later] for later in ADDED_IN if later > version)}
    if version in (6, 7):
        old["gpu_math"] = old.pop("precision")
    elif version < 6:
        old.pop("precision")
    return {**old, "schema_version": version}


def test_the_history_is_the_list_of_named_upgrades():
    assert [f.__name__ for f in UPGRADES] == [f"update_to_{v}" for v in VERSIONS]
    assert VERSIONS == list(range(3, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 19
    assert set(ADDED_IN) == set(VERSIONS)


@pytest.mark.parametrize("version", range(2, SCHEMA_VERSION))
def test_a_row_of_each_older_version_reads_as_todays(version):
    """Every field a later version added comes back as the older row had it implicitly: the
    defaults today's row was made with, each version's upgrade applied in turn; the OpenMP wait
    policy as rows before 17 ran (the runtime's own, not the default auto's choice)."""
    today = todays_row(omp_wait="runtime")
    upgraded = upgrade(as_of(today, version))
    assert row_problem(upgraded) is None
    assert upgraded == today


def test_version_3_gpu_rows_of_pytorch_keep_their_pinned_copies_apart():
    """Before schema 4, PyTorch's loader pinned and copied non-blocking on a GPU; tf.data never
    pinned: an old pinned row must not share a key with today's pageable cell."""
    for framework, memory in (("torch", "pinned-non-blocking"), ("tensorflow", "pageable")):
        row = todays_row(framework=framework, device_type="cuda")
        upgraded = upgrade(as_of(row, 3))
        assert upgraded["host_memory"] == memory
        assert (upgraded["cell_key"] == row["cell_key"]) == (memory == "pageable")


def test_version_6_and_7_gpu_math_is_the_precision():
    for version in (6, 7):
        old = as_of(todays_row(), version) | {"gpu_math": "tf32"}
        upgraded = upgrade(old)
        assert upgraded["precision"] == "tf32" and "gpu_math" not in upgraded


def test_version_10_rows_take_their_epochs_from_their_key():
    row = todays_row()
    assert "|e3|" in row["cell_key"] and row["epochs_given"] == 3
    assert upgrade(as_of(row, 10))["epochs_given"] == 3


def test_version_11_rows_count_no_untraced_time():
    """Rows before 12 folded what no mark covered into host: their untraced part is 0."""
    rank = {"parts": {part: {"seconds": 1.0, "median": 0.1, "p10": 0.1, "p90": 0.1}
                      for part in ("input", "forward", "backward", "optimizer", "waiting",
                                   "communication", "host")},
            "steps": 10, "residual_seconds": 0.0, "adds_up": True,
            "collective": {"busy_seconds": 0.0, "moving_seconds": 0.0, "moving_median": 0.0,
                           "bytes_per_step": None}}
    old = as_of(todays_row(status="ok"), 11) | {"attribution": {
        "how": {}, "epochs": [{"ranks": [rank], "slowest_rank": None}]}}
    upgraded = upgrade(old)
    parts = upgraded["attribution"]["epochs"][0]["ranks"][0]["parts"]
    assert parts["untraced"]["seconds"] == 0.0 and parts["host"]["seconds"] == 1.0
    assert upgraded["attribution"]["epochs"][0]["ranks"][0]["timeline"] is None  # schema 15
    assert upgraded["bucket_mb"] == 0.0 and upgraded["schema_version"] == SCHEMA_VERSION


def test_version_12_epochs_without_untimed_seconds_read_as_none_untimed():
    """The xbench that first wrote schema 12 recorded an epoch's untimed seconds only where not
    0: such an epoch reads as 0, and an epoch that has them keeps them."""
    row = todays_row()
    epochs = [{"epoch": 1, "seconds": 1.0}, {"epoch": 2, "seconds": 1.0, "untimed_seconds": 0.2}]
    upgraded = upgrade({**as_of(row, 12), "epochs": epochs})
    assert [e["untimed_seconds"] for e in upgraded["epochs"]] == [0.0, 0.2]


def test_rows_of_versions_it_does_not_read_are_left_for_the_validator():
    assert upgrade({"schema_version": 1}) == {"schema_version": 1}
    assert row_problem(upgrade([1])) == "not a JSON object"
    future = todays_row(schema_version=SCHEMA_VERSION + 1)
    assert upgrade(future) is future and f"is not {SCHEMA_VERSION}" in row_problem(future)


@pytest.mark.processes("the knobs preset's dry run tries its capped link: unshare and tc")
@pytest.mark.parametrize("recording", sorted(RECORDINGS))
def test_the_recorded_rows_pass_the_schemas_checks_as_written(recording):
    """The real rows the report, compare and export tests read (tests/data/record.py) are rows
    of today's schema, written as the runner writes them: each passes the checks with no upgrade,
    and they are the cells their recording's grid asks for. A change to the schema fails here
    until they are recorded again."""
    lines = (DATA / f"{recording}.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert rows and all(row["schema_version"] == SCHEMA_VERSION for row in rows)
    assert [row_problem(row) for row in rows] == [None] * len(rows)
    # ok, or refused with the reason (the knobs preset's compiled cells XLA cannot run)
    assert all(list(row) == list(FIELDS) and row["status"] in ("ok", "unsupported")
               for row in rows)
    read, problems = read_rows(DATA / f"{recording}.jsonl")
    assert read == rows and problems == []
    plan = xbench_here("grid", *RECORDINGS[recording], "--results", DATA / f"{recording}.jsonl",
                       "--dry-run")
    ok = sum(row["status"] == "ok" for row in rows)
    assert f"{len(rows)} cells: {ok} done already, {len(rows) - ok} unsupported here" \
        in plan.stdout, plan.stdout


# --- rows of any shape, read by every reader ---------------------------------------------------

SLICE = 512


def failed_row(key="k", repeat=0, **fields):
    """A valid failed row of a pt-single cell (its key `key`)."""
    cell = Cell(grid="hand", backend="pt-single", model="small", multiple=1, batch=128, devices=1,
                epochs=2, batch_mode="global", seed=0, max_train_samples=SLICE, data="mnist",
                device="cpu", timeout=60, repeat=repeat)
    row = make_row(cell, "hand", now(), "failed", "hand-made", None, None, {}, None, 0.0, 1,
                   model=MODELS["small"])
    return {**row, "cell_key": key, **fields}


def wrong_shapes():
    key = failed_row()["cell_key"]
    return [
        "[" * 100_000,
        json.dumps(failed_row(repeat=0) | {"repeat": [1]}),
        json.dumps(failed_row() | {"cell_key": {"a": 1}}),
        json.dumps(failed_row() | {"backend_details": [1, 2]}),
        json.dumps(failed_row() | {"epochs": [{"x": 1}]}),
        json.dumps(failed_row() | {"error": "\ud800"}),
        json.dumps({"status": "ok", "cell_key": key}),
        json.dumps(failed_row() | {"schema_version": 0}),
        json.dumps(failed_row() | {"schema_version": 999}),
        json.dumps(failed_row() | {"schema_version": "two"}),
    ]


def test_every_reader_reports_a_wrong_row_by_line_and_skips_it(mnist_dir, tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text("\n".join(wrong_shapes()) + "\n")
    export = xbench_here("export", results, tmp_path / "rows.csv")
    assert export.returncode == 0, export.stderr
    for number in range(1, 11):
        assert f"line {number}:" in export.stderr
    assert "line 1: nested too deeply" in export.stderr
    assert "line 6: not a result row: a text in it is not valid Unicode" in export.stderr
    assert "line 7: not a result row: no 'schema_version' field" in export.stderr
    assert f"schema_version 0 is not {SCHEMA_VERSION}" in export.stderr
    assert "'schema_version' is str, not a whole number" in export.stderr
    report = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0 and "10 problem(s) in the results files" in report.stderr
    # resume counts none of them as done: the cell of line 7 ("ok" alone) runs
    cell = Cell(grid="hand", backend="pt-single", model="small", multiple=1, batch=128,
                devices=1, epochs=2, batch_mode="global", seed=0, max_train_samples=SLICE,
                data="mnist", device="auto", timeout=SLOW)
    lines = results.read_text().splitlines()
    lines[6] = json.dumps({"status": "ok", "cell_key": cell.key})
    results.write_text("\n".join(lines) + "\n")
    done = xbench("grid", write_grid(tmp_path, name="hand", backends=["pt-single"],
                                     max_train_samples=SLICE),
                  "--data-dir", mnist_dir, "--results", results)
    assert done.returncode == 0, done.stderr
    assert "done in" not in done.stdout and "line 7: not a result row" in done.stdout
    assert [r["status"] for r in read_rows(results)[0]] == ["ok"]


def bad_rows():
    good = hand_made_row(rates=(80, 100))
    epoch = good["epochs"][1]
    return {
        "schema_version 2.0": {**good, "schema_version": 2.0},
        "schema_version [4]": {**good, "schema_version": [4]},
        "schema_version {}": {**good, "schema_version": {}},
        "schema_version huge": {**good, "schema_version": "HUGE"},  # written as 5,000 digits
        "contention {}": {**good, "epochs": [good["epochs"][0], {**epoch, "contention": {}}]},
        "per-rank contention not a list": {**good, "epochs": [good["epochs"][0], {
            **epoch, "contention": {**epoch["contention"], "per_rank": {"0": 0.5}}}]},
        "a rank's share a text": {**good, "epochs": [good["epochs"][0], {
            **epoch, "contention": {**epoch["contention"],
                                    "per_rank": [{"interrupt_share": "0.5"}]}}]},
        "packages a list": {**good, "env": {**good["env"], "packages": ["torch"]}},
        "digests not text": {**good, "evidence": {**good["evidence"],
                                                  "replica_weight_digests": [[1]]}},
        "one epoch": {**good, "epochs": good["epochs"][:1]},
        "negative seconds": {**good, "epochs": [good["epochs"][0], {**epoch, "seconds": -1.0}]},
        "zero seconds": {**good, "epochs": [good["epochs"][0], {**epoch, "seconds": 0.0}]},
        "attribution of another shape": {**good, "attribution": {"epochs": [1]}},
        "math a text": {**good, "backend_details": {**good["backend_details"], "math": "tf32"}},
        # numbers out of their range: a rate of -569 or 5.6e14 samples/s, an accuracy of 500%
        "negative samples": {**good, "epochs": [good["epochs"][0], {**epoch, "samples": -1024}]},
        "more samples than the data": {**good, "epochs": [good["epochs"][0],
                                                          {**epoch, "samples": 10 ** 15}]},
        "test accuracy 5": {**good, "test_accuracy": 5.0},
        "epoch accuracy below 0": {**good, "epochs": [good["epochs"][0],
                                                      {**epoch, "accuracy": -0.1}]},
        "negative step time": {**good, "step_time_p50": -0.01},
    }


def test_an_epoch_faster_than_any_device_trains_is_no_measurement(tmp_path):
    """An epoch of 1e-300 s (its rate 4e303 samples/s, which the report once ranked first with
    no mark) is no measurement: under 1 µs a step, the row is a skipped line that says why,
    for the report as for every reader."""
    good = hand_made_row(rates=(80, 100))
    steps = -(-good["epochs"][1]["samples"] // good["global_batch"])
    fast = {**good, "run_id": "fast",
            "epochs": [good["epochs"][0], {**good["epochs"][1], "seconds": 1e-300}]}
    assert row_problem(good) is None
    assert row_problem(fast) == (f"epoch 2 took 1e-300 s for {steps} step(s), under 1 µs a "
                                 f"step: faster than any device trains, so not a measurement")
    results = write_rows(tmp_path / "r.jsonl", [good, fast])
    report = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0, report.stderr
    assert "line 2: not a result row: epoch 2 took 1e-300 s" in report.stderr
    assert "1 row (1 ok, 0 not ok)" in report.stdout


def test_a_number_that_is_not_one_is_named_as_it_is():
    """A top-level NaN is named as the nested ones are: its value, not its type (a NaN is a
    float, and was called 'float, not int or float')."""
    good = hand_made_row(rates=(80, 100))
    assert row_problem({**good, "lr": float("nan")}) == "'lr' is nan, not int or float"
    assert row_problem({**good, "cell_seconds": float("inf")}) == \
        "'cell_seconds' is inf, not int or float"


@pytest.mark.processes(
    "the dry run measures the frameworks' costs in real cells (common/running/timings.py)")
def test_a_row_of_the_wrong_shape_is_a_skipped_line_for_every_reader(tmp_path):
    results = tmp_path / "r.jsonl"
    rows = bad_rows()
    with open(results, "w") as f:
        f.write(json.dumps(hand_made_row(rates=(80, 100), batch=64)) + "\n")
        for row in rows.values():
            f.write(json.dumps(row).replace('"HUGE"', "1" + "0" * 5000) + "\n")
    valid, problems = read_rows(results)
    assert len(valid) == 1 and len(problems) == len(rows), problems
    report = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md,csv")
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    dry = xbench_here("grid", "--preset", "smoke", "--results", results, "--dry-run")
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr
    assert xbench_here("compare", results, results).returncode == 0


def test_a_probe_record_of_the_wrong_shape_is_skipped_with_a_note(tmp_path):
    results = write_rows(tmp_path / "r.jsonl", [hand_made_row(rates=(80, 100))])
    (tmp_path / "probe.jsonl").write_text(
        json.dumps({"probe_version": 1, "env": {}, "matmul": [{"gflops": 0}], "all_reduce": []})
        + "\n"
        + json.dumps({"probe_version": 1}) + "\n")
    report = xbench_here("report", results, "--out", tmp_path / "out", "--format", "md")
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert report.stderr.count("probe.jsonl: line") == 2
