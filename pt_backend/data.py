"""What PyTorch's DataLoader deals in every PyTorch backend: the training set (a dataset
multiple of it) and the samplers that give each rank common.workload.samples' order of each
epoch, so that every backend, PyTorch's or not, trains the same global batches."""
import numpy as np
import torch
from torch.utils.data import DistributedSampler, Sampler

from xbench.common.workload.samples import rank_indices


class TrainSet(torch.utils.data.Dataset):
    """The uint8 training images; index i of a k-times multiple is base image i % base size."""

    def __init__(self, images, labels, multiple):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.samples = len(images) * multiple

    def __len__(self):
        return self.samples

    def __getitems__(self, indices):
        """A whole batch in one indexing operation (DataLoader calls this instead of __getitem__),
        with the sample indices it holds (the evidence of what was trained on)."""
        index = torch.as_tensor(indices)
        base = index % len(self.images)
        return self.images[base], self.labels[base], index


class EpochShardSampler(DistributedSampler):
    """DistributedSampler (set_epoch each epoch) dealing common.workload.samples' order, so every
    backend and framework trains on the same samples in the same global batches."""

    def __init__(self, dataset, global_batch, seed, rank, world, replicas):
        super().__init__(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed,
                         drop_last=True)
        self.global_batch, self.replicas = global_batch, replicas
        self.num_samples = len(dataset) // global_batch * global_batch // world

    def __iter__(self):
        return iter(rank_indices(len(self.dataset), self.global_batch, self.seed, self.epoch,
                                 self.rank, self.num_replicas, self.replicas).tolist())


class EpochShuffleSampler(Sampler):
    """A plain shuffling loader's order (DataLoader(shuffle=True): a new order each time it is
    iterated, nothing to call between epochs), dealing common.workload.samples' order of the epoch
    it is in, so the trajectory is every backend's. What pt-single and pt-dp draw with: one process
    needs no DistributedSampler."""

    def __init__(self, dataset, global_batch, seed, replicas):
        self.samples, self.global_batch = len(dataset), global_batch
        self.seed, self.replicas, self.next_epoch = seed, replicas, 1  # the loop's first epoch

    def __iter__(self):
        epoch, self.next_epoch = self.next_epoch, self.next_epoch + 1
        return iter(rank_indices(self.samples, self.global_batch, self.seed, epoch, 0, 1,
                                 self.replicas).tolist())

    def __len__(self):
        return self.samples // self.global_batch * self.global_batch


def as_is(batch):
    return batch
