"""The TensorFlow training loop of every TensorFlow backend: the hooks
(common.running.framework_hooks) of common.running.training_loop's loop, around its input
(tf_backend.pipeline) and its replica's step (tf_backend.step).

The backend gives the `tf.distribute` strategy that holds the replicas of its process and the
collectives its processes talk through (tf-mirrored: one process, N replicas; hvd-tf: N
processes, one replica each). Data order, loss and step follow the PyTorch loop, so a TensorFlow
row and a PyTorch row of one cell compare.
"""
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from xbench.common.measuring.attribution import CALL
from xbench.common.measuring.target import Evaluation
from xbench.common.measuring.tracing import SAMPLED, TracedCalls
from xbench.common.running.env import peak_rss_bytes
from xbench.common.running.training_loop import INPUT_PIPELINE_PER_DEVICE, TrainingLoop, eval_batch
from xbench.common.workload.precision import LOSS_SCALE_GROWTH_STEPS, LOSS_SCALE_START, lower_dtype
from xbench.keras_models.models import (
    batchnorm_statistics,
    build_model,
    build_optimizer,
    parameter_count,
)
from xbench.tf_backend.device import device_name, math_allowed, use_float32_math
from xbench.tf_backend.pipeline import TrainPipeline, model_inputs
from xbench.tf_backend.step import (
    AgreedLossScaleOptimizer,
    EpochTotals,
    correct_count,
    cross_entropy,
    make_replica_step,
)
from xbench.tf_backend.trace import TensorFlowTracer, collective_sizes


def set_threads(intra_op, inter_op):
    """Size TensorFlow's pools; call before TensorFlow initialises."""
    tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)


