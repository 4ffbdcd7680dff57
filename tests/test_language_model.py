"""The language-model workload: Tiny Shakespeare read, verified, split and cut into windows as
nanoGPT does; bad input on its settings stopped with one line; and gpt-tiny trained on the real
text through PyTorch, TensorFlow and JAX backends on 1 and 2 devices, one loss trajectory across
them, its validation loss below the characters' unigram entropy after 2 epochs."""
import hashlib
import math
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers import TEXT_DIR, write_grid, xbench, xbench_here
from xbench.common.errors import UserError
from xbench.common.workload import data, shakespeare
from xbench.common.workload.models import MODELS, VOCAB

CONTEXT = 64  # gpt-tiny's
# Cross-entropy of the validation characters under the training split's character frequencies
# (nats): what a model that ignores context scores; 3.347 here (the validation split's own
# unigram entropy is 3.337).
UNIGRAM_NATS = 3.347
# Epoch and validation losses of gpt-tiny on 1,024 windows, batch 32 (the gpt-smoke preset, every
# backend on 1 and 2 devices): at most 4.3e-6 relative, TensorFlow against PyTorch (epoch 1
# 3.2599733 / 3.2599606, validation 2.7035093 / 2.7035134); 8.3e-8 between device counts; JAX
# against PyTorch at most 4.6e-6 (epoch losses; validation 1.6e-6). On the fixture's 512 windows:
# TensorFlow 7.6e-7, JAX 8.0e-7, PyTorch's device counts 3.4e-8.
LOSS_TOLERANCE = 2e-5


@pytest.fixture(scope="module")
def text():
    return shakespeare.load_shakespeare(TEXT_DIR, CONTEXT)


def test_the_text_is_split_as_nanogpt_splits_it_and_cut_into_windows(text):
    raw = (TEXT_DIR / shakespeare.SHAKESPEARE_FILE).read_bytes()
    assert len(raw) == shakespeare.SHAKESPEARE_CHARACTERS
    split = int(len(raw) * 0.9)  # 1,003,854 characters train, 111,540 validate
    assert len(text.train_images) == (split - 1) // CONTEXT == 15_685
    assert len(text.test_images) == (len(raw) - split - 1) // CONTEXT == 1_742
    assert text.train_images.shape == text.train_labels.shape == (15_685, CONTEXT)
    assert text.train_images.max() == VOCAB - 1 and text.train_images.dtype == np.uint8
    alphabet = sorted(set(raw))
    decoded = bytes(alphabet[t] for t in text.train_images[0]) + bytes([alphabet[
        text.train_labels[0, -1]]])
    assert decoded == raw[:CONTEXT + 1]  # the first window and the character after it
    # each window's targets are its inputs shifted by one; the next window starts at its last
    assert (text.train_images[:, 1:] == text.train_labels[:, :-1]).all()
    assert (text.train_images[1:, 0] == text.train_labels[:-1, -1]).all()
    first_validation = bytes(alphabet[t] for t in text.test_images[0])
    assert first_validation == raw[split:split + CONTEXT]
    assert data.train_samples("shakespeare", MODELS["gpt-tiny"]) == 15_685
    assert data.train_samples("synthetic", MODELS["gpt-small"]) == (split - 1) // 256


def test_the_unigram_entropy_the_trained_model_must_beat(text):
    counts = np.bincount(text.train_images.ravel(), minlength=VOCAB) + 1e-12
    frequency = counts / counts.sum()
    validation = text.test_images.ravel()
    assert -np.log(frequency[validation]).mean() == pytest.approx(UNIGRAM_NATS, abs=0.005)


def test_a_damaged_or_missing_text_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("XBENCH_DATA_DIR", raising=False)  # conftest's: the text beside MNIST
    shutil.copy(TEXT_DIR / shakespeare.SHAKESPEARE_FILE, tmp_path / shakespeare.SHAKESPEARE_FILE)
    with open(tmp_path / shakespeare.SHAKESPEARE_FILE, "r+b") as damaged:
        damaged.truncate(1000)
    with pytest.raises(UserError, match="SHA-256 does not match"):
        shakespeare.load_shakespeare(tmp_path, CONTEXT)
    with pytest.raises(UserError, match="Tiny Shakespeare not found"):
        shakespeare.load_shakespeare(tmp_path / "empty", CONTEXT)
    assert hashlib.sha256((TEXT_DIR / shakespeare.SHAKESPEARE_FILE).read_bytes()).hexdigest() \
        == shakespeare.SHAKESPEARE_SHA256


def test_synthetic_tokens_have_the_models_shapes_and_say_so():
    tokens = data.synthetic_tokens(MODELS["gpt-tiny"], seed=0, train=64, test=8)
    assert tokens.train_images.shape == (64, CONTEXT) and tokens.test_labels.shape == (8, CONTEXT)
    assert tokens.dataset == "synthetic" and tokens.is_text
    assert (tokens.train_images[:, 1:] == tokens.train_labels[:, :-1]).all()


BAD = {
    "target loss 0": (["--target-loss", "0"], "target_loss 0 can never be reached"),
    "negative target loss": (["--target-loss", "-1"], "target_loss -1 can never be reached"),
    "two targets": (["--target-loss", "2", "--target-accuracy", "0.5"],
                    "give a target accuracy or a target loss, not both"),
    "a test cap past the validation windows": (["--max-test-samples", "2000"],
                                                "max_test_samples 2,000 is more than the test set "
                                                "(1,742 shakespeare samples"),
    "images for a language model": (["--data", "mnist"],
                                    "model 'gpt-tiny' takes shakespeare text; --data mnist"),
}


