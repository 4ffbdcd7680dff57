"""The training choices (`Role.TRAINING`): how a cell is trained, the same in every backend that
can (the math, the optimizer and its rate, the gradients' compression, buckets, accumulation,
compilation, how batches reach the device, how ranks share the cores). Cells compared agree on
them, and the training label says each one that is not its default."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xbench.common.backends.frameworks import FRAMEWORKS
from xbench.common.backends.traits import having, in_words, served
from xbench.common.grids.setting import Role, Setting, whole_bytes
from xbench.common.workload.compression import COMPRESSIONS
from xbench.common.workload.compression import label as compression_label

OPTIMIZERS = {"adam": 1e-3, "sgd": 0.01}  # name -> its learning rate when none is given
LR_SCALINGS = ("none", "linear", "sqrt")
PRECISIONS = ("framework-default", "fp32", "tf32", "bf16", "fp16")
# How a PyTorch backend's batches reach the device (host transfers, as a study of CPU offloading
# measures them): pageable memory and a blocking copy, page-locked (pinned) memory, or pinned memory
# and a copy that overlaps the step.
HOST_MEMORY = ("pageable", "pinned", "pinned-non-blocking")
# pt-fsdp: when a unit frees the parameters it gathered (FSDP2's reshard_after_forward True/False)
RESHARDS = ("after-forward", "after-backward")
# The frameworks whose CPU threads OpenMP runs (omp_wait acts on them) and the others, in words.
_OPENMP = in_words([f"{f.title}'s" for f in FRAMEWORKS if not f.no_omp_wait])
_NOT_OPENMP = in_words([f"{f.title}'s" for f in FRAMEWORKS if f.no_omp_wait])


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


TRAINING_SETTINGS = [
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
    # how ranks share a node's cores
    Setting("pin_ranks", bool, False,
            "Pin each rank to its own cores (the node's cores it may use, split evenly among "
            "the ranks that share them), so that ranks do not trade cores and contention is "
            "judged on the cores a rank runs on.",
            key_part=lambda c: "|pin-ranks" if c.pin_ranks else "", since=7, role=Role.TRAINING,
            label=lambda v: "ranks pinned" if v["pin_ranks"] else ""),
    Setting("omp_wait", str, ["auto"],
            f"How {_OPENMP} OpenMP threads wait on a CPU (an axis): auto (default: the "
            "environment's OMP_WAIT_POLICY if set, else passive where the look before the grid "
            "finds other processes taking more of the cores than auto's own threshold "
            "(docs/numbers.md; not the contention limit), else the runtime's own), runtime, "
            f"passive or active. {_NOT_OPENMP} threads are not OpenMP's: their cells take auto "
            "whatever is given, one cell each.",
            axis=True, choices=("auto", "runtime", "passive", "active"), since=17,
            key_part=lambda c: f"|omp-{c.omp_wait}" * (c.omp_wait != "auto"), role=Role.TRAINING,
            label=lambda v: f"OpenMP {v['omp_wait']}" * (v["omp_wait"] != "auto")),
    # the optimizer and its rate
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
    # each epoch's order of the samples
    Setting("set_epoch", bool, True,
            f"{in_words(having(lambda t: t.distributed_sampler))}: call DistributedSampler."
            f"set_epoch each epoch (default), or keep epoch 0's order in every epoch (the lab's "
            f"question 5, measured).",
            section="training", key_part=lambda c: "" if c.set_epoch else "|no-set-epoch",
            since=3, role=Role.TRAINING,
            label=lambda v: "" if v["set_epoch"] else "no set_epoch"),
    # how the gradients cross between devices, and how often
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
    # the step itself
    Setting("compile", str, ["off"],
            "Compile the step (an axis, off,on): on is " + served(lambda t: t.compiler)
            + "; off is each framework's default (PyTorch eager, TensorFlow's tf.function graph); "
            "JAX compiles every step (jax.jit), on or off. Its cost: the row's warmup_seconds.",
            axis=True, section="training", choices=("off", "on"),
            key_part=lambda c: "|compiled" if c.compile == "on" else "", since=16,
            role=Role.TRAINING, label=lambda v: "compiled" if v["compile"] == "on" else ""),
    # how batches reach the device
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
]
