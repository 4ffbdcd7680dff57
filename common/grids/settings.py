"""Every setting of a grid, declared once.

One `Setting` per grid-file key says everything the rest of xbench needs to know of it: its type,
default and allowed values, whether it is an axis (a list: every combination of the axes is a
cell), its command-line flag and help, the field of `common.grids.cell.Cell` it becomes, the part of
the cell key it writes, the field and section of the result row that records it, and the schema
version that added it. From this table:

- `xbench grid`'s options are generated (cli/options.py);
- grid files and overrides are checked (`check_value`, `common.grids.grid.resolve`);
- `Cell`'s fields and key are built (common/grids/cell.py), and the result row's configuration
  fields, their types and what older rows lacked (common/results/schema.py);
- the report's columns from each setting's `role` (an axis of the setup, a training choice, the
  placement, a fault, bookkeeping), the training label from its `label`, and docs/grids.md's
  reference (common/grids/columns.py).

Adding a setting is one entry here, one upgrade of the schema, plus the code that uses it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psutil

from xbench.common.backends.model_files import described
from xbench.common.backends.registry import BACKENDS, check_backend_name
from xbench.common.backends.traits import having, in_words, served
from xbench.common.errors import UserError
from xbench.common.grids.setting import Role, Setting, check_table, whole_bytes
from xbench.common.workload import faults
from xbench.common.workload.compression import COMPRESSIONS
from xbench.common.workload.compression import label as compression_label
from xbench.common.workload.data import DATA_KINDS, TEST_SAMPLES, TRAIN_SAMPLES
from xbench.common.workload.models import MODELS

OPTIMIZERS = {"adam": 1e-3, "sgd": 0.01}  # name -> its learning rate when none is given
BATCH_MODES = ("global", "per_device")
DEVICE_KINDS = ("auto", "cpu", "cuda")
LAUNCHERS = ("local", "slurm")
LR_SCALINGS = ("none", "linear", "sqrt")
PRECISIONS = ("framework-default", "fp32", "tf32", "bf16", "fp16")
# How a PyTorch backend's batches reach the device (host transfers, as a study of CPU offloading
# measures them): pageable memory and a blocking copy, page-locked (pinned) memory, or pinned memory
# and a copy that overlaps the step.
HOST_MEMORY = ("pageable", "pinned", "pinned-non-blocking")
# pt-fsdp: when a unit frees the parameters it gathered (FSDP2's reshard_after_forward True/False)
RESHARDS = ("after-forward", "after-backward")
SECTIONS = ("configuration", "training", "input")  # the result row's sections of settings
SEEDS = 2**32 - 1  # seeds are 32-bit in every framework


def machine_memory_mb() -> int:
    return psutil.virtual_memory().total // 2**20


def _batch_part(cell) -> str:
    nodes = f"|n{cell.nodes}" if cell.nodes > 1 else ""
    return f"|{cell.batch_mode}-b{cell.batch}{nodes}"


def _optimizer_words(row: Mapping[str, Any]) -> str:
    """'adam 0.001', 'sgd 0.1 m0.9 wd0.0005': always said, the label's first words."""
    return (f"{row['optimizer']} {row['lr']:g}" + (f" m{row['momentum']:g}" if row["momentum"]
                                                    else "")
            + (f" wd{row['weight_decay']:g}" if row["weight_decay"] else ""))


def _compression_words(row: Mapping[str, Any]) -> str:
    return ("" if row["compression"] == "none" else
            f"compressed {compression_label(row['compression'], row['powersgd_rank'])}")


def _optimizer_part(cell) -> str:
    """Only where it is not Adam at its default rate without decay (so default keys stay)."""
    if (cell.optimizer, cell.lr, cell.weight_decay) == ("adam", OPTIMIZERS["adam"], 0.0):
        return ""
    return f"|{cell.optimizer}-lr{cell.lr:g}-m{cell.momentum:g}-wd{cell.weight_decay:g}"


def check_model(name: str) -> str:
    """One of xbench's models, or a user's model file named by `path@digest` and built once in
    each framework here before any cell runs (common.backends.model_files)."""
    return described(name).name


