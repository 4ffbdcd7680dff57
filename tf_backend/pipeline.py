"""The TensorFlow backends' input: tf.data over the training arrays in common.workload.samples'
seeded order, and what a model takes of a batch (normalised images, token ids, a model file's
samples).

Apart from the loop (tf_backend.train) because it is the part a TensorFlow row shares with a
PyTorch row of the same cell, sample for sample (pt_backend.train's loader, tests/test_tf_mirrored):
the order and the normalisation are checked against PyTorch's here, with no model or step.
"""
import numpy as np
import tensorflow as tf

from xbench.common.workload.samples import rank_indices


class TrainPipeline:
    """tf.data over the uint8 arrays, in common.workload.samples' seeded per-epoch order: this
    process's share of each global batch, gathered by index (a k-times multiple is index % base
    size), normalised in the pipeline and prefetched, with the sample indices it holds (the evidence
    of what was trained on); the strategy splits it over its replicas. `threads`: the pipeline's
    private thread pool."""

    def __init__(self, data, multiple, global_batch, seed, comm, threads, replicas):
        self.images = tf.constant(data.train_images)
        self.labels = tf.constant(data.train_labels.astype(np.int32))
        self.data = data
        self.base = len(data.train_images)
        self.samples = self.base * multiple
        self.global_batch, self.seed, self.comm, self.threads = global_batch, seed, comm, threads
        self.replicas = replicas

    @property
    def steps_per_epoch(self):
        """Global batches per epoch (the incomplete last one dropped)."""
        return self.samples // self.global_batch

    def indices(self, epoch):
        """This process's share of each global batch, ordered for the strategy's contiguous
        split over its replicas."""
        return rank_indices(self.samples, self.global_batch, self.seed, epoch, self.comm.rank,
                            self.comm.world, self.replicas)

    def dataset(self, epochs):
        """All the epochs' batches in one dataset, so that one iterator serves the whole run:
        creating and destroying a (multi-device) iterator per epoch cost seconds, at random,
        inside the epoch times (TF 2.21, logical CPU devices)."""
        def load(index):
            base = index % self.base
            samples = model_inputs(tf.gather(self.images, base), self.data)
            return samples, tf.gather(self.labels, base), index

        options = tf.data.Options()
        options.threading.private_threadpool_size = self.threads
        order = np.concatenate([self.indices(epoch) for epoch in range(1, epochs + 1)])
        return (tf.data.Dataset.from_tensor_slices(order)
                .batch(self.global_batch // self.comm.world, drop_remainder=True)
                .map(load, num_parallel_calls=tf.data.AUTOTUNE)
                .prefetch(tf.data.AUTOTUNE)
                .with_options(options))


def normalise(images, mean, std):
    """uint8 (B, H, W, C) -> float32, normalised per channel (`mean`, `std`: the dataset's) as
    the PyTorch backends do."""
    return (tf.cast(images, tf.float32) / 255 - mean) / std


def model_inputs(samples, data):
    """What the model takes of a batch of `data`'s samples: normalised images, a language model's
    token ids, or a model file's samples as they are (float32, or int64 ids)."""
    if data.is_text:
        return tf.cast(samples, tf.int32)
    if data.as_given:
        return tf.cast(samples, tf.float32 if samples.dtype.is_floating else tf.int64)
    return normalise(samples, data.mean, data.std)
