"""The JAX backends (jax-single, jax-dp, jax-multiprocess, keras-jax) as the smoke grid's rows
record them: one compiled step over a mesh of the cell's devices, its compile time and XLA's FLOP
count beside the spec's, the step split by JAX's trace of its XLA ops (its all-reduce timed, with
its bytes), read by predict and the why; and their bad input: fp16 (no
loss scaler in JAX) and more CPU devices than the machine can split. Their trajectory against
every other backend is tests/test_smoke.py's (gpt-tiny's: tests/test_language_model.py's;
ResNet-18's and VGG-19's: tests/test_cifar.py's)."""
from pathlib import Path

import pytest

from tests.helpers import write_grid, xbench, xbench_here
from xbench.common.backends.traits import TRAITS
from xbench.common.results.store import read_rows
from xbench.common.workload.models import MODELS

DATA = Path(__file__).with_name("data")
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


def test_a_jax_step_is_split_by_the_xla_ops_its_trace_saw(smoke):
    """Sampled steps are traced (jax.profiler) and their ops labelled by the names JAX gave
    them (or, where a name says no part, by the work they serve); the gradients cross in one
    all-reduce XLA inserted after backward, carrying every parameter's gradient once
    (float32), each gradient's ready moment recorded."""
    for (backend, devices), row in jax_rows(smoke).items():
        attribution = row["attribution"]
        how = attribution["how"]
        assert how["backward"].startswith("JAX's profiler inside the step's call"), backend
        assert "make_array_from_process_local_data" in how["input"]
        steps = attribution["epochs"][0]["ranks"][0]["steps"]
        assert attribution["traced_steps"] == {"epochs": "the second on",
                                               "every": steps // 8, "steps": 8}
        gradient_bytes = 4 * row["params"]
        for rank in attribution["epochs"][-1]["ranks"]:
            parts, collective = rank["parts"], rank["collective"]
            assert all(parts[p]["seconds"] > 0 for p in ("forward", "backward", "optimizer",
                                                          "input", "host")), (backend, parts)
            timeline = rank["timeline"]
            if devices == 1:
                assert collective["bytes_per_step"] is None and collective["busy_seconds"] == 0
                continue
            assert collective["bytes_per_step"] == gradient_bytes, (backend, collective)
            assert collective["busy_seconds"] > 0
            assert len(timeline["collectives"]) == 1  # XLA's combiner: one all-reduce
            assert timeline["after_backward"]["all"]  # launched once backward was over
            assert timeline["after_backward"]["bytes"] == gradient_bytes
            assert [g["bytes"] for g in timeline["gradients"]] and sum(
                g["bytes"] for g in timeline["gradients"]) == gradient_bytes
            assert len(timeline["gradients"]) == 6  # the small model's parameter arrays


def test_the_parts_of_a_step_follow_the_names_jax_gave_its_ops():
    """How an XLA instruction is labelled: by JAX's name for it, a fusion by the latest part
    fused into it, an unnamed copy by its consumers (or, where they have no part, as the
    collective it feeds, by its operands)."""
    from xbench.jax_backend.trace import Program
    program = Program((DATA / "jax_step.hlo").read_text())  # a compiled step's text, cut
    assert program.module == "jit_step"
    assert [program.part(n) for n in ("forward", "mixed", "layout", "all-reduce.1", "update",
                                      "sums")] == ["forward", "backward", "backward",
                                                   "collective", "optimizer", "host"]
    assert program.part("copy_fusion") == "backward"  # its fused select runs in backward
    assert program.is_collective("all-reduce.1") and not program.is_collective("layout")
    assert program.gradients("all-reduce.1") == [("layout", 16), ("forward", 16)]


def test_the_ops_xla_expands_max_pools_gradient_into_are_backward():
    """jax-single's small-model step as XLA compiled it on this CPU (a recorded program, JAX
    0.10: `JaxLoop.step.as_text()`). XLA expands max-pool's gradient (select_and_scatter) into
    four iotas and a reduce-window over the pool's input, run before backward and named by JAX
    as nothing: they serve the scatter into the gradient, so they are backward, as is the
    convolution's kernel gradient XLA made (its consumer, the update, is the optimizer's, its
    operands backward's: a gradient's last op). A copy of a weight that forward reads first is
    forward; the update under the optimizer's scope is the optimizer's; an unnamed sum the
    totals take is bookkeeping."""
    from xbench.jax_backend.trace import Program
    program = Program((DATA / "jax_small_step.hlo").read_text())
    expansion = [f"wrapped_iota{suffix}" for suffix in ("", ".1", ".2", ".3")] + [
        "wrapped_reduce-window", "get-tuple-element.1", "concatenate_bitcast_fusion.1"]
    assert all(program.instructions[name].op_name == "" for name in expansion)
    assert {program.part(name) for name in expansion} == {"backward"}
    assert "select_and_scatter" in program.instructions["wrapped_scatter.1"].op_name
    assert program.part("wrapped_scatter.1") == "backward"
    assert program.part("ynn_fusion.1") == "backward"  # the kernel's gradient, unnamed
    assert program.part("ynn_fusion.8") == "forward"  # the convolution, named
    assert program.part("copy.16") == "forward"  # fc1's kernel, read by forward, then the rest
    assert program.part("multiply_add_fusion.6") == "optimizer"
    assert program.part("wrapped_reduce-window.2") == "host"


def test_accumulations_split_of_the_batch_serves_forward_not_the_optimizer():
    """--accumulate K splits each device's batch into micro-batches under shard_map, outside
    the derivative: JAX names those ops by no part, so a slice belongs to the forward pass that
    reads it, and a forward fusion that takes its slice in stays forward; only the update's
    named scope is the optimizer's."""
    from xbench.jax_backend.trace import Program
    program = Program((DATA / "jax_accumulating_step.hlo").read_text())  # cut
    assert [program.part(name) for name in ("micro", "forward", "relu", "grad", "update")] == [
        "forward", "forward", "forward", "backward", "optimizer"]


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
def test_the_traits_say_how_the_compiled_steps_collectives_are_counted(backend):
    traits = TRAITS[backend]
    if traits.spans_devices:
        assert traits.collectives_counted.startswith("the collectives XLA inserted")
        assert "SyncBatchNorm" in traits.batchnorm_statistics
        assert not traits.protocol["cpu"].collectives_in_compute
    else:
        assert traits.collectives_counted is None


def test_predict_reads_a_jax_steps_parts_as_every_other_backends(smoke):
    """A traced JAX step's compute and communication are apart: the what-if scales them as it
    does pt-ddp's."""
    import json
    run = xbench_here("predict", smoke.results, "--link", "ib-ndr", "--devices", "1,8", "--json")
    assert run.returncode == 0, run.stderr
    predicted = json.loads(run.stdout)["predicted"]
    for backend in ("jax-dp", "jax-multiprocess", "keras-jax", "pt-ddp"):
        rows = [r for r in predicted if r["backend"] == backend and r["total"] == 8]
        assert rows and all(r["rate"] > 0 for r in rows), (backend, rows)


def test_a_verdicts_why_splits_a_jax_step_into_its_parts(smoke):
    import pandas as pd

    from xbench.reports.judging.why import why
    from xbench.reports.numbers import analysis
    from xbench.reports.numbers.rows import load
    frame, _ = load([smoke.results], None, True)
    cells = analysis.cell_table(frame)
    attributed = analysis.attribution(cells)
    limits = pd.DataFrame(columns=["env", "cell_key", "bandwidth_share"])
    for backend in ("jax-dp", "jax-multiprocess", "keras-jax", "pt-ddp"):
        cell = cells[(cells["backend"] == backend) & (cells["devices"] == 2)].iloc[0]
        said = why(cell, attributed, limits)
        assert said.startswith(("the step spends", "the step is nearly all compute")), said
        if backend != "pt-ddp":  # XLA's combined all-reduce, once backward is over
            assert "every collective ran after backward, nothing hidden" in said, said
