"""The JAX backends (jax-single, jax-dp, jax-multiprocess, keras-jax) as the smoke grid's rows
record them: one compiled step over a mesh of the cell's devices, its compile time and XLA's FLOP
count beside the spec's, the step recorded as one untraced call; and their bad input: fp16 (no
loss scaler in JAX) and more CPU devices than the machine can split. Their trajectory against
every other backend is tests/test_smoke.py's (gpt-tiny's: tests/test_language_model.py's;
ResNet-18's and VGG-19's: tests/test_cifar.py's)."""
import pytest

from tests.helpers import write_grid, xbench, xbench_here
from xbench.common.backends.traits import TRAITS
from xbench.common.results.store import read_rows
from xbench.common.workload.models import MODELS

JAX = [b for b in TRAITS if TRAITS[b].framework.name == "jax"]
# XLA's cost analysis of the small model's compiled training step per sample against the spec's
# products: 1.117 at 1 device, 1.131 at 2 (3,750,421 / 3,315,456): it counts the elementwise ops,
# the loss and Adam's update too, and each device's program updates every parameter.
XLA_OVER_SPEC = (1.0, 1.3)


def jax_rows(smoke):
    return {key: row for key, row in smoke.rows.items() if key[0] in JAX}


def test_every_jax_cell_ran_its_mesh_and_says_how(smoke):
    rows = jax_rows(smoke)
    assert set(rows) == {("jax-single", 1), ("jax-dp", 1), ("jax-dp", 2),
                         ("jax-multiprocess", 1), ("jax-multiprocess", 2), ("keras-jax", 1),
                         ("keras-jax", 2)}
    for (backend, devices), row in rows.items():
        assert row["status"] == "ok", (backend, devices, row["error"])
        details = row["backend_details"]
        processes = devices if backend == "jax-multiprocess" else 1
        assert details["mesh"]["devices"] == devices and details["mesh"]["processes"] == processes
        assert len(details["mesh"]["local_devices"]) == devices // processes
        assert row["framework"] == "jax"
        library = "Keras" if backend == "keras-jax" else "Flax"
        assert details["model_library"].startswith(library) and details["optimizer_library"]
        # compiled ahead of time in the set-up: its seconds recorded apart from epoch 1's
        assert details["compile_seconds"] > 0
        check = details["xla_flops_check"]
        assert check["spec"] == MODELS["small"].training_flops_per_sample()
        assert XLA_OVER_SPEC[0] < check["ratio"] < XLA_OVER_SPEC[1], (backend, devices, check)
        assert details["reduction"] == ("all-reduce" if devices > 1 else "none")
        assert len(row["hosts"]) == processes


def test_the_compiled_step_is_one_untraced_call_and_the_input_is_its_own(smoke):
    """The marks see the batch's placement and the call; what is inside the call is not
    split, and the row says so rather than inventing shares."""
    for key, row in jax_rows(smoke).items():
        how = row["attribution"]["how"]
        assert how["untraced"].startswith("not split: the step is one XLA program"), key
        assert "make_array_from_process_local_data" in how["input"]
        for epoch in row["attribution"]["epochs"]:
            for rank in epoch["ranks"]:
                parts = rank["parts"]
                assert parts["forward"]["seconds"] == parts["backward"]["seconds"] == 0
                assert parts["untraced"]["seconds"] > 0 and parts["input"]["seconds"] > 0


def test_fp16_and_more_devices_than_the_cpu_can_split_are_refused(mnist_dir, tmp_path):
    grid = write_grid(tmp_path, name="jax-fp16", backends=["jax-single"], precision=["fp16"],
                      devices=[1])
    run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", tmp_path / "r.jsonl")
    assert run.returncode == 0, run.stderr
    (row,), _ = read_rows(tmp_path / "r.jsonl")
    assert row["status"] == "unsupported" and row["epochs"] == []
    assert "precision fp16" in row["error"] and "loss scale" in row["error"]
    many = write_grid(tmp_path, name="jax-many", backends=["jax-dp"], devices=[64])
    run = xbench_here("grid", many, "--data-dir", mnist_dir, "--results",
                      tmp_path / "many.jsonl")
    assert run.returncode == 2 and "--devices 64 is more than this machine can run on CPU" in \
        run.stderr, run.stderr
    assert not (tmp_path / "many.jsonl").exists()


@pytest.mark.parametrize("backend", JAX)
def test_the_traits_say_what_the_compiled_step_does_not_let_xbench_see(backend):
    traits = TRAITS[backend]
    assert traits.collectives_counted is None
    if traits.spans_devices:
        assert traits.collectives_not_counted.startswith("not counted apart: XLA puts")
        assert "SyncBatchNorm" in traits.batchnorm_statistics


def test_predict_does_not_read_parts_a_jax_step_does_not_have(smoke):
    """A JAX step's compute and communication are one call: the what-if says it cannot scale
    them apart (and predicts the others' as before)."""
    import json
    run = xbench_here("predict", smoke.results, "--link", "ib-ndr", "--devices", "1,8", "--json")
    assert run.returncode == 0, run.stderr
    predicted = json.loads(run.stdout)["predicted"]
    for backend in ("jax-dp", "jax-multiprocess", "keras-jax"):
        (row,) = [r for r in predicted if r["backend"] == backend]
        assert row["note"].startswith("not predicted: ") and "one call" in row["note"], row
    assert any(r["backend"] == "pt-ddp" and r["total"] == 8 and r["rate"] > 0 for r in predicted)


def test_a_verdicts_why_says_a_jax_step_is_one_call(smoke):
    import pandas as pd

    from xbench.reports import analysis, verdicts
    from xbench.reports.load import load
    frame, _ = load([smoke.results], None, True)
    cells = analysis.cell_table(frame)
    attributed = analysis.attribution(cells)
    limits = pd.DataFrame(columns=["env", "cell_key", "bandwidth_share"])
    for backend in ("jax-dp", "jax-multiprocess", "keras-jax", "pt-ddp"):
        cell = cells[(cells["backend"] == backend) & (cells["devices"] == 2)].iloc[0]
        said = verdicts.why(cell, attributed, limits)
        if backend == "pt-ddp":  # split into its parts
            assert said.startswith(("the step spends", "the step is nearly all compute")), said
        else:
            assert said.startswith("not known: ") and "one call" in said, said