class TensorFlowLoop(TracedCalls, TrainingLoop):
    """Train on `strategy`'s replicas. Tracing the tf.function train step (and tf.data's first
    iterator) happens at the first batch, so it falls in epoch 1, as torch's one-time costs do;
    epoch 2 is the steady state. One iterator serves every epoch, and an epoch requests exactly
    its batches: asking a multi-device iterator for one past the last, or replacing it, took 3 to
    70 s on logical CPU devices (TF 2.21), a cost no PyTorch epoch has. Per-step times are the
    host clock between step calls: exact on the CPU, where a step returns when it is done; on a
    GPU they time the host's dispatch (TF has no event timer like CUDA events), so there the
    synchronised epoch times are the measure."""

    def __init__(self, job, comm, backend, strategy):
        super().__init__(job, comm, backend)
        self.strategy = strategy
        self.kind = "cuda" if tf.config.get_visible_devices("GPU") else "cpu"
        self.evaluation_sums = None  # the evaluation's traced loss and correct sums (`evaluate`)

    def set_up(self):
        cell = self.cell
        if self.kind == "cuda":
            use_float32_math(cell.precision)
        # the layers made from here on compute in the cell's precision, their weights float32
        lower = lower_dtype(cell.precision)
        keras.mixed_precision.set_global_policy(f"mixed_{lower}" if lower else "float32")
        with self.strategy.scope():
            self.model = build_model(self.job.model, cell.seed)
            self.optimizer = build_optimizer(cell.optimizer, cell.lr, cell.momentum,
                                             cell.weight_decay)
            if cell.precision == "fp16":
                self.optimizer = AgreedLossScaleOptimizer(
                    self.optimizer, initial_scale=LOSS_SCALE_START,
                    dynamic_growth_steps=LOSS_SCALE_GROWTH_STEPS)
            self.loss_scales = []
            self.optimizer.build(self.model.trainable_variables)
            self.epoch_totals = EpochTotals(self.strategy)
        self.comm.broadcast(self.model.variables + self.optimizer.variables)
        self.pipeline = TrainPipeline(self.job.data, cell.multiple, cell.global_batch, cell.seed,
                                      self.comm, INPUT_PIPELINE_PER_DEVICE * self.replicas,
                                      self.replicas)
        replica_step = make_replica_step(self.model, self.optimizer, self.comm, cell.global_batch,
                                         self.epoch_totals, self.faults.slow_for(self.comm.rank),
                                         cell.accumulate, cell.accumulate_sync == "each")

        @tf.function(jit_compile=cell.compile == "on")
        def train_step(images, labels, indices):
            return self.strategy.run(replica_step, args=(images, labels, indices))

        self.step = train_step
        self.distributed = self.backend.distribute(self.strategy,
                                                   lambda: self.pipeline.dataset(cell.epochs))
        self.tracer = TensorFlowTracer()
        self.iterator = None
        self.taken = []

    def collective_buffer(self, size):
        return tf.zeros(size // 4)

    def sync(self):
        """Wait for this process's GPUs (its replicas' devices; under MultiWorkerMirroredStrategy
        the other workers' devices are theirs to wait for). On a CPU there is nothing to wait for:
        TensorFlow returns from a call when its work is done."""
        if self.kind == "cuda":
            for device in self.replica_devices():
                with tf.device(device):
                    tf.raw_ops.SyncDevice()

    def replica_devices(self):
        return [w.device for w in self.strategy.experimental_local_results(
            self.model.weights[0].value)]

    def set_learning_rate(self, value):
        self.optimizer.learning_rate.assign(value)

    def batches(self, epoch):
        """Exactly this epoch's batches from the one iterator (a generator: the iterator is made
        when epoch 1 asks for its first batch, inside its time, as PyTorch's loader is)."""
        self.iterator = self.iterator or iter(self.distributed)
        for _ in range(self.pipeline.steps_per_epoch):
            yield next(self.iterator)

    def train_step(self, batch):
        self.marks.mark("host")
        if self.tracer.active:  # a sampled step: on a GPU synchronised, so the trace holds
            if not self.tracer.sizes:  # its collectives' bytes, from the step's graph
                self.tracer.sizes = collective_sizes(self.step.get_concrete_function(*batch).graph)
            indices = self.tracer.call(  # the device's time
                lambda: (self.step(*batch), self.sync())[0],
                time.perf_counter() - self.marks.origin)
        else:
            indices = self.step(*batch)
        self.marks.mark(CALL)  # split by the trace, or as the traced steps' calls were
        self.taken.append(self.strategy.experimental_local_results(indices))

    def compile_details(self):
        """What tf.function was told (jit_compile), as the row records it."""
        return {"jit_compile": self.cell.compile == "on"}

    def attribution_sources(self):
        traced = (f"TensorFlow's profiler inside the step's call (one tf.function): every k-th "
                  f"step of each timed epoch from the second, {SAMPLED} an epoch, traced, its "
                  f"ops labelled by name scope; the other steps' calls split by the traced "
                  f"calls' shares")
        traits = self.backend.traits
        collective = (f"{traced}; the collective: {traits.collectives_counted}"
                      if traits.collectives_counted else traits.collectives_not_counted)
        untraced = "the share of the call's time no op of the trace covers"
        if self.cell.compile == "on":  # tf_backend.trace: the compiled cluster is one op
            traced += ("; under jit_compile=True the trace sees the step as one op (XLA's "
                       "cluster), so none of its time is counted here: it is untraced")
            untraced += (", and the compiled step's one op: under jit_compile=True the trace "
                         "sees XLA's cluster of the whole step as one op and cannot split it "
                         "into forward, backward and optimizer")
        return {"input": "the host clock: the loop's wait for tf.data's next batch",
                **dict.fromkeys(("forward", "backward", "optimizer"), traced),
                "waiting": collective, "communication": collective,
                "host": "the host clock outside the call (bookkeeping)",
                "untraced": untraced}

    def consumed(self):
        taken, self.taken = self.taken, []
        return [np.concatenate([step[replica].numpy() for step in taken]) if taken
                else np.zeros(0, np.int64) for replica in range(self.replicas)]

    def reset_totals(self):
        self.epoch_totals.reset()

    def totals(self):
        """The epoch's loss sum and correct count (called once at its end, when fp16's loss
        scale is noted too: its history per epoch)."""
        if isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer):
            self.loss_scales.append(float(self.optimizer.dynamic_scale.numpy()))
        return self.epoch_totals.read()

    def first_unfinite_step(self):
        return self.epoch_totals.first_unfinite_step()

    @property
    def steps_per_epoch(self):
        return self.pipeline.steps_per_epoch

    @property
    def replicas(self):
        """Replicas in this process."""
        return self.backend.devices_per_process(self.cell)

    def replica_weights(self):
        """Each replica's copy of every trainable weight (mirrored variables hold one per
        replica)."""
        copies = [self.strategy.experimental_local_results(v.value)
                  for v in self.model.trainable_weights]
        return [[values[replica].numpy() for values in copies]
                for replica in range(self.replicas)]

    def replica_batchnorm(self):
        """Each replica's copy of every BatchNorm's moving mean and variance."""
        copies = [self.strategy.experimental_local_results(v.value)
                  for v in batchnorm_statistics(self.model)]
        return [[values[replica].numpy() for values in copies]
                for replica in range(self.replicas)]

    def model_state_bytes(self):
        """Every replica holds its own copy of each trainable weight and optimizer variable
        (mirrored variables)."""
        held = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize
                   for v in [*self.model.trainable_weights, *self.optimizer.variables])
        return [held] * self.replicas

    def peak_memory(self):
        if self.kind == "cuda":
            return [tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"]
                    for i in range(len(tf.config.list_logical_devices("GPU")))]
        return [peak_rss_bytes()]

    def evaluate(self):
        """Accuracy and mean loss on the whole test set (mirrored weights are read from the
        first replica). The evaluation is traced once, at the first (a run to a target evaluates
        many times)."""
        data = self.job.data
        if self.evaluation_sums is None:
            model = self.model

            def sums(samples, targets):
                logits = tf.cast(model(model_inputs(samples, data), training=False), tf.float32)
                return (tf.reduce_sum(cross_entropy(targets, logits)),
                        correct_count(targets, logits))

            self.evaluation_sums = tf.function(sums)
        loss_sum = correct = 0.0
        size = eval_batch(self.job.model)
        for start in range(0, len(data.test_images), size):
            loss, right = self.evaluation_sums(data.test_images[start:start + size],
                                       data.test_labels[start:start + size].astype(np.int32))
            loss_sum += float(loss)
            correct += float(right)
        return Evaluation(accuracy=correct / len(data.test_images),
                          loss=loss_sum / len(data.test_images))

    def describe(self):
        return {
            "framework_version": tf.__version__, "params": parameter_count(self.model),
            "train_samples": self.pipeline.samples, "device_type": self.kind,
            "device_name": device_name(self.kind),
            "num_replicas_in_sync": self.comm.world * self.replicas,
            "replica_devices": self.replica_devices(),
            "keras_version": keras.__version__,
            "cpu_kernels": ("Eigen (oneDNN off: TF_ENABLE_ONEDNN_OPTS=0)"
                            if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0"
                            else "oneDNN where TensorFlow has one (its x86 default)"),
            "math": {**math_allowed(self.kind), "precision": self.cell.precision,
                     "lower": lower_dtype(self.cell.precision),
                     **({"loss_scale": self.loss_scales} if self.loss_scales else {})}}

    def thread_pools(self):
        return {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                "input_pipeline": self.pipeline.threads}

    def gpu_indices(self):
        if self.kind != "cuda":
            return []
        first = self.backend.local_rank() * self.replicas
        return list(range(first, first + self.replicas))
