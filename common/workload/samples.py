"""A dataset in memory (`Images`: images or a text's windows, as uint8 arrays) and which of its
samples each rank trains on, in which order: the same for every backend, rank and framework.

Images stay uint8 (N, H, W, C) in memory (an 8x multiple of MNIST is 480,000 images); the framework
normalises a batch, per channel, when it forms it. A dataset multiple k is the training set
concatenated k times (the blog's method), done by index arithmetic instead of copies.
"""
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xbench.common.errors import UserError

# Per-channel mean and standard deviation of each dataset's training pixels after /255.
NORMALISATION = {"mnist": ((0.1307,), (0.3081,)),
                 "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))}


@dataclass
class Images:
    """A dataset in memory: uint8 images (n, H, W, C) and their labels, or a text's windows:
    uint8 token ids (n, T) and the next token of each (n, T)."""
    train_images: np.ndarray
    train_labels: np.ndarray  # uint8 (n,), or (n, T) next tokens
    test_images: np.ndarray
    test_labels: np.ndarray
    dataset: str              # "mnist", "cifar10" or "synthetic"
    source: str               # where it was read from
    layout: str               # whose samples these are: mnist, cifar10, shakespeare, or model
                              # (a model file's: inputs as they are, float32 or int64)
    files: tuple[str, ...] = ()  # the files it was read from (none: made up)

    @property
    def is_text(self) -> bool:
        """Token windows for a language model (else images for a classifier)."""
        return self.layout == "shakespeare"

    @property
    def as_given(self) -> bool:
        """A model file's samples: the model takes them as they are (no normalisation)."""
        return self.layout == "model"

    @property
    def mean(self) -> tuple[float, ...]:
        """Per-channel mean of the dataset's training images (0-1 scale), as normalised."""
        return NORMALISATION[self.layout][0]

    @property
    def std(self) -> tuple[float, ...]:
        """Per-channel standard deviation of the dataset's training images (0-1 scale)."""
        return NORMALISATION[self.layout][1]


def epoch_order(samples, seed, epoch):
    """The shuffled order of one epoch: the same for every backend, rank and framework."""
    return np.random.default_rng([seed, epoch]).permutation(samples)


def rank_indices(samples: int, global_batch: int, seed: int, epoch: int, rank: int, world: int,
                 replicas: int = 1) -> np.ndarray:
    """Indices process `rank` of `world` trains on in `epoch`, in order, as DistributedSampler
    deals them.

    The incomplete last global batch is dropped, then sample i goes to rank i % world; consecutive
    per-device batches of every rank together make exactly the global batches of a 1-device run.
    A process that splits its batch into `replicas` contiguous parts itself (DataParallel,
    MirroredStrategy, jax.jit's sharded batch) gets each batch reordered so that part r holds
    every r-th sample, what DistributedSampler gives rank r: BatchNorm then normalises over the
    same samples per replica in every backend that normalises per replica (JAX's normalise over
    the whole global batch).
    """
    order = epoch_order(samples, seed, epoch)[: samples // global_batch * global_batch][rank::world]
    per_replica = global_batch // world // replicas
    return order.reshape(-1, per_replica, replicas).transpose(0, 2, 1).reshape(-1)


def verified(path: Path, md5: str, dataset: str, remedy: str) -> bytes:
    """The file's bytes if their MD5 is the published one, else a UserError saying how to get
    the file again (`remedy`)."""
    raw = path.read_bytes()
    if hashlib.md5(raw).hexdigest() != md5:
        raise UserError(f"{path} is corrupt or not the original {dataset} file: its MD5 does not "
                        f"match the published one ({path.stat().st_size:,} bytes; an interrupted "
                        f"download or extraction leaves a truncated file). Delete it and "
                        f"{remedy}")
    return raw
