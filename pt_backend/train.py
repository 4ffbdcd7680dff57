"""The PyTorch training loop of every PyTorch backend: the hooks (common.running.framework_hooks)
of common.running.training_loop's loop.

The backend wraps the model and the optimizer its own way (pt_backend.base's hooks); the input
pipeline, the step and the measurements are the same for all three, so their numbers compare.
"""
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from xbench.common.measuring.attribution import INSTRUMENTED
from xbench.common.measuring.collective_clock import CollectiveClock
from xbench.common.measuring.evidence import indices_digest
from xbench.common.measuring.target import Evaluation
from xbench.common.running.env import cpu_name, peak_rss_bytes
from xbench.common.running.training_loop import TrainingLoop, eval_batch
from xbench.common.workload.precision import LOSS_SCALE_GROWTH_STEPS, LOSS_SCALE_START, lower_dtype
from xbench.pt_backend.data import EpochShardSampler, EpochShuffleSampler, TrainSet, as_is
from xbench.pt_backend.models import batchnorm_statistics, build_model, build_optimizer


def normalise(images, mean, std):
    """uint8 (B, H, W, C) -> float (B, C, H, W) in PyTorch's standard layout, normalised per
    channel (`mean`, `std`: the dataset's) on the device the batch is on.

    The layout is asked for: with one channel, the permuted view passes as both contiguous and
    channels_last, and PyTorch then ran the whole model channels_last: the small model's step
    took 1.14x as long on a 2-core CPU (22 alternated blocks of 32 steps in one process, every
    block 1.08x-1.26x); on an H100 it made no difference."""
    shape = (1, -1, 1, 1)
    return (images.permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
            .div_(255).sub_(torch.tensor(mean, device=images.device).view(shape))
            .div_(torch.tensor(std, device=images.device).view(shape)))


def model_inputs(samples: torch.Tensor, data) -> torch.Tensor:
    """What the model takes of a batch of `data`'s samples (on their device): normalised images,
    a language model's token ids, or a model file's samples as they are (float32, or ids)."""
    if data.is_text or (data.as_given and not samples.is_floating_point()):
        return samples.long()
    return samples.float() if data.as_given else normalise(samples, data.mean, data.std)


def mean_loss(logits: torch.Tensor, targets: torch.Tensor, loss_fn) -> torch.Tensor:
    """`loss_fn` (cross-entropy) over the batch's samples, or a language model's tokens (each
    window has as many, so their mean is the mean of the windows' means)."""
    return loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def correct_samples(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The accuracy's numerator: per sample the share of its predictions that are right (an
    image's 0 or 1, a window's share of its next tokens), summed over the batch."""
    return (logits.argmax(-1) == targets).reshape(len(targets), -1).double().mean(1).sum()


def cuda_moment() -> torch.cuda.Event:
    """A moment on the GPU: an event recorded on the current stream (no host synchronisation
    inside the epoch; read once the epoch is over)."""
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def cuda_seconds(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    return start.elapsed_time(end) / 1000


class AutocastForward(nn.Module):
    """`model` whose forward enters autocast at `dtype` in the thread that runs it: DataParallel
    runs each replica in a thread of its own and re-enters autocast there without the dtype,
    which on a GPU defaults to fp16 (a bf16 cell would compute in fp16, unscaled)."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype):
        super().__init__()
        self.model, self.device_type, self.dtype = model, device_type, dtype

    def forward(self, x):
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(x)


