"""The set-up's settings (`Role.SETUP`): what is trained on what, for how long, from which seed
and to which target. Cells compared must agree on them; most are axes of the cell key."""
from __future__ import annotations

from xbench.common.backends.model_files import described
from xbench.common.grids.setting import Role, Setting
from xbench.common.workload.data import DATA_KINDS, TEST_SAMPLES, TRAIN_SAMPLES
from xbench.common.workload.models import MODELS

BATCH_MODES = ("global", "per_device")
SEEDS = 2**32 - 1  # seeds are 32-bit in every framework


def _batch_part(cell) -> str:
    nodes = f"|n{cell.nodes}" if cell.nodes > 1 else ""
    return f"|{cell.batch_mode}-b{cell.batch}{nodes}"


def check_model(name: str) -> str:
    """One of xbench's models, or a user's model file named by `path@digest` and built once in
    each framework here before any cell runs (common.backends.model_files)."""
    return described(name).name


SETUP_SETTINGS = [
    Setting("models", str, None, "Models: " + ", ".join(MODELS) + "; or your own: a .py file "
            "(or a module) defining pytorch() and/or keras() (docs/your-model.md).", axis=True,
            flag="--model",
            field="model", check=check_model, key_part=lambda c: f"|{c.model}",
            role=Role.SETUP),
    Setting("multiples", int, None, "Dataset multiples, e.g. 1,4,8.", axis=True,
            flag="--multiple", field="multiple", row="dataset_multiple", maximum=100,
            why="the blog's largest dataset is 8x; at 100x one epoch is 6 million samples, whose "
                "sample order alone takes hundreds of MB per process",
            key_part=lambda c: f"|x{c.multiple}", role=Role.SETUP),
    Setting("batch_mode", str, "global",
            "global: the batch is split over devices (strong scaling); per_device: each device "
            "keeps it (weak scaling).", choices=BATCH_MODES, key_part="batches", role=Role.SETUP),
    Setting("batches", int, None, "Batch sizes, e.g. 128,256,512.", axis=True, flag="--batch",
            field="batch", row=None, maximum=2**31 - 1, why="no batch is larger",
            key_part=_batch_part, role=Role.SETUP, column="batch"),
    Setting("epochs", int, 2, "Epochs per run (>= 2: epoch 1 warms up).", row="epochs_given",
            since=11, minimum=2,
            maximum=1000,
            why="epoch 1 warms up (tracing, allocators, autotuning) and every rate, speedup and "
                "verdict is read from epoch 2; a benchmark needs 2 and the lab 5",
            key_part=lambda c: f"|e{c.epochs}", role=Role.SETUP),
    Setting("seed", int, 0, "Seed of the model and the data order (the first of --seeds).",
            minimum=0, maximum=SEEDS, why="seeds are 32-bit in every framework",
            key_part=lambda c: f"|seed{c.seed}", role=Role.SETUP, draw=True),
    # training to a target (common.measuring.target)
    Setting("target_accuracy", float, 0.0,
            "Train until the test accuracy reaches this (0-1), evaluated --evals-per-epoch times "
            "an epoch, or until --epochs (then the row says converged: false); the row records "
            "the time, samples and epochs to the target and the accuracy curve (default 0: no "
            "target, train --epochs).", minimum=0, maximum=1, why="a share of the test set",
            zero_is_null=True,
            key_part=lambda c: (f"|target{c.target_accuracy:g}-evals{c.evals_per_epoch}"
                                if c.target_accuracy else ""), since=9, role=Role.SETUP),
    Setting("target_loss", float, 0.0,
            "Train until the test (a language model's validation) loss falls to this, in nats "
            "per token, evaluated --evals-per-epoch times an epoch, or until --epochs (then the "
            "row says converged: false); recorded as a target accuracy is (default 0: no "
            "target).", minimum=0, maximum=100, why="nats per token; a uniform guess over 65 "
            "characters is 4.17", zero_is_null=True,
            key_part=lambda c: (f"|loss{c.target_loss:g}-evals{c.evals_per_epoch}"
                                if c.target_loss else ""), since=14, role=Role.SETUP),
    Setting("evals_per_epoch", int, 4,
            "With a target accuracy or loss: evaluations an epoch, after every 1/N of its steps, "
            "the "
            "same steps in every backend (default 4).", maximum=100,
            why="more evaluations than that cost more time than the training they time",
            key_part="target_accuracy", since=9, role=Role.SETUP),
    # the data
    Setting("data", str, "mnist",
            "Real MNIST, real CIFAR-10 (resnet18, vgg19), real Tiny Shakespeare (the gpt "
            "models), synthetic images (tokens) shaped as the model's dataset, or a model "
            "file's own data() (model).",
            row="dataset", choices=DATA_KINDS,
            key_part=lambda c: f"|{c.data}", role=Role.SETUP),
    Setting("max_train_samples", int, 0, "Cap the base training set (before multiples).",
            minimum=0, maximum=max(TRAIN_SAMPLES.values()), why="no training set here is larger",
            key_part=lambda c: f"|cap{c.max_train_samples}" if c.max_train_samples else "",
            role=Role.SETUP),
    Setting("max_test_samples", int, 0,
            "Cap the test set accuracy and loss are measured on (default: all of it: 10,000 "
            "images, or a language model's validation windows).", section="input",
            minimum=0, maximum=TEST_SAMPLES, why="no test set here is larger",
            key_part=lambda c: f"|test{c.max_test_samples}" if c.max_test_samples else "",
            since=4, role=Role.SETUP),
]
