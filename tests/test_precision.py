"""The precision axis in real cells on real MNIST: the backends train at bf16 and fp16 on this
CPU (torch.autocast, Keras' mixed policies; fp16 with a dynamic loss scale, its history in the
row), records the math it used, and follows one trajectory across frameworks within a tolerance
looser than float32's; tf32 on a CPU is `unsupported` with the reason."""
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, write_grid, xbench
from xbench.common.results.store import read_rows
from xbench.common.workload.precision import LOSS_SCALE_START
from xbench.reports.step_model.utilisation import against_limits

# pt-dp on one device is pt-single's loop under a DataParallel with nothing to scatter: left out
SINGLE = ["pt-single", "tf-single", "jax-single"]
# jax-multiprocess runs jax-dp's compiled step over processes (on the smoke grid and Slurm);
# tf-multiworker and hvd-tf train at fp16 below (SCALED), under the Keras mixed policy that every
# TensorFlow backend sets alike (tf_backend.train), tf-mirrored's at bf16 here; hvd-torch is left
# out: its forward enters pt-ddp's autocast (pt_backend.train), and at bf16 it updates as at
# float32 (the loss scaler is off), on the smoke grid
SPANNING = ["pt-ddp", "tf-mirrored", "jax-dp", "keras-jax"]
NO_FP16 = ["jax-single"]  # JAX has no loss scaler of its own: fp16 is unsupported with the reason
# fp16 on 2 ranks: where the loss is scaled before (pt-ddp, hvd-tf) and after (the strategies,
# whose replicas must agree on an overflow) the gradients are summed
SCALED = ["pt-ddp", "tf-mirrored", "tf-multiworker", "hvd-tf"]
# The largest relative difference of an epoch's loss from pt-single's at the same precision, in
# every backend, measured on 512 images (4 steps an epoch): bf16 3.0e-4, fp16 2.5e-4, float32
# 2.9e-6; on 1,024 images bf16 1.7e-3 (pt-ddp on 2 ranks), fp16 2.0e-4; on the SAMPLES below
# bf16 8.4e-4 (keras-jax), fp16 1.7e-5. The bounds are about 3x the larger of each.
TOLERANCE = {"bf16": 5e-3, "fp16": 1e-3}
SAMPLES = 256


@pytest.fixture(scope="module")
def rows(mnist_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("precision")
    found = {}
    for name, settings in (("single", {"backends": SINGLE, "devices": [1],
                                       "precision": ["fp32", "bf16", "fp16", "tf32"]}),
                           ("spanning", {"backends": SPANNING, "devices": [2],
                                         "precision": ["bf16"]}),
                           ("scaled", {"backends": SCALED, "devices": [2],
                                       "precision": ["fp16"]})):
        # Keras trains and evaluates at fp16 on a CPU at a few hundred images a second: SAMPLES
        # training images (2 steps an epoch), tested on half as many
        grid = write_grid(folder, name=name, max_train_samples=SAMPLES,
                          max_test_samples=SAMPLES // 2, **settings)
        run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", folder / f"{name}.jsonl",
                     timeout=1800)
        assert run.returncode == 0, run.stdout + run.stderr
        found.update({(r["backend"], r["devices"], r["precision"]): r
                      for r in read_rows(folder / f"{name}.jsonl")[0]})
    return found


def trained(rows, precision):
    return {key: row for key, row in rows.items() if key[2] == precision
            and not (precision == "fp16" and key[0] in NO_FP16)}


@pytest.mark.parametrize("precision, lower", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_every_backend_trains_in_the_lower_precision_and_says_so(rows, precision, lower):
    cells = trained(rows, precision)
    expected = ((set(SINGLE) - set(NO_FP16)) | set(SCALED) if precision == "fp16"
                else set(SINGLE) | set(SPANNING))
    assert {b for b, _, _ in cells} >= expected
    for key, row in cells.items():
        assert row["status"] == "ok", (key, row["error"])
        assert row["cell_key"].endswith(f"|{precision}")
        math = row["backend_details"]["math"]
        assert (math["precision"], math["lower"]) == (precision, lower), key


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_one_trajectory_across_frameworks_within_the_stated_tolerance(rows, precision):
    reference = rows[("pt-single", 1, precision)]
    for key, row in trained(rows, precision).items():
        for mine, theirs in zip(row["epochs"], reference["epochs"], strict=True):
            assert mine["loss"] == pytest.approx(theirs["loss"], rel=TOLERANCE[precision]), key


def test_the_lower_precision_changed_the_arithmetic(rows):
    """bf16 is not float32 relabelled: each framework's bf16 losses leave its own float32 ones by
    more than the two frameworks differ at float32."""
    between = abs(rows[("pt-single", 1, "fp32")]["epochs"][-1]["loss"]
                  - rows[("tf-single", 1, "fp32")]["epochs"][-1]["loss"])
    for backend in ("pt-single", "tf-single", "jax-single"):
        moved = abs(rows[(backend, 1, "bf16")]["epochs"][-1]["loss"]
                    - rows[(backend, 1, "fp32")]["epochs"][-1]["loss"])
        assert moved > 3 * between, (backend, moved, between)


def test_fp16_keeps_its_loss_scale_history(rows):
    for key, row in trained(rows, "fp16").items():
        history = row["backend_details"]["math"]["loss_scale"]
        assert len(history) == len(row["epochs"]), key  # one scale per epoch's end
        # it starts at 2^15 in both frameworks, halves on an overflow, doubles after 2,000 steps
        assert all(scale > 0 and (scale / LOSS_SCALE_START).is_integer()
                   or (LOSS_SCALE_START / scale).is_integer() for scale in history), key
    assert all("loss_scale" not in r["backend_details"]["math"]
               for r in trained(rows, "bf16").values())


def test_fp16_in_jax_is_unsupported_with_the_reason(rows):
    for backend in NO_FP16:
        row = rows[(backend, 1, "fp16")]
        assert row["status"] == "unsupported" and "JAX has none of its own" in row["error"]
        assert row["epochs"] == []


def test_tf32_on_a_cpu_is_unsupported_with_the_reason(rows):
    for backend in SINGLE:
        row = rows[(backend, 1, "tf32")]
        assert row["status"] == "unsupported" and "TF32 is a math mode of NVIDIA" in row["error"]


def test_mfu_of_a_mixed_precision_cell_is_against_the_probes_peak_at_that_precision(rows, probe,
                                                                                      tmp_path):
    """A bf16 cell's FLOPs ran in bf16: its MFU divides by the probe's bf16 matmul (this CPU's is
    about 4x its fp32), a float32 cell's by the fp32 one."""
    import json
    import shutil

    from xbench.reports.numbers import analysis
    from xbench.reports.numbers.rows import load, load_probes
    folder, _, _ = probe
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(rows[(b, 1, p)]) + "\n"
                               for b in ("pt-single", "tf-single") for p in ("fp32", "bf16")))
    shutil.copy(folder / "probe.jsonl", tmp_path / "probe.jsonl")  # beside the results
    frame, _ = load([results], include_contended=True)  # what else ran does not matter here
    probes, problems = load_probes([results], frame)
    assert not problems
    cells = analysis.cell_table(frame)
    limits = against_limits(cells, analysis.attribution(cells), probes)
    for _, limit in limits.iterrows():
        precision = "bf16" if limit["cell_key"].endswith("|bf16") else "fp32"
        assert limit["precision"] == precision, limit["cell_key"]
        assert f"{precision} matmul" in limit["peak_basis"] and limit["mfu"] > 0


