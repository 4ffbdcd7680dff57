"""Evidence, recorded in every row, that data-parallel training was what it claims to be, taken
from what the replicas actually did: the weights each ended with, and the sample indices each
consumed in each epoch (read from the batches it trained on, never recomputed from the sampler).
"""
import hashlib
from collections.abc import Iterable

import numpy as np


def weights_digest(arrays: Iterable[np.ndarray]) -> str:
    """SHA-256 of the weights (float32, in the given order): equal digests, identical replicas."""
    h = hashlib.sha256()
    for array in arrays:
        h.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return h.hexdigest()[:16]


def indices_digest(indices: np.ndarray) -> str:
    """SHA-256 of sample indices in the order given."""
    return hashlib.sha256(np.ascontiguousarray(indices, dtype=np.int64).tobytes()).hexdigest()[:16]


def sample_evidence(consumed: list[list[np.ndarray]], steps: int) -> dict:
    """From `consumed[replica][epoch]` (the indices each replica trained on in its `steps` steps
    of the epoch, in order; all replicas of all processes in rank order):

    - replica_sample_digests: per replica, per epoch, the digest of what it consumed;
    - global_batches_digests: per epoch, the digest of the global batches (each step's indices
      over all replicas, sorted): equal across backends and device counts of one cell exactly
      when they trained on the same samples in the same global batches;
    - shard_overlap: per epoch, samples trained by more than one replica (0 when sharded right);
    - samples_trained: per epoch, distinct samples trained.
    """
    epochs = len(consumed[0]) if consumed else 0
    global_digests, overlap, trained = [], [], []
    for epoch in range(epochs):
        arrays = [np.asarray(replica[epoch], dtype=np.int64) for replica in consumed]
        together = np.concatenate(arrays)
        unique = len(np.unique(together))
        overlap.append(int(len(together) - unique))
        trained.append(int(unique))
        per_step = np.concatenate([a.reshape(steps, -1) for a in arrays], axis=1)
        global_digests.append(indices_digest(np.sort(per_step, axis=1)))
    return {"replica_sample_digests": [[indices_digest(e) for e in replica]
                                       for replica in consumed],
            "global_batches_digests": global_digests, "shard_overlap": overlap,
            "samples_trained": trained}


def batchnorm_evidence(statistics: list[list[np.ndarray]]) -> dict:
    """From `statistics[replica]` (every BatchNorm's running mean and variance as each replica
    holds them at the end, in rank order): their digests, and the largest difference of any
    statistic between a replica and replica 0 relative to replica 0's largest (0: every replica
    holds rank 0's statistics; None where one copy is all there is, as in DataParallel)."""
    digests = [weights_digest(replica) for replica in statistics]
    first = statistics[0]
    if len(statistics) < 2:
        return {"replica_digests": digests, "max_relative_difference": None}
    scale = max(float(np.abs(a).max()) for a in first)
    difference = max(float(np.abs(np.asarray(a) - b).max())
                     for replica in statistics[1:] for a, b in zip(replica, first, strict=True))
    return {"replica_digests": digests,
            "max_relative_difference": difference / scale if scale else difference}