@pytest.mark.parametrize("arguments, message", BAD.values(), ids=BAD.keys())
def test_bad_language_model_settings_are_one_line_and_exit_2(arguments, message, tmp_path):
    done = xbench_here("grid", "--preset", "gpt-smoke", *arguments, "--data-dir", TEXT_DIR,
                       "--results", tmp_path / "r.jsonl")
    assert (done.returncode, "Traceback" in done.stderr) == (2, False), done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_text_for_an_image_model_is_one_line(mnist_dir, tmp_path):
    done = xbench_here("grid", write_grid(tmp_path, data="shakespeare"), "--data-dir",
                       mnist_dir, "--results", tmp_path / "r.jsonl")
    assert done.returncode == 2 and "model 'small' takes mnist" in done.stderr, done.stderr


# jax-multiprocess compiles jax-dp's step over processes (its trajectory: tests/test_smoke.py)
TRAJECTORY = [("pt-single", 1), ("pt-ddp", 2), ("pt-fsdp", 2), ("tf-mirrored", 2),
              ("hvd-torch", 2), ("jax-dp", 2), ("keras-jax", 2)]
WINDOWS = 512


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """gpt-tiny through the gpt-smoke preset's settings on WINDOWS windows (half the preset's:
    JAX's steps are most of these cells) and the cells of TRAJECTORY (and no others), through the
    real command line: `rows[(backend, devices)]`; `run` printed the reference's."""
    from xbench.common.results.store import read_rows
    results = tmp_path_factory.mktemp("gpt") / "gpt.jsonl"
    runs = []
    for devices in (1, 2):
        backends = [backend for backend, on in TRAJECTORY if on == devices]
        runs.append(xbench("grid", "--preset", "gpt-smoke", "--backend", ",".join(backends),
                           "--devices", devices, "--max-train-samples", WINDOWS,
                           "--max-test-samples", WINDOWS // 4, "--data-dir", TEXT_DIR,
                           "--results", results, "--contention-limit", "1", timeout=1800))
        assert runs[-1].returncode == 0, runs[-1].stderr
    rows, problems = read_rows(results)
    assert not problems and len(rows) == len(TRAJECTORY)
    return SimpleNamespace(run=runs[0], rows={(r["backend"], r["devices"]): r for r in rows})


def test_one_loss_trajectory_across_frameworks_and_device_counts(trained):
    reference = trained.rows[("pt-single", 1)]
    for key in TRAJECTORY:
        row = trained.rows[key]
        assert row["status"] == "ok", (key, row["error"])
        for mine, theirs in zip(row["epochs"], reference["epochs"], strict=True):
            assert mine["loss"] == pytest.approx(theirs["loss"], rel=LOSS_TOLERANCE), key
            assert mine["accuracy"] == pytest.approx(theirs["accuracy"], abs=1e-3), key
        assert row["test_loss"] == pytest.approx(reference["test_loss"], rel=LOSS_TOLERANCE), key
        assert row["dataset"] == "shakespeare" and row["model"] == "gpt-tiny"
    digests = {tuple(trained.rows[key]["evidence"]["global_batches_digests"])
               for key in TRAJECTORY}
    assert len(digests) == 1  # the same windows in the same global batches everywhere


def test_two_epochs_learn_more_than_character_frequencies(trained):
    row = trained.rows[("pt-single", 1)]
    assert row["test_loss"] < UNIGRAM_NATS, row["test_loss"]
    assert row["epochs"][-1]["loss"] < row["epochs"][0]["loss"]
    assert 0 < row["test_accuracy"] < 1  # next-character accuracy, a share of the tokens
    assert row["flops_per_sample"] * 3 == MODELS["gpt-tiny"].training_flops_per_sample()
    assert "test loss" in trained.run.stdout


def test_fsdp_keeps_the_tied_table_whole_with_the_root(trained):
    """The token table is also the output layer: it stays with FSDP's root, and the one
    parameter is counted once."""
    row = trained.rows[("pt-fsdp", 2)]
    assert row["params"] == 809_856
    assert math.isclose(sum(row["model_state_per_device"]), 809_856 * 4 * 3, rel_tol=0.01)


def test_a_target_loss_is_trained_to_and_reported(tmp_path):
    """--target-loss: evaluations of the validation loss inside the epochs, the run converged
    where one fell to the target, and the report's time to target names it as a loss."""
    from xbench.common.results.store import read_rows
    results = tmp_path / "target.jsonl"
    run = xbench("grid", "--preset", "gpt-smoke", "--backend", "pt-single", "--devices", "1",
                 "--target-loss", "3.1", "--evals-per-epoch", "2", "--seeds", "1",
                 "--data-dir", TEXT_DIR, "--results", results, "--contention-limit", "1")
    assert run.returncode == 0, run.stderr
    (row,), _ = read_rows(results)
    reached = row["time_to_target"]
    assert reached["metric"] == "loss" and reached["target"] == 3.1 and reached["converged"]
    losses = [point["loss"] for point in reached["curve"]]
    assert losses[-1] <= 3.1 < losses[0] or (len(losses) == 1 and losses[0] <= 3.1), losses
    assert all(point["loss"] > 3.1 for point in reached["curve"][:-1])
    assert row["epochs"][0]["evaluation_seconds"] > 0
    report = xbench_here("report", results, "--out", tmp_path / "report", "--format", "md")
    assert report.returncode == 0, report.stderr
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "loss 3.1 nats" in summary
