"""The PyTorch training loop shared by pt-dp, pt-ddp and hvd-torch.

A backend wraps the model its own way and passes the collectives its ranks talk through
(common.collectives); the
loop, the input pipeline and the timing are the same for all three, so their numbers compare.
"""
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from common.collectives import SingleProcess
from common.consistency import shard_overlap, weights_digest
from common.data import MEAN, STD, rank_indices
from common.env import cpu_name, peak_rss_bytes
from common.errors import Unsupported
from common.timing import EpochClock, epoch_record, step_percentiles
from pt_backend.models import build_model

EVAL_BATCH = 1000


class TorchDistributed(SingleProcess):
    """torch.distributed's default process group (pt-ddp)."""

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def barrier(self):
        self.dist.barrier()

    def gather(self, value):
        values = [None] * self.world
        self.dist.all_gather_object(values, value)
        return values

    def sum(self, tensor):
        self.dist.all_reduce(tensor)
        return tensor


class MNISTTrainSet(torch.utils.data.Dataset):
    """The uint8 training images; index i of a k-times multiple is base image i % base size."""

    def __init__(self, images, labels, multiple):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.samples = len(images) * multiple

    def __len__(self):
        return self.samples

    def __getitems__(self, indices):
        """A whole batch in one indexing operation (DataLoader calls this instead of __getitem__)."""
        index = torch.as_tensor(indices) % len(self.images)
        return self.images[index], self.labels[index]


class EpochShardSampler(DistributedSampler):
    """DistributedSampler (set_epoch each epoch) dealing common.data's order, so every backend and
    framework trains on the same samples in the same global batches."""

    def __init__(self, dataset, global_batch, seed, rank, world):
        super().__init__(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.global_batch = global_batch
        self.num_samples = len(dataset) // global_batch * global_batch // world

    def __iter__(self):
        return iter(rank_indices(len(self.dataset), self.global_batch, self.seed, self.epoch,
                                 self.rank, self.num_replicas).tolist())


def _as_is(batch):
    return batch


def normalise(images):
    """uint8 (B, 28, 28) -> float (B, 1, 28, 28), normalised on the device the batch is on."""
    return images.unsqueeze(1).float().div_(255).sub_(MEAN).div_(STD)


def resolve_device(requested, devices):
    """'cuda' or 'cpu' for this cell; Unsupported if it asks for GPUs this machine lacks."""
    gpus = torch.cuda.device_count()
    if requested == "cuda" and gpus == 0:
        raise Unsupported("the cell asks for device 'cuda' but torch sees no CUDA device")
    if requested == "cpu" or gpus == 0:
        return "cpu"
    if gpus < devices:
        raise Unsupported(f"the cell needs {devices} CUDA devices; this machine has {gpus}")
    return "cuda"


def set_threads(threads):
    torch.set_num_threads(threads)


class StepTimer:
    """Per-step times with no host synchronisation: CUDA events on GPU, the clock on CPU
    (where every step already ends on the host)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks = []
        self.mark()

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self):
        """Call after the epoch's final sync."""
        if self.cuda:
            return [a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:])]
        return np.diff(self.marks).tolist()


def peak_memory(device):
    """Peak bytes of this rank: allocated on its GPU(s), else the process's peak RSS."""
    if device.type == "cuda":
        return [torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())
                if torch.cuda.max_memory_allocated(i) > 0]
    return [peak_rss_bytes()]


def new_model(job, device):
    """A fresh model, identically initialised on every rank from the cell's seed."""
    torch.manual_seed(job.cell.seed)
    return build_model(job.cell.model).to(device)


def train(job, model, wrapped, optimizer, device, comm, details):
    """Train `wrapped` (the model as the backend parallelises it) with `optimizer` (Adam, wrapped
    by the backend where it averages gradients itself) for the cell's epochs.

    Returns the result fields on rank 0, None on the other ranks.
    """
    cell = job.cell
    dataset = MNISTTrainSet(job.data.train_images, job.data.train_labels, cell.multiple)
    sampler = EpochShardSampler(dataset, cell.global_batch, cell.seed, comm.rank, comm.world)
    per_process_batch = cell.global_batch // comm.world
    loader = DataLoader(dataset, batch_size=per_process_batch, sampler=sampler, drop_last=True,
                        collate_fn=_as_is, pin_memory=device.type == "cuda")
    loss_fn = nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    epochs, startup, step_seconds = [], None, []
    for epoch in range(1, cell.epochs + 1):
        sampler.set_epoch(epoch)
        comm.barrier()
        if startup is None:
            startup = job.startup_seconds()
        clock = EpochClock(sync)
        clock.start()
        steps = StepTimer(device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        for images, labels in loader:
            x = normalise(images.to(device, non_blocking=True))
            y = labels.to(device, non_blocking=True)
            optimizer.zero_grad()  # set_to_none, the default since torch 2.0
            logits = wrapped(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(1) == y).sum()
            steps.mark()
        seconds = clock.stop()
        totals = comm.sum(torch.stack([loss_sum, correct.double()])).cpu()  # nccl sums on the device
        samples = len(sampler) * comm.world
        epochs.append(epoch_record(epoch, comm.gather(seconds), samples, totals[0], totals[1]))
        if epoch == cell.epochs:
            step_seconds = [s for rank in comm.gather(steps.seconds()) for s in rank]

    memory = [m for rank in comm.gather(peak_memory(device)) for m in rank]
    digests = comm.gather(weights_digest(p.detach().cpu().numpy() for p in model.parameters()))
    sampler.set_epoch(1)
    overlap = shard_overlap(comm.gather(list(sampler)))
    if comm.rank != 0:
        return None
    return {
        "framework_version": torch.__version__,
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "dataset": job.data.dataset, "dataset_source": job.data.source,
        "train_samples": len(dataset), "device_type": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "epochs": epochs, "startup_seconds": startup, **step_percentiles(step_seconds),
        "test_accuracy": evaluate(model, job.data, device),
        "peak_memory_bytes": max(memory), "peak_memory_per_device": memory,
        "backend_details": {"world_size": comm.world, "threads_per_process": job.threads,
                            "learning_rate_scaled": False, "replica_weight_digests": digests,
                            "shard_overlap_epoch1": overlap, **details},
    }


@torch.no_grad()
def evaluate(model, data, device):
    """Accuracy on the whole test set (rank 0, unwrapped model)."""
    model.eval()
    correct = 0
    for start in range(0, len(data.test_images), EVAL_BATCH):
        images = torch.from_numpy(data.test_images[start:start + EVAL_BATCH]).to(device)
        labels = torch.from_numpy(data.test_labels[start:start + EVAL_BATCH].astype(np.int64)).to(device)
        correct += (model(normalise(images)).argmax(1) == labels).sum().item()
    model.train()
    return correct / len(data.test_images)


def is_out_of_memory(error):
    text = str(error)
    return (isinstance(error, (MemoryError, torch.OutOfMemoryError))
            or (isinstance(error, RuntimeError) and ("out of memory" in text
                                                     or "can't allocate memory" in text)))
