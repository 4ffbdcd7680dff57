"""The knobs turned before adding devices, across the frameworks, from the session's knobs grid
(the preset's cells: accumulation on a capped link, compiled steps): syncing once moves a
quarter of the bytes of syncing each micro-batch (counted by each library), and `xbench report`
answers both in its sections, stating a comparison only where its interval allows (one run a
side: never). The verdicts' words and compile's pay-off on constructed numbers."""
import math

import pandas as pd
import pytest

from tests.helpers import xbench_here
from xbench.common.backends.traits import TRAITS
from xbench.common.grids.grid import preset_path, read_grid_file
from xbench.reports.judging.comparisons import Judgement
from xbench.reports.judging.knobs import Finding, payoff_text
from xbench.reports.numbers.stats import Ratio

BACKENDS = read_grid_file(preset_path("knobs"))["backends"]
# K micro-batches' gradients summed are the batch's mean gradient: the same trajectory as one
# batch up to float32 sums in another order. Measured: at most 1e-7 relative (1.8922545 against
# 1.8922546 in epoch 1) in PyTorch.
ACCUMULATED = 1e-6
# Each framework against pt-ddp on the knobs slice (8 steps an epoch): TensorFlow's epoch-2 loss
# 0.58210119 against PyTorch's 0.58214219 (7.0e-5 relative), accumulating or not and before
# accumulation was added; JAX's within 1e-7.
CROSS_FRAMEWORK = 2e-4
# A compiled step's kernels may sum in another order (torch.compile: no difference in 7 digits
# on the small model here).
COMPILED = 1e-4


def losses(row) -> list[float]:
    return [epoch["loss"] for epoch in row["epochs"]]


def rank0(row) -> dict:
    return row["attribution"]["epochs"][-1]["ranks"][0]["collective"]


def test_every_cell_of_the_preset_ran_or_says_why_not(knobs):
    assert not knobs.problems
    assert {row["status"] for row in knobs.all} <= {"ok", "unsupported"}
    for backend in BACKENDS:  # accumulation runs everywhere
        for accumulation in ((1, "last"), (4, "last"), (4, "each")):
            assert (backend, *accumulation, "off") in knobs.rows
    assert "jax.jit" in knobs.unsupported[("jax-multiprocess", 1, "last", "on")]["error"]
    assert knobs.rows[("jax-multiprocess", 1, "last", "off")]["backend_details"]["compiled"][
        "compiled"]
    for key, row in knobs.unsupported.items():
        assert key[3] == "on" and row["error"].startswith("compile on: ")


@pytest.mark.parametrize("backend", BACKENDS)
def test_syncing_once_moves_a_quarter_of_the_bytes_of_syncing_each(knobs, backend):
    """On the capped link, 4 micro-batches synced last cross once a step, as one batch does;
    synced each, 4 times: the collectives and bytes each library counted, per optimizer step."""
    one, last, each = (rank0(knobs.rows[(backend, k, sync, "off")])
                       for k, sync in ((1, "last"), (4, "last"), (4, "each")))
    assert last["bytes_per_step"] and each["bytes_per_step"] == 4 * last["bytes_per_step"]
    assert last["bytes_per_step"] == one["bytes_per_step"]
    assert each["collectives_per_step"] == 4 * last["collectives_per_step"]
    details = knobs.rows[(backend, 4, "each", "off")]["backend_details"]
    assert details["accumulation"]["syncs_per_step"] == 4
    assert details["accumulation"]["micro_batch"] == 128 // 2 // 4


@pytest.mark.parametrize("backend", [*BACKENDS, "pt-fsdp"])
def test_accumulating_follows_one_batchs_trajectory_in_every_framework(knobs, backend):
    """4 micro-batches synced last or each train what one batch does, in each backend's own way
    (no_sync, set_requires_gradient_sync, backward_passes_per_step, a sum inside the step), and
    every framework follows pt-ddp's; compiled, within COMPILED of not."""
    one = losses(knobs.rows[(backend, 1, "last", "off")])
    for sync in ("last", "each"):
        assert losses(knobs.rows[(backend, 4, sync, "off")]) == pytest.approx(
            one, rel=ACCUMULATED), sync
    assert one == pytest.approx(losses(knobs.rows[("pt-ddp", 1, "last", "off")]),
                                rel=CROSS_FRAMEWORK)
    for sync in ("last", "each"):
        assert (knobs.rows[(backend, 4, sync, "off")]["backend_details"]["accumulation"]["how"]
                == TRAITS[backend].sync_modes[sync])
    compiled = knobs.rows.get((backend, 1, "last", "on"))
    if compiled is None:  # refused, and why: test_every_cell_of_the_preset_ran_or_says_why_not
        assert (backend, 1, "last", "on") in knobs.unsupported
    else:
        assert losses(compiled) == pytest.approx(one, rel=COMPILED)
        assert compiled["backend_details"]["compiled"]["compiled"]
        assert compiled["warmup_seconds"] is not None


