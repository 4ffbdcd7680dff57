"""One replica's optimizer step in the TensorFlow backends, and what it counts: the loss and the
correct count (per sample: a language model's window by the mean over its tokens), the epoch's
totals on each replica's device, the fp16 loss scale every replica agrees on.

Apart from the loop (tf_backend.train) because it is the step every TensorFlow backend and its
parity tests (tests/test_tf_models.py, test_cifar.py) run as it is: the same step as PyTorch's
from the same weights, with no pipeline, strategy or timing around it.
"""
import time

import keras
import numpy as np
import tensorflow as tf

from xbench.tf_backend.trace import BOOKKEEPING_SCOPE, INJECTED_SCOPE, OPTIMIZER_SCOPE


class EpochTotals:
    """Loss sum and correct count of an epoch, and the steps after which the loss sum was still
    finite, kept on each replica's device (sync-on-read: no cross-device traffic per step) and
    summed over the replicas when read at the epoch's end. Create it inside the strategy's
    scope."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.values = tf.Variable(tf.zeros(3, tf.float64), trainable=False,
                                  synchronization=tf.VariableSynchronization.ON_READ,
                                  aggregation=tf.VariableAggregation.SUM)

    def add(self, loss_sum, correct):
        loss_sum = tf.cast(loss_sum, tf.float64)
        finite = tf.math.is_finite(self.values[0] + loss_sum)  # this replica's running sum
        self.values.assign_add(tf.stack([loss_sum, tf.cast(correct, tf.float64),
                                         tf.cast(finite, tf.float64)]))

    def reset(self):
        self.values.assign(tf.zeros(3, tf.float64))

    def replicas(self) -> list:
        return [v.numpy() for v in self.strategy.experimental_local_results(self.values)]

    def read(self):
        """[loss sum, correct] over this process's replicas (the collectives sum the
        processes)."""
        return sum(values[:2] for values in self.replicas())

    def first_unfinite_step(self) -> int | None:
        """The first step after which a replica's loss sum was no longer finite (None: none)."""
        return min((int(values[2]) + 1 for values in self.replicas()
                    if not np.isfinite(values[0])), default=None)


def per_sample(values):
    """A value per sample: a language model's is the mean over its window's tokens."""
    return tf.reduce_mean(values, axis=1) if values.shape.rank > 1 else values


def cross_entropy(labels, logits):
    """Per-sample cross-entropy on logits (a window's: the mean over its tokens)."""
    return per_sample(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))


def correct_count(labels, logits):
    """Per sample the share of its predictions that are right (an image's 0 or 1, a window's
    share of next tokens), summed over the batch (pt_backend.train.loss_and_correct)."""
    right = tf.equal(tf.argmax(logits, -1, output_type=labels.dtype), labels)
    return tf.reduce_sum(per_sample(tf.cast(right, tf.float32)))


class AgreedLossScaleOptimizer(keras.mixed_precision.LossScaleOptimizer):
    """Keras' loss-scale optimizer, with every replica agreeing whether a step's gradients are
    finite. Under MirroredStrategy and MultiWorkerMirroredStrategy the gradients reach it
    unsummed (the inner optimizer's update sums them), yet Keras takes the first local replica's
    verdict alone: another replica's overflow would be summed into every weight, and one worker
    would skip the step's all-reduce that the other waits in."""

    def check_finite(self, grads):
        finite = super().check_finite(grads)
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return finite
        overflowed = tf.cast(tf.logical_not(finite), tf.float32)  # replicas that overflowed
        return context.all_reduce(tf.distribute.ReduceOp.SUM, overflowed) == 0


def make_replica_step(model, optimizer, comm, global_batch, totals, slow_seconds=0.0,
                      accumulate=1, sync_each=False):
    """One optimizer step on one replica's share of a global batch. Its loss is its samples'
    loss sum / the global batch, so gradients summed over every replica are those of the global
    batch's mean loss: the same step as on one device. `slow_seconds`: the slow-rank fault,
    this rank's compute made that much longer (an op of its own scope, which the trace counts as
    the rank's backward pass). A LossScaleOptimizer (fp16) gets its loss scaled.

    With `accumulate` K the share is split into K equal micro-batches (a Python loop, unrolled
    in the tf.function: each micro-batch's ops keep their scopes), their gradients summed into
    one update. The gradients cross between replicas once, in the optimizer's update, as with
    one batch; with `sync_each` after every micro-batch: the first K-1 by an explicit all-reduce
    (`comm.reduce`, then the strategy's over its replicas), the last by the update's own. Keras'
    optimizer always sums what it is given over the strategy's replicas, so the sum already
    crossed goes in divided by the replicas, the one way to apply it without crossing it again
    (exact for a power of 2 replicas, within a rounding otherwise)."""
    scaled = isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    variables = model.trainable_variables

    def micro_step(images, labels, slow):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)  # the loss in float32
            losses = cross_entropy(labels, logits)
            loss = tf.reduce_sum(losses) / global_batch
            if slow:
                with tf.name_scope(INJECTED_SCOPE):
                    loss += tf.numpy_function(lambda: _sleep(slow), [], tf.float32)
            if scaled:  # fp16: the loss scaled up, its gradients scaled down in apply_gradients
                loss = optimizer.scale_loss(loss)
        with tf.name_scope(BOOKKEEPING_SCOPE):
            counted = tf.stack([tf.reduce_sum(losses), correct_count(labels, logits)])
        return tape.gradient(loss, variables), counted

    def replica_step(images, labels, indices):
        context = tf.distribute.get_replica_context()
        local = crossed = counted = None
        for micro, (part, part_labels) in enumerate(zip(tf.split(images, accumulate),
                                                         tf.split(labels, accumulate))):
            gradients, sums = micro_step(part, part_labels, slow_seconds if micro == 0 else 0.0)
            counted = sums if counted is None else counted + sums
            if sync_each and micro < accumulate - 1:
                reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, comm.reduce(gradients))
                crossed = reduced if crossed is None else _added(crossed, reduced)
            else:
                local = gradients if local is None else _added(local, gradients)
        gradients = comm.reduce(local)
        if crossed is not None:
            gradients = _added(gradients, [g / context.num_replicas_in_sync for g in crossed])
        with tf.name_scope(OPTIMIZER_SCOPE):
            optimizer.apply_gradients(zip(gradients, variables))
        with tf.name_scope(BOOKKEEPING_SCOPE):
            totals.add(counted[0], counted[1])
        return indices

    return replica_step


def _added(first: list, second: list) -> list:
    return [a + b for a, b in zip(first, second)]


def _sleep(seconds):
    time.sleep(seconds)
    return np.float32(0.0)