def test_the_report_puts_each_precision_beside_the_others(rows, probe, tmp_path):
    import json
    import shutil

    from xbench.reports.page.build import build_report
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for key, r in rows.items() if key[1] == 1))
    shutil.copy(probe[0] / "probe.jsonl", tmp_path / "probe.jsonl")
    build_report([results], tmp_path / "out", formats=["md"], include_contended=True)
    section = ((tmp_path / "out" / "summary.md").read_text()
               .split("## Precision")[1].split("\n## ")[0])
    lines = [line for line in section.splitlines() if line.startswith("|") and "---" not in line]
    assert "MFU at its precision's peak" in lines[0] and "test accuracy" in lines[0]
    shown = {(b, p) for b, d, p in rows if d == 1 and p != "tf32"  # tf32 did not run here
             and not (p == "fp16" and b in NO_FP16)}
    for backend, precision in shown:
        line = next(line for line in lines[1:] if backend in line and f"| {precision} |" in line)
        assert (f"of the {precision} peak" in line if precision in ("fp32", "bf16")
                else "no probe of it" in line), line  # fp16's matmul is probed on GPUs only


# One fp16 step under MirroredStrategy on 2 logical CPUs in which only replica 1's gradient
# overflows (60000 x 2^15 does not fit fp16; 1 x 2^15 does): the weight and the loss scale after.
ONE_OVERFLOW = """
import json, keras, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from xbench.tf_backend.step import AgreedLossScaleOptimizer
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    layer = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    layer.build((None, 1))
    optimizer = AgreedLossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=2.0 ** 15)
    optimizer.build(layer.trainable_variables)
def replica(x):
    with tf.GradientTape() as tape:
        loss = optimizer.scale_loss(tf.reduce_sum(tf.cast(layer(x), tf.float32)))
    gradients = tape.gradient(loss, layer.trainable_variables)
    optimizer.apply_gradients(zip(gradients, layer.trainable_variables))
step = tf.function(lambda x: strategy.run(replica, args=(x,)))
step(strategy.experimental_distribute_values_from_function(
    lambda c: tf.constant([[1.0 if c.replica_id_in_sync_group == 0 else 60000.0]])))
print(json.dumps({"weight": float(layer.kernel.numpy()[0, 0]),
                  "scale": float(optimizer.dynamic_scale.numpy())}))
"""


def test_one_replicas_overflow_skips_the_step_on_every_replica():
    """Under the strategies the gradients reach the loss-scale optimizer unsummed; Keras' own
    takes replica 0's verdict alone (here: the weight became -inf, the scale stayed 2^15). Every
    replica must agree: the step is skipped and the scale halved."""
    done = subprocess.run([sys.executable, "-c", ONE_OVERFLOW], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after == {"weight": 1.0, "scale": LOSS_SCALE_START / 2}