def test_a_compiled_pytorch_step_compiled_its_graphs(knobs):
    """torch.compile of the model before DDP or Horovod wraps it: AOTAutograd compiled its
    forward and backward (torch.compile of a DDP module compiles none in torch 2.13); FSDP2's
    sharded model compiled none, so pt-fsdp refuses it."""
    for backend in ("pt-ddp", "hvd-torch"):
        details = knobs.rows[(backend, 1, "last", "on")]["backend_details"]["compiled"]
        assert details["by"] == "torch.compile" and details["graphs"] >= 1
    assert "compiled no graph" in knobs.unsupported[("pt-fsdp", 1, "last", "on")]["error"]


def test_the_report_answers_both_knobs(knobs, tmp_path):
    done = xbench_here("report", knobs.results, "--out", tmp_path / "out", "--format", "md",
                       "--include-contended")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "summary.md").read_text()
    accumulation = page[page.index("## Accumulation"):page.index("## Compiled or eager")]
    compiled = page[page.index("## Compiled or eager"):]
    compiled = compiled[:compiled.index("\n## ")]
    for backend in BACKENDS:
        # one run a side: every comparison is inconclusive, none is stated
        assert (f"{backend} on 2 devices, link=400mbit, K=4: syncing once (last) against after "
                f"each micro-batch: ") in accumulation
    findings = [line for line in accumulation.splitlines() if ": syncing once (last)" in line
                or "against one batch" in line]
    assert len(findings) == 3 * (len(BACKENDS) + 1)  # and pt-fsdp's
    assert all("inconclusive: one run a side has no interval" in line for line in findings)
    assert accumulation.count("(counted)") >= 3 * len(BACKENDS)
    jax_row = next(line for line in compiled.replace("\\-", "-").splitlines()
                   if "| jax-multiprocess |" in line)
    assert "jax.jit (XLA): compiled ahead of the first step" in jax_row  # JAX's off is compiled
    ran_compiled = [b for b in BACKENDS if (b, 1, "last", "on") in knobs.rows]
    for backend in ran_compiled:
        assert f"{backend} on 2 devices: compiled against not: " in compiled


def test_a_finding_says_what_its_interval_allows():
    ratio = Ratio(1.6, 1.4, 1.8, (3, 3))
    stated = Finding("pt-ddp, K=4", ratio, Judgement("above", 0.001, 3, None, 0),
                     "syncing once pays off at K=4", "syncing once costs at K=4")
    assert stated.text == "pt-ddp, K=4: syncing once pays off at K=4 (1.60× [1.40, 1.80])"
    open_ = Finding("pt-ddp, K=4", Ratio(1.1, 0.9, 1.3, (3, 3)),
                    Judgement(None, 0.3, 3, 7, 0), "pays", "costs")
    assert open_.text.endswith("inconclusive: about 7 repeats each would settle it")
    single = Finding("x", Ratio(1.1, math.nan, math.nan, (1, 1)),
                     Judgement(None, math.nan, 1, None, 0), "pays", "costs")
    assert "one run a side has no interval" in single.text


def test_compiling_pays_off_after_its_extra_warm_up_over_the_time_it_saves():
    """Eager epochs of 10 s, compiled 1.25× [1.2, 1.3] as fast: 2 s saved an epoch [1.67, 2.31];
    6 s more warm-up: 3 epochs [2.6, 3.6]."""
    off = pd.Series({"warmup_seconds": 1.0, "epoch2_seconds": 10.0, "epoch2_samples": 4096})
    on = pd.Series({"warmup_seconds": 7.0})
    faster = Judgement("above", 0.001, 3, None, 0)
    text = payoff_text(on, off, Ratio(1.25, 1.2, 1.3, (3, 3)), faster)
    assert text.startswith("it pays off after 3.0 epochs [2.6, 3.6] of 4,096 samples")
    assert payoff_text(pd.Series({"warmup_seconds": 0.5}), off, Ratio(1.25, 1.2, 1.3, (3, 3)),
                       faster).startswith("it pays off from the first epoch")
    assert payoff_text(on, off, Ratio(1.0, 0.9, 1.1, (3, 3)),
                       Judgement(None, 0.5, 3, None, 0)) == ""


def test_a_compile_xla_cannot_do_says_why_and_jax_each_keeps_its_all_reduces_apart(knobs):
    """tf-multiworker's compiled step is refused (XLA compiles no RING collective);
    jax-multiprocess's `each` step is compiled without XLA's all-reduce combiners, which would
    merge its K all-reduces into one (its 4 collectives a step: the test above), and the row
    says so."""
    refused = knobs.unsupported[("tf-multiworker", 1, "last", "on")]
    assert refused["error"] == f"compile on: {TRAITS['tf-multiworker'].no_compile}"
    assert "ring" in refused["error"]
    compiled = knobs.rows[("jax-multiprocess", 4, "each", "off")]["backend_details"]["compiled"]
    assert "cpu-all-reduce-combiner" in compiled["xla_options"]["xla_disable_hlo_passes"]