class TorchLoop(TrainingLoop):
    """`backend` (a pt_backend.base.TorchBackend) wraps the model and optimizer on `device`."""

    def __init__(self, job, comm, backend, device):
        super().__init__(job, comm, backend)
        self.device = device
        self.cuda = device.type == "cuda"

    def set_up(self):
        cell = self.cell
        if self.cuda:
            use_float32_math(cell.precision)
        lower = lower_dtype(cell.precision)
        self.autocast_dtype = getattr(torch, lower) if lower else None
        # fp16's dynamic loss scale (GradScaler); disabled it passes everything through
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=LOSS_SCALE_START,
                                           growth_interval=LOSS_SCALE_GROWTH_STEPS,
                                           enabled=cell.precision == "fp16")
        self.loss_scales = []
        self.model = build_model(self.job.model, cell.seed).to(self.device)
        self.evaluated = self.model  # what rank 0 evaluates: a whole copy where it is sharded
        # What parallelises the model and the loop calls (DDP's no_sync is its): with --compile
        # on it wraps the model compiled, since torch.compile of a DDP module compiles nothing
        # in torch 2.13 (Dynamo skips DDP's forward: 0 graphs); evaluation runs the model
        # itself, uncompiled.
        self.wrapped = self.backend.wrap_model(
            torch.compile(self.model) if cell.compile == "on" else self.model, self.device)
        self.optimizer = self.backend.wrap_optimizer(
            build_optimizer(self.wrapped.parameters(), cell.optimizer, cell.lr, cell.momentum,
                            cell.weight_decay), self.model)
        self.dataset = TrainSet(self.job.data.train_images, self.job.data.train_labels,
                                cell.multiple)
        # DataParallel splits each batch into contiguous parts, one per GPU it drives.
        replicas = self.backend.devices_per_process(cell)
        if self.backend.traits.distributed_sampler:
            self.sampler = EpochShardSampler(self.dataset, cell.global_batch, cell.seed,
                                             self.comm.rank, self.comm.world, replicas)
            # torch's own DistributedSampler, given the same set_epoch calls: the evidence of
            # what it deals with and without them (its order is not common.workload.samples')
            self.torch_sampler = DistributedSampler(range(len(self.dataset)), self.comm.world,
                                                    self.comm.rank, shuffle=True, seed=cell.seed,
                                                    drop_last=True)
            self.torch_orders = []
        else:
            self.sampler = EpochShuffleSampler(self.dataset, cell.global_batch, cell.seed,
                                               replicas)
        # host_memory (host transfers): pageable, or pinned (page-locked) by the loader, copied
        # with or without non_blocking; pinned ones run only with CUDA (TorchBackend says so).
        self.non_blocking = cell.host_memory == "pinned-non-blocking"
        self.loader = DataLoader(self.dataset, batch_size=cell.global_batch // self.comm.world,
                                 sampler=self.sampler, drop_last=True, collate_fn=as_is,
                                 pin_memory=cell.host_memory != "pageable",
                                 num_workers=cell.loader_workers)
        self.loss_fn = nn.CrossEntropyLoss()
        self.collectives = CollectiveClock(*self.step_clock())
        if INSTRUMENTED:
            self.backend.watch_collectives(self.wrapped, self.model, self.optimizer,
                                           self.collectives)
        self.taken = []
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.correct = torch.zeros((), dtype=torch.float64, device=self.device)
        self.finite_steps = torch.zeros((), dtype=torch.int64, device=self.device)

    def compile_details(self):
        if self.cell.compile != "on":
            return {}
        from torch._dynamo.utils import counters
        return {"by": "torch.compile", "backend": "inductor",
                "what": "the model, before the backend wraps it",
                # graphs AOTAutograd compiled on rank 0 over the run (a forward and its backward
                # are one): 0 would be a compile that compiled nothing; more than one a shape
                # are recompiles
                "graphs": int(counters["aot_autograd"]["total"])}

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def collective_buffer(self, size):
        return torch.zeros(size // 4, device=self.device)

    def step_clock(self):
        return (cuda_moment, cuda_seconds) if self.cuda else super().step_clock()

    def batches(self, epoch):
        if not self.backend.traits.distributed_sampler:
            if self.sampler.next_epoch != epoch:  # a shuffling loader counts its own epochs
                raise RuntimeError(f"the loader would deal epoch {self.sampler.next_epoch}'s "
                                   f"order in epoch {epoch}")
            return self.loader
        if self.cell.set_epoch:  # without it, DistributedSampler deals epoch 0's order each time
            self.sampler.set_epoch(epoch)
            self.torch_sampler.set_epoch(epoch)
        self.torch_orders.append(indices_digest(np.fromiter(self.torch_sampler, np.int64)))
        return self.loader

    def sampler_evidence(self):
        if not self.backend.traits.distributed_sampler:
            return {}
        return {"distributed_sampler_digests": self.torch_orders}

    def set_learning_rate(self, value):
        for group in self.optimizer.param_groups:
            group["lr"] = value

    def train_step(self, batch):
        """One optimizer step on the rank's batch, in the cell's micro-batches: each one's loss
        over K backward (their gradients sum to the batch's mean gradient), synced as the cell
        says, then one update."""
        images, labels, indices = batch
        self.taken.append(indices)
        data = self.job.data
        x = model_inputs(images.to(self.device, non_blocking=self.non_blocking), data)
        y = labels.to(self.device, non_blocking=self.non_blocking)
        self.optimizer.zero_grad()  # set_to_none, the default since torch 2.0
        self.marks.mark("host")
        micro_batches = self.cell.accumulate
        counted = []
        for index, (xs, ys) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches),
                                             strict=True)):
            syncs = self.cell.syncs_after(index)
            with self.backend.micro_batch(self.wrapped, syncs):
                with self.autocast():
                    logits = self.wrapped(xs)
                    loss = mean_loss(logits, ys, self.loss_fn)
                self.marks.mark("forward")
                if index == 0:  # the slow-rank fault, if injected: once a step
                    time.sleep(self.faults.slow_for(self.comm.rank))
                self.scaler.scale(loss / micro_batches).backward()
            self.marks.mark("backward")
            if syncs and index < micro_batches - 1:
                self.backend.sync_micro_batch(self.optimizer)
                self.marks.mark("host")
            counted.append((loss.detach(), logits, ys))
        self.backend.wait_for_gradients(self.optimizer, self.collectives)
        self.marks.mark("host")
        self.backend.update(self.optimizer, self.scaler)
        self.scaler.update()
        self.marks.mark("optimizer")
        collective = self.collectives.take()
        if collective:
            self.marks.collective(*collective)
        for loss, logits, ys in counted:
            self.loss_sum += loss * len(ys)
            self.correct += correct_samples(logits, ys)
        self.finite_steps += torch.isfinite(self.loss_sum)

    def reset_totals(self):
        self.loss_sum.zero_()
        self.correct.zero_()
        self.finite_steps.zero_()

    def first_unfinite_step(self):
        return None if torch.isfinite(self.loss_sum) else int(self.finite_steps) + 1

    def totals(self):
        """The epoch's loss sum and correct count (called once at its end, when fp16's loss
        scale is noted too: its history per epoch)."""
        if self.scaler.is_enabled():
            self.loss_scales.append(self.scaler.get_scale())
        return torch.stack([self.loss_sum, self.correct])  # nccl sums on the device

    def autocast(self):
        """The forward pass in the cell's lower precision (a no-op at float32)."""
        return torch.autocast(self.device.type, dtype=self.autocast_dtype,
                              enabled=self.autocast_dtype is not None)

    def consumed(self):
        taken, self.taken = self.taken, []
        return [torch.cat(taken).numpy() if taken else np.zeros(0, np.int64)]

    @property
    def steps_per_epoch(self):
        return len(self.loader)

    def replica_weights(self):
        return [[p.detach().cpu().numpy() for p in self.backend.whole_parameters(self.model)]]

    def replica_batchnorm(self):
        return [[t.detach().cpu().numpy() for t in batchnorm_statistics(self.model)]]

    def peak_memory(self):
        if self.cuda:
            return [torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())
                    if torch.cuda.max_memory_allocated(i) > 0]
        return [peak_rss_bytes()]

    def model_state_bytes(self):
        """A shard's own bytes where the parameters are sharded; DataParallel keeps them and the
        optimizer's state on its first device (its replicas on the others last one step)."""
        state = [value for values in self.optimizer.state.values() for value in values.values()
                 if torch.is_tensor(value)]
        held = sum(local_bytes(tensor) for tensor in [*self.model.parameters(), *state])
        return [held] + [0] * (self.backend.devices_per_process(self.cell) - 1)

    @torch.no_grad()
    def gather_for_evaluation(self):
        """Where the ranks hold shards: the whole parameters (and rank 0's buffers) copied into
        a plain model on rank 0, built once."""
        if not self.backend.traits.shards_parameters:
            return
        whole = self.backend.whole_parameters(self.model)
        if self.comm.rank != 0:
            return
        if self.evaluated is self.model:
            with torch.random.fork_rng(devices=[]):  # training's random stream stays as it was
                self.evaluated = build_model(self.job.model, self.cell.seed).to(self.device)
        for kept, value in zip([*self.evaluated.parameters(), *self.evaluated.buffers()],
                               [*whole, *self.model.buffers()], strict=True):
            kept.copy_(value)

    @torch.no_grad()
    def evaluate(self):
        """Accuracy and mean loss on the whole test set (the unwrapped model, or its whole
        copy)."""
        data = self.job.data
        model = self.evaluated
        model.eval()
        loss_fn = nn.CrossEntropyLoss(reduction="sum")
        loss_sum = correct = 0.0
        size = eval_batch(self.job.model)
        for start in range(0, len(data.test_images), size):
            samples = torch.from_numpy(data.test_images[start:start + size]).to(self.device)
            targets = torch.from_numpy(data.test_labels[start:start + size].astype(np.int64)
                                       ).to(self.device)
            with self.autocast():
                logits = model(model_inputs(samples, data))
            logits = logits.float()
            # summed over every token, / a window's tokens: the sum of the windows' means
            loss_sum += mean_loss(logits, targets, loss_fn).item() / targets[0].numel()
            correct += correct_samples(logits, targets).item()
        model.train()
        return Evaluation(accuracy=correct / len(data.test_images),
                          loss=loss_sum / len(data.test_images))

    def thread_pools(self):
        return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
                "input_pipeline": max(1, self.loader.num_workers)}  # 0 workers: the main thread

    def gpu_indices(self):
        if not self.cuda:
            return []
        return list(range(self.device.index,
                          self.device.index + self.backend.devices_per_process(self.cell)))

    def attribution_sources(self):
        clock = ("CUDA events at its boundaries (device time)" if self.cuda
                 else "the host clock at its boundaries")
        collective = (self.backend.traits.collectives_counted
                      or self.backend.traits.collectives_not_counted)
        return {"input": f"{clock}: the loop's wait for the DataLoader's next batch",
                **dict.fromkeys(("forward", "backward", "optimizer"), clock),
                "waiting": collective, "communication": collective,
                "host": "the rest of each step's window: copies to the device, zero_grad, "
                        "bookkeeping",
                "untraced": "none: the loop's marks cover every moment of a step's window"}

    def describe(self):
        return {"framework_version": torch.__version__,
                "params": sum(p.numel() for p in self.model.parameters() if p.requires_grad),
                "train_samples": len(self.dataset), "device_type": self.device.type,
                "device_name": (torch.cuda.get_device_name(self.device) if self.cuda
                                else cpu_name()),
                "math": {**math_allowed(self.device), "precision": self.cell.precision,
                         "lower": lower_dtype(self.cell.precision),
                         **({"loss_scale": self.loss_scales} if self.loss_scales else {})}}


def local_bytes(tensor: torch.Tensor) -> int:
    """Bytes of `tensor` in this process: a sharded (distributed) tensor's local shard."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def use_float32_math(precision: str) -> None:
    """TF32 off in both matmuls and convolutions for fp32, on for tf32; under the others
    torch's defaults for what stays float32."""
    if precision in ("fp32", "tf32"):
        allowed = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed


def math_allowed(device) -> dict[str, str]:
    """The precision PyTorch lets float32 matmuls and convolutions run in here: TF32 where the
    GPU has it (compute capability 8.0 on) and torch allows it (by default in cuDNN's
    convolutions, not in matmuls), else fp32."""
    tf32 = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)
    return {"matmul": "tf32" if tf32 and torch.backends.cuda.matmul.allow_tf32 else "fp32",
            "convolution": "tf32" if tf32 and torch.backends.cudnn.allow_tf32 else "fp32"}


def is_out_of_memory(error):
    text = str(error)
    return (isinstance(error, (MemoryError, torch.OutOfMemoryError))
            or (isinstance(error, RuntimeError) and ("out of memory" in text
                                                     or "can't allocate memory" in text)))
