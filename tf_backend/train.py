"""The TensorFlow training loop shared by tf-mirrored and hvd-tf.

A backend passes the `tf.distribute` strategy that holds the replicas of its process and the
`Collectives` its processes talk through (tf-mirrored: one process, N replicas; hvd-tf: N
processes, one replica each). Data order, loss, timing and the result row follow
pt_backend/train.py, so a TensorFlow row and a PyTorch row of one cell compare.
"""
import time

import keras
import numpy as np
import tensorflow as tf

from common.collectives import SingleProcess
from common.consistency import shard_overlap, weights_digest
from common.data import MEAN, STD, rank_indices
from common.env import cpu_name, peak_rss_bytes
from common.errors import Unsupported
from common.timing import EpochClock, epoch_record, step_percentiles
from tf_backend.models import build_model, build_optimizer, parameter_count

EVAL_BATCH = 1000


class Collectives(SingleProcess):
    """The single-process case (tf-mirrored, whose replicas the strategy keeps in step), plus what
    a TensorFlow loop needs of the processes besides common.collectives: a start from rank 0's
    variables, and gradients combined across processes."""

    def broadcast(self, variables):
        """Make every process start from rank 0's values (one process: nothing to do)."""

    def gradients(self, tape, loss, variables):
        """This replica's gradients, summed over the processes (the loss is already divided by the
        global batch). Keras' optimizer then sums them over the strategy's replicas."""
        return tape.gradient(loss, variables)


class EpochTotals:
    """Loss sum and correct count of an epoch, kept on each replica's device (sync-on-read: no
    cross-device traffic per step) and summed over the replicas when read at the epoch's end.
    Create it inside the strategy's scope."""

    def __init__(self):
        self.values = tf.Variable(tf.zeros(2, tf.float64), trainable=False,
                                  synchronization=tf.VariableSynchronization.ON_READ,
                                  aggregation=tf.VariableAggregation.SUM)

    def add(self, loss_sum, correct):
        self.values.assign_add(tf.cast(tf.stack([loss_sum, correct]), tf.float64))

    def reset(self):
        self.values.assign(tf.zeros(2, tf.float64))

    def read(self):
        """[loss sum, correct] over this process's replicas."""
        return self.values.numpy()


