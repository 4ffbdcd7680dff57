"""TensorFlow's and JAX's accumulation and compiled steps, from the session's knobs grid (the
preset's tf-multiworker and jax-dp cells, no cells of its own): K micro-batches summed into one
update train the trajectory of one batch, in both sync modes, the same as PyTorch's DDP; and
tf-multiworker's --compile on says why it cannot run (XLA compiles no RING collective)."""
import pytest

from xbench.common.backends.traits import TRAITS

# Two epochs of the small model in float32: the micro-batches' sums and the frameworks' kernels
# add in other orders, epoch losses agreeing to about 1e-7 relative (seen: 2e-8 to 1e-7).
FLOAT32 = 1e-5
ACCUMULATED = [(4, "last"), (4, "each")]


def losses(row) -> list[float]:
    return [epoch["loss"] for epoch in row["epochs"]]


@pytest.mark.parametrize("backend", ["tf-multiworker", "jax-dp"])
@pytest.mark.parametrize("accumulate,sync", ACCUMULATED)
def test_micro_batches_train_the_trajectory_of_one_batch(knobs, backend, accumulate, sync):
    """One update of K micro-batches' summed gradients is one batch's update: its epochs' losses
    are the unaccumulated cell's, and pt-ddp's (the cross-framework trajectory)."""
    row = knobs.rows[(backend, accumulate, sync, "off")]
    for reference in (knobs.rows[(backend, 1, "last", "off")],
                      knobs.rows[("pt-ddp", 1, "last", "off")]):
        assert losses(row) == pytest.approx(losses(reference), rel=FLOAT32)
    assert row["backend_details"]["accumulation"]["how"] == TRAITS[backend].sync_modes[sync]


def test_tf_multiworker_compiled_says_why_it_cannot_run(knobs):
    refused = knobs.unsupported[("tf-multiworker", 1, "last", "on")]
    assert refused["error"] == f"compile on: {TRAITS['tf-multiworker'].no_compile}"
    assert "ring" in refused["error"]


def test_jax_each_compiles_without_the_combiners(knobs):
    """Where XLA would merge the K all-reduces, the row says what the step was compiled
    without."""
    compiled = knobs.rows[("jax-dp", 4, "each", "off")]["backend_details"]["compiled"]
    assert "cpu-all-reduce-combiner" in compiled["xla_options"]["xla_disable_hlo_passes"]