SETTINGS: dict[str, Setting] = {s.key: s for s in [
    # --- the grid's identity --------------------------------------------------------------------
    Setting("name", str, None, "The grid's name (default: the grid file's, without .toml); the "
            "results go to results/NAME.jsonl unless --results says otherwise.", flag=None,
            field=None, role=Role.BOOKKEEPING),
    Setting("description", str, "", "What the grid is for, in a sentence.", flag=None,
            field=None, role=Role.BOOKKEEPING),
    # --- the axes, in the cell key's order ------------------------------------------------------
    Setting("backends", str, None, "Backends: " + ", ".join(BACKENDS) + ".", axis=True,
            flag="--backend",
            field="backend", check=check_backend_name, key_part=lambda c: c.backend,
            role=Role.PLACEMENT),
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
    Setting("nodes", int, [1],
            "Node counts, e.g. 1,2 (each node has --devices devices; needs --launcher slurm "
            "beyond 1).", axis=True, maximum=4096, why="no cluster cell here has more nodes",
            key_part="batches", role=Role.PLACEMENT),
    Setting("devices", int, None, "Device counts per node, e.g. 1,2,4.", axis=True, maximum=4096,
            why="no machine or cluster cell here has more devices",
            key_part=lambda c: f"|d{c.devices}", role=Role.PLACEMENT),
    # --- how long and how often -----------------------------------------------------------------
    Setting("epochs", int, 2, "Epochs per run (>= 2: epoch 1 warms up).", row="epochs_given",
            since=11, minimum=2,
            maximum=1000,
            why="epoch 1 warms up (tracing, allocators, autotuning) and every rate, speedup and "
                "verdict is read from epoch 2; a benchmark needs 2 and the lab 5",
            key_part=lambda c: f"|e{c.epochs}", role=Role.SETUP),
    Setting("repeats", int, 1, "Repeats of every cell (dispersion needs >= 3).", flag="--repeat",
            field=None, maximum=1000,
            why="a few repeats give the intervals; thousands only take time",
            role=Role.BOOKKEEPING),
    Setting("seed", int, 0, "Seed of the model and the data order (the first of --seeds).",
            minimum=0, maximum=SEEDS, why="seeds are 32-bit in every framework",
            key_part=lambda c: f"|seed{c.seed}", role=Role.SETUP, draw=True),
    Setting("seeds", int, 1,
            "Seeds per configuration: seed, seed+1, ..., each its own cell (default 1; with a "
            "target accuracy 5, MLPerf's count: time to a target varies from seed to seed).",
            field=None, maximum=1000, why="a few seeds give the spread; thousands only take time",
            role=Role.BOOKKEEPING),
    # --- training to a target (common.measuring.target) -----------------------------------------
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
    # --- the data ---------------------------------------------------------------------------
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
    # --- where it runs --------------------------------------------------------------------------
    Setting("device", str, "auto", "Force cpu or cuda.", row=None, choices=DEVICE_KINDS,
            key_part=lambda c: f"|{c.device}" + (f"|t{c.threads}" if c.threads else ""),
            role=Role.PLACEMENT),
    Setting("precision", str, ["framework-default"],
            "The math of training (an axis): framework-default (float32; on GPUs each "
            "framework's TF32 default: PyTorch in convolutions only, TensorFlow in both), fp32 "
            "(TF32 off in both frameworks: one trajectory on a GPU too), tf32 (TF32 on in both; "
            "GPUs only), bf16 or fp16 mixed precision (float32 weights, the forward and backward "
            "passes in bf16 or fp16: torch.autocast, Keras' mixed policy; fp16 with a dynamic "
            "loss scale).", axis=True, choices=PRECISIONS,
            key_part=lambda c: "" if c.precision == "framework-default" else f"|{c.precision}",
            since=8, role=Role.TRAINING,
            label=lambda v: ("" if v["precision"] == "framework-default"
                             else f"precision {v['precision']}")),
    Setting("timeout", int, 3600, "Seconds a cell may run before it is killed.", row=None,
            maximum=30 * 24 * 3600, why="30 days is the longest timeout a cell may have",
            role=Role.BOOKKEEPING),
    Setting("retries", int, 1,
            "Times a cell runs again after one of its processes crashed (killed by SIGSEGV, "
            "SIGABRT, SIGBUS, SIGILL or SIGFPE: a fault inside a framework, such as the heap "
            "corruption TensorFlow's multi-worker processes show now and then), as its launcher "
            "reports it "
            "(xbench's own spawner passes the signal on; torchrun and horovodrun exit 1, "
            "which is not taken for a crash); every crash is kept in the row's 'crashes'.",
            row=None, minimum=0, maximum=5,
            why="a cell that crashes 6 times in a row is not crashing by chance",
            role=Role.BOOKKEEPING),
    Setting("memory_limit_mb", int, 0,
            "Memory each worker may allocate for training, on top of its framework and data "
            "(emulates a smaller device: a batch that does not fit is an 'oom' row).", minimum=0,
            maximum=machine_memory_mb, why="that is this machine's memory", zero_is_null=True,
            role=Role.BOOKKEEPING),
    Setting("contention_limit", float, 0.10,
            "Share of a rank's cores (0-1) that other processes, interrupts, busy hyperthread "
            "siblings, steal and cgroup throttling may take during a timed epoch before its row "
            "is marked contended (default 0.10).",
            minimum=0, maximum=1, why="a share of the cores", role=Role.BOOKKEEPING),
    Setting("pin_ranks", bool, False,
            "Pin each rank to its own cores (the node's cores it may use, split evenly among "
            "the ranks that share them), so that ranks do not trade cores and contention is "
            "judged on the cores a rank runs on.",
            key_part=lambda c: "|pin-ranks" if c.pin_ranks else "", since=7, role=Role.TRAINING,
            label=lambda v: "ranks pinned" if v["pin_ranks"] else ""),
    Setting("omp_wait", str, ["auto"],
            "How PyTorch's OpenMP threads wait on a CPU (an axis): auto (default: the "
            "environment's OMP_WAIT_POLICY if set, else passive where the look before the grid "
            "finds the machine busy, the runtime's own where quiet), runtime, passive or active.",
            axis=True, choices=("auto", "runtime", "passive", "active"), since=17,
            key_part=lambda c: f"|omp-{c.omp_wait}" * (c.omp_wait != "auto"), role=Role.TRAINING,
            label=lambda v: f"OpenMP {v['omp_wait']}" * (v["omp_wait"] != "auto")),
    Setting("launcher", str, "local",
            "Where cells run: this machine (local, the default) or a Slurm cluster, every cell "
            "one job.", choices=LAUNCHERS, role=Role.BOOKKEEPING),
    Setting("slurm_partition", str, "", "Slurm partition to submit to (default: the cluster's).",
            field=None, role=Role.BOOKKEEPING),
    Setting("slurm_account", str, "", "Slurm account to charge.", field=None,
            role=Role.BOOKKEEPING),
    Setting("slurm_time", int, 0,
            "Slurm time limit per cell, minutes (default: the cell's timeout, rounded up).",
            field=None, minimum=0, maximum=30 * 24 * 60,
            why="30 days is the longest timeout a cell may have", role=Role.BOOKKEEPING),
    Setting("slurm_gpus_per_node", int, 0,
            "GPUs to ask for per node (default: --devices with --device cuda, else none).",
            field=None, minimum=0, maximum=64, why="no node has more GPUs", role=Role.BOOKKEEPING),
    Setting("slurm_args", str, "", "Extra sbatch arguments, e.g. \"--qos=short --exclusive\".",
            field=None, role=Role.BOOKKEEPING),
    # --- training, the same in every backend ---------------------------------------------------
    Setting("optimizer", str, "adam", "adam (default) or sgd, the same step in every framework.",
            section="training", choices=tuple(OPTIMIZERS), key_part=_optimizer_part, since=3,
            role=Role.TRAINING, label=_optimizer_words),
    Setting("lr", float, 0.0, "Learning rate (default: adam 0.001, sgd 0.01).",
            section="training", minimum=0, maximum=100,
            why="a learning rate; 0 is the optimizer's default", key_part="optimizer", since=3,
            implied=OPTIMIZERS["adam"], role=Role.TRAINING,
            label="optimizer"),
    Setting("momentum", float, 0.0, "SGD's momentum (default 0).", section="training",
            minimum=0, maximum=0.999, why="a momentum factor, below 1", key_part="optimizer",
            since=3, role=Role.TRAINING,
            label="optimizer"),
    Setting("weight_decay", float, 0.0,
            "L2 weight decay, added to the gradient as PyTorch does (default 0).",
            section="training", minimum=0, maximum=1, why="an L2 factor", key_part="optimizer",
            since=3, role=Role.TRAINING,
            label="optimizer"),
    Setting("lr_scaling", str, ["none"],
            "Scale lr with the global batch against --reference-batch: none, linear, sqrt "
            "(comma-separated: an axis).", axis=True, section="training", choices=LR_SCALINGS,
            key_part=lambda c: (f"|lr-{c.lr_scaling}{c.reference_batch}"
                                if c.lr_scaling != "none" else ""), since=3, role=Role.TRAINING,
            label=lambda v: (f"lr {v['lr_scaling']}/{v['reference_batch']}"
                             if v["lr_scaling"] != "none" else "")),
    Setting("reference_batch", int, 128, "The global batch lr is given for (default 128).",
            section="training", maximum=2**20, why="no batch here is larger",
            key_part="lr_scaling", since=3, role=Role.TRAINING,
            label="lr_scaling"),
    Setting("warmup_epochs", int, [0],
            "Epochs over which lr ramps linearly from lr to the scaled lr (an axis, e.g. 0,1).",
            axis=True, section="training", minimum=0, maximum=999,
            why="warm-up must end before the run does",
            key_part=lambda c: f"|warm{c.warmup_epochs}" if c.warmup_epochs else "", since=3,
            role=Role.TRAINING,
            label=lambda v: f"warm-up {v['warmup_epochs']}" if v["warmup_epochs"] else ""),
    Setting("set_epoch", bool, True,
            f"{in_words(having(lambda t: t.distributed_sampler))}: call DistributedSampler."
            f"set_epoch each epoch (default), or keep epoch 0's order in every epoch (the lab's "
            f"question 5, measured).",
            section="training", key_part=lambda c: "" if c.set_epoch else "|no-set-epoch",
            since=3, role=Role.TRAINING,
            label=lambda v: "" if v["set_epoch"] else "no set_epoch"),
    Setting("compression", str, ["none"],
            "Gradients on the wire: none, fp16, bf16 (cast to 16 bits for the all-reduce) or "
            "powersgd (low-rank factors with error feedback; on GPUs), by backend: "
            + served(lambda t: ", ".join(t.compressions) if len(t.compressions) > 1 else None)
            + "; the others none (an axis, comma-separated).",
            axis=True,
            section="training", choices=COMPRESSIONS,
            key_part=lambda c: ("" if c.compression == "none" else f"|compress-{c.compression}"
                                + (f"{c.powersgd_rank}" if c.compression == "powersgd" else "")),
            since=7, role=Role.TRAINING,
            label=_compression_words),
    Setting("powersgd_rank", int, 1,
            "PowerSGD's matrix approximation rank (default 1; more: closer to the gradients, "
            "more bytes).", section="training", maximum=1024,
            why="a rank above the models' widest layer compresses nothing", key_part="compression",
            since=7, role=Role.TRAINING,
            label="compression"),
    Setting("reshard", str, ["after-forward"],
            f"{in_words(having(lambda t: t.shards_parameters))}: a unit frees the parameters it "
            "gathered after its forward pass and "
            "gathers them again for backward (after-forward, FSDP's default: least memory), or "
            "keeps them until its backward is done (after-backward: one all-gather fewer per "
            "step); an axis, comma-separated.", axis=True, section="training", choices=RESHARDS,
            key_part=lambda c: "" if c.reshard == "after-forward" else f"|reshard-{c.reshard}",
            since=10, role=Role.TRAINING,
            label=lambda v: "" if v["reshard"] == "after-forward" else f"reshard {v['reshard']}"),
    Setting("bucket_mb", float, [0.0],
            "Gradients one collective carries at most, in MB of 2^20 bytes as DDP counts them "
            "(an axis, e.g. 1,25), by backend: " + served(lambda t: t.bucket_knob) + "; 0 "
            "(default): each library's own. The other backends have no such knob: unsupported "
            "there, with the reason.",
            axis=True, section="training", minimum=0, maximum=2**20, check=whole_bytes,
            why="a megabyte count no model here comes near", role=Role.TRAINING,
            key_part=lambda c: f"|bucket{c.bucket_mb:g}" if c.bucket_mb else "", since=12,
            label=lambda v: f"buckets of {v['bucket_mb']:g} MB" if v["bucket_mb"] else ""),
    Setting("accumulate", int, [1],
            "Micro-batches per optimizer step (an axis, e.g. 1,4): each device's batch split in K, "
            "their gradients summed into one update (without BatchNorm, one batch's trajectory); "
            "K must divide the per-device batch. By backend, sync last is: "
            + served(lambda t: t.sync_modes.get("last")) + ".", axis=True, section="training",
            maximum=1024, why="more micro-batches than any batch here has samples per device",
            key_part=lambda c: f"|acc{c.accumulate}-{c.accumulate_sync}" * (c.accumulate > 1),
            since=16, role=Role.TRAINING, label=lambda v: (v["accumulate"] > 1) * (
                f"accumulate {v['accumulate']} sync {v['accumulate_sync']}")),
    Setting("accumulate_sync", str, ["last"],
            "With --accumulate K > 1, when the gradients cross between devices (an axis): last "
            "(once a step, on the K-th micro-batch) or each (after every micro-batch, as a naive "
            "loop does: K times the bytes). By backend, what sync each does: "
            + served(lambda t: t.sync_modes.get("each")) + ".", axis=True, section="training",
            choices=("last", "each"), key_part="accumulate",
            since=16, role=Role.TRAINING, label="accumulate"),
    Setting("compile", str, ["off"],
            "Compile the step (an axis, off,on): on is " + served(lambda t: t.compiler)
            + "; off is each framework's default (PyTorch eager, TensorFlow's tf.function graph); "
            "JAX compiles every step (jax.jit), on or off. Its cost: the row's warmup_seconds.",
            axis=True, section="training", choices=("off", "on"),
            key_part=lambda c: "|compiled" if c.compile == "on" else "", since=16,
            role=Role.TRAINING, label=lambda v: "compiled" if v["compile"] == "on" else ""),
    # --- how batches reach the device ----------------------------------------------------------
    Setting("host_memory", str, ["pageable"],
            "PyTorch backends, how batches reach a GPU: pageable, pinned, pinned-non-blocking "
            "(comma-separated: an axis; pinned ones need CUDA).", axis=True, section="input",
            choices=HOST_MEMORY,
            key_part=lambda c: f"|{c.host_memory}" if c.host_memory != "pageable" else "",
            since=4, role=Role.TRAINING,
            label=lambda v: "" if v["host_memory"] == "pageable" else v["host_memory"]),
    Setting("loader_workers", int, [0],
            "PyTorch backends: DataLoader worker processes, e.g. 0,2 (an axis; 0: batches are "
            "formed in the training process).", axis=True, section="input", minimum=0,
            maximum=64, why="more worker processes than any machine here has cores for",
            key_part=lambda c: f"|workers{c.loader_workers}" if c.loader_workers else "",
            since=4, role=Role.TRAINING,
            label=lambda v: f"{v['loader_workers']} loader workers" if v["loader_workers"] else ""),
    # --- faults injected on purpose (common.workload.faults) -------------------------------------
    Setting("inject", str, [faults.NONE],
            "Faults to inject, to see where the step attribution puts them (never by default; "
            "rows with one stay out of verdicts and comparisons): none, input-delay=MS, "
            "slow-rank=R:MS, link=RATE (e.g. 400mbit), joined with '+' (an axis, "
            "comma-separated).", axis=True, check=faults.check,
            key_part=lambda c: f"|inject-{c.inject}" if c.inject != faults.NONE else "",
            since=5, role=Role.FAULT,
            label=lambda v: "" if v["inject"] == faults.NONE else f"inject {v['inject']}"),
]}
AXES = [s for s in SETTINGS.values() if s.axis]
SLURM = [s for s in SETTINGS.values() if s.key.startswith("slurm_")]
IN_CELL = [s for s in SETTINGS.values() if s.field_name]
IN_ROW = [s for s in IN_CELL if s.row_name]


check_table(SETTINGS)


def defaults() -> dict[str, Any]:
    """{key: default} of every setting that has one."""
    return {s.key: s.default for s in SETTINGS.values() if s.default is not None}


def check_axis(key: str, value: Any) -> list:
    """The axis' values, each checked, duplicates dropped (first occurrence kept): a value given
    twice is one configuration, not two."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserError(f"'{key}' is empty; give at least one value")
    return list(dict.fromkeys(SETTINGS[key].check_value(item) for item in items))