class TrainPipeline:
    """tf.data over the uint8 arrays, in common.data's seeded per-epoch order: this process's
    share of each global batch, gathered by index (a k-times multiple is index % base size),
    normalised in the pipeline and prefetched; the strategy splits it over its replicas."""

    def __init__(self, data, multiple, global_batch, seed, comm, threads):
        self.images = tf.constant(data.train_images)
        self.labels = tf.constant(data.train_labels.astype(np.int32))
        self.base = len(data.train_images)
        self.samples = self.base * multiple
        self.global_batch, self.seed, self.comm, self.threads = global_batch, seed, comm, threads

    @property
    def steps_per_epoch(self):
        """Global batches per epoch (the incomplete last one dropped)."""
        return self.samples // self.global_batch

    @property
    def samples_per_epoch(self):
        return self.steps_per_epoch * self.global_batch

    def indices(self, epoch):
        return rank_indices(self.samples, self.global_batch, self.seed, epoch, self.comm.rank,
                            self.comm.world)

    def dataset(self, epochs):
        """All the epochs' batches in one dataset, so that one iterator serves the whole run:
        creating and destroying a (multi-device) iterator per epoch cost seconds, at random,
        inside the epoch times (TF 2.21, logical CPU devices)."""
        def load(index):
            index = index % self.base
            return normalise(tf.gather(self.images, index)), tf.gather(self.labels, index)

        options = tf.data.Options()
        options.threading.private_threadpool_size = self.threads
        order = np.concatenate([self.indices(epoch) for epoch in range(1, epochs + 1)])
        return (tf.data.Dataset.from_tensor_slices(order)
                .batch(self.global_batch // self.comm.world, drop_remainder=True)
                .map(load, num_parallel_calls=tf.data.AUTOTUNE)
                .prefetch(tf.data.AUTOTUNE)
                .with_options(options))


def normalise(images):
    """uint8 (B, 28, 28) -> float32 (B, 28, 28, 1), normalised as the PyTorch backends do."""
    return (tf.cast(images, tf.float32)[..., tf.newaxis] / 255 - MEAN) / STD


def cross_entropy(labels, logits):
    """Per-sample cross-entropy on logits."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)


def correct_count(labels, logits):
    return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=labels.dtype), labels),
                                 tf.float32))


def make_replica_step(model, optimizer, comm, global_batch, totals):
    """One optimizer step on one replica's share of a global batch. Its loss is its samples'
    loss sum / the global batch, so gradients summed over every replica are those of the global
    batch's mean loss: the same step as on one device."""

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            losses = cross_entropy(labels, logits)
            loss = tf.reduce_sum(losses) / global_batch
        gradients = comm.gradients(tape, loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        totals.add(tf.reduce_sum(losses), correct_count(labels, logits))

    return replica_step


def set_threads(threads):
    """Size TensorFlow's pools to this process's cores; call before TensorFlow initialises."""
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def device_kind(requested, gpus_needed):
    """'cuda' or 'cpu' for this cell (on the CPU, GPUs are hidden from TensorFlow); Unsupported if
    it asks for GPUs this machine lacks. Call before TensorFlow initialises its devices."""
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cuda" and not gpus:
        raise Unsupported("the cell asks for device 'cuda' but TensorFlow sees no GPU "
                          "(tensorflow-cpu, the wheel `make setup` installs, has none)")
    if requested == "cpu" or not gpus:
        tf.config.set_visible_devices([], "GPU")
        return "cpu"
    if len(gpus) < gpus_needed:
        raise Unsupported(f"the cell needs {gpus_needed} GPUs; TensorFlow sees {len(gpus)}")
    return "cuda"


def peak_memory(kind):
    """Peak bytes of this process: per visible GPU from TensorFlow's allocator, else peak RSS."""
    if kind == "cuda":
        return [tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"]
                for i in range(len(tf.config.list_logical_devices("GPU")))]
    return [peak_rss_bytes()]


def replica_digests(strategy, variables):
    """One weights digest per replica of this process, from each variable's per-replica copies."""
    copies = [strategy.experimental_local_results(v.value) for v in variables]
    return [weights_digest(values[replica].numpy() for values in copies)
            for replica in range(strategy.num_replicas_in_sync)]


def train(job, strategy, comm, details):
    """Train the cell's model on `strategy`'s replicas for the cell's epochs.

    Timing as in pt_backend.train: start-up (`job.startup_seconds()`) is read at the start of
    epoch 1 and covers process start, imports, device set-up, reading the data and building the
    model, optimizer and input pipeline. Tracing the tf.function train step (and tf.data's first
    iterator) happens at the first batch, so it falls in epoch 1, as torch's one-time costs do;
    epoch 2 is the steady state. One iterator serves every epoch, and an epoch requests exactly
    its batches: asking a multi-device iterator for one past the last, or replacing it, took 3 to
    70 s on logical CPU devices (TF 2.21), a cost no PyTorch epoch has. Per-step times are the
    host clock between step calls: exact on the CPU, where a step returns when it is done; on a
    GPU they time the host's dispatch (TF has no event timer like CUDA events), so there the
    synchronised epoch times are the measure.
    Returns the result fields on rank 0, None on the other ranks.
    """
    cell = job.cell
    keras.utils.set_random_seed(cell.seed)
    with strategy.scope():
        model = build_model(cell.model)
        optimizer = build_optimizer()
        optimizer.build(model.trainable_variables)
        totals = EpochTotals()
    comm.broadcast(model.variables + optimizer.variables)
    pipeline = TrainPipeline(job.data, cell.multiple, cell.global_batch, cell.seed, comm, job.threads)
    replica_step = make_replica_step(model, optimizer, comm, cell.global_batch, totals)

    @tf.function
    def train_step(images, labels):
        strategy.run(replica_step, args=(images, labels))

    kind = "cuda" if tf.config.get_visible_devices("GPU") else "cpu"
    batches = strategy.experimental_distribute_dataset(pipeline.dataset(cell.epochs))
    iterator, epochs, startup, step_seconds = None, [], None, []
    for epoch in range(1, cell.epochs + 1):
        totals.reset()
        comm.barrier()
        if startup is None:
            startup = job.startup_seconds()
        clock = EpochClock(tf.test.experimental.sync_devices)
        clock.start()
        marks = [time.perf_counter()]
        iterator = iterator or iter(batches)  # created in epoch 1's time, as PyTorch's loader is
        for _ in range(pipeline.steps_per_epoch):
            train_step(*next(iterator))
            marks.append(time.perf_counter())
        seconds = clock.stop()
        loss_sum, correct = comm.sum(totals.read())
        epochs.append(epoch_record(epoch, comm.gather(seconds), pipeline.samples_per_epoch,
                                   loss_sum, correct))
        if epoch == cell.epochs:
            step_seconds = [s for rank in comm.gather(np.diff(marks).tolist()) for s in rank]

    memory = [m for rank in comm.gather(peak_memory(kind)) for m in rank]
    digests = [d for rank in comm.gather(replica_digests(strategy, model.weights)) for d in rank]
    overlap = shard_overlap(comm.gather(pipeline.indices(1).tolist()))
    if comm.rank != 0:
        return None
    return {
        "framework_version": tf.__version__,
        "params": parameter_count(model),
        "dataset": job.data.dataset, "dataset_source": job.data.source,
        "train_samples": pipeline.samples, "device_type": kind,
        "device_name": device_name(kind),
        "epochs": epochs, "startup_seconds": startup, **step_percentiles(step_seconds),
        "test_accuracy": evaluate(model, job.data),
        "peak_memory_bytes": max(memory), "peak_memory_per_device": memory,
        "backend_details": {
            "world_size": comm.world,
            "num_replicas_in_sync": comm.world * strategy.num_replicas_in_sync,
            "replica_devices": [w.device for w in
                                strategy.experimental_local_results(model.weights[0].value)],
            "threads_per_process": job.threads,
            "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                        "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
            "keras_version": keras.__version__, "learning_rate_scaled": False,
            "replica_weight_digests": digests, "shard_overlap_epoch1": overlap, **details},
    }


def device_name(kind):
    if kind == "cuda":
        gpu = tf.config.get_visible_devices("GPU")[0]
        return tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
    return cpu_name()


def evaluate(model, data):
    """Accuracy on the whole test set (rank 0; mirrored weights are read from the first replica)."""
    predict = tf.function(lambda images: tf.argmax(model(normalise(images), training=False), 1))
    correct = 0
    for start in range(0, len(data.test_images), EVAL_BATCH):
        predicted = predict(data.test_images[start:start + EVAL_BATCH]).numpy()
        correct += int(np.sum(predicted == data.test_labels[start:start + EVAL_BATCH]))
    return correct / len(data.test_images)


def is_out_of_memory(error):
    return isinstance(error, (MemoryError, tf.errors.ResourceExhaustedError))
