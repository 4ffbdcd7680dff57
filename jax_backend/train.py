"""The JAX training loop of every JAX backend: the hooks (common.running.framework_hooks) of
common.running.training_loop's loop.

One step is one jax.jit-compiled function over a one-axis mesh of the backend's devices: the
global batch sharded over them, the parameters, BatchNorm's statistics and the optimizer's state
replicated, the gradients' all-reduce inserted by XLA. It is compiled ahead of time in the set-up
(its seconds recorded apart, not in epoch 1), and each step's call waits for its result
(block_until_ready): JAX dispatches asynchronously, on a CPU too, and a step's window must hold
its compute. Data order, loss and optimizer step follow the PyTorch loop, so a JAX row and a
PyTorch row of one cell compare.
"""
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from xbench.common.measuring.attribution import CALL
from xbench.common.measuring.target import Evaluation
from xbench.common.measuring.tracing import SAMPLED, TracedCalls
from xbench.common.running.env import cpu_name, peak_rss_bytes
from xbench.common.running.training_loop import TrainingLoop, eval_batch
from xbench.common.workload.precision import lower_dtype
from xbench.common.workload.resolve import own_model
from xbench.common.workload.samples import rank_indices
from xbench.jax_backend import trace
from xbench.jax_backend.flops import flops_check, xla_flops
from xbench.jax_backend.mesh import AXIS, has_tf32

# XLA's passes that merge independent all-reduces into one (CPU's, GPU's).
UNCOMBINED = ("cpu-all-reduce-combiner", "all-reduce-combiner")


def model_inputs(samples, data):
    """What the model takes of a batch of `data`'s samples, inside the compiled step: normalised
    images (channels last, as stored), a language model's token ids, or a model file's samples
    as they are (float32, or its int64 ids as JAX's int32)."""
    if data.is_text or (data.as_given and not jnp.issubdtype(samples.dtype, jnp.floating)):
        return samples.astype(jnp.int32)
    if data.as_given:
        return samples.astype(jnp.float32)
    mean, std = (jnp.asarray(v, jnp.float32) for v in (data.mean, data.std))
    return (samples.astype(jnp.float32) / 255 - mean) / std


def per_sample(values):
    """A value per sample: a language model's is the mean over its window's tokens."""
    return values.mean(axis=tuple(range(1, values.ndim))) if values.ndim > 1 else values


def losses_and_right(logits, labels):
    """Per sample its cross-entropy (nats) and the share of its predictions that are right
    (pt_backend.train.correct_samples)."""
    logits = logits.astype(jnp.float32)  # the loss in float32
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    right = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return per_sample(losses), per_sample(right)


class JaxLoop(TracedCalls, TrainingLoop):
    """Train on `backend`'s mesh of devices of `kind` ("cpu" or "cuda")."""

    def __init__(self, job, comm, backend, kind):
        super().__init__(job, comm, backend)
        self.kind = kind

    # --- set-up -------------------------------------------------------------------------------

    def set_up(self):
        cell, data = self.cell, self.job.data
        self.devices = self.backend.mesh_devices(self.kind)
        self.network = self.backend.network(cell, self.devices)
        self.mesh = self.network.mesh
        self.replicated = NamedSharding(self.mesh, P())
        self.local = [d for d in self.devices if d.process_index == jax.process_index()]
        self.state = self.network.initial_state(self.place_replicated)
        self.base = len(data.train_images)
        self.samples = self.base * cell.multiple
        self.local_batch = cell.global_batch // self.comm.world
        self.sharded = [self.network.batch_sharding((cell.global_batch, *array.shape[1:]))
                        for array in (data.train_images, data.train_labels)]
        self.images = data.train_images
        self.labels = data.train_labels.astype(np.int32)
        began = time.perf_counter()
        example = self.place_batch(np.arange(self.local_batch))[:2]
        lowered = jax.jit(self.step_function(), donate_argnums=0).lower(self.state, *example)
        self.step = lowered.compile(compiler_options=self.compiler_options() or None)
        self.compile_seconds = time.perf_counter() - began
        self.xla_flops = xla_flops(self.step)
        on_gpu = self.kind == "cuda"
        devices = [d.local_hardware_id if on_gpu else d.id for d in self.local]
        self.tracer = trace.JaxTracer(trace.Program(self.step.as_text()), devices, on_gpu)
        self.step_sums = []  # per step, this process's devices' loss and right sums (on device)
        self.taken = []      # per step, this process's share of the global batch (indices)
        self.evaluate_sums = None

    def place_replicated(self, value):
        """A host value replicated on every device of the mesh (each process gives its copy)."""
        return jax.make_array_from_process_local_data(self.replicated, np.asarray(value))

    def place_batch(self, indices):
        """This process's share of a global batch (the samples `indices`), sharded over the
        mesh: its devices' parts contiguous, as rank_indices orders them. Returns the images,
        labels and the indices."""
        base = indices % self.base
        images, labels = (jax.make_array_from_process_local_data(sharding, values[base])
                          for sharding, values in zip(self.sharded, (self.images, self.labels)))
        return images, labels, indices

    def step_function(self):
        """The training step: the global batch's mean loss, its gradients (XLA all-reduces them
        over the mesh), the optimizer's update; the loss and right sums of each device's part.
        With --accumulate K the gradients come from `accumulated`."""
        network, data, cell = self.network, self.job.data, self.cell
        parts = len(self.devices)

        def step(state, images, labels):
            trainable, others, optimizer = state

            def loss(trainable):
                logits, updated = network.forward(trainable, others, model_inputs(images, data),
                                                  training=True)
                losses, right = losses_and_right(logits, labels)
                return losses.mean(), (losses, right, updated)

            if cell.accumulate == 1:
                grads, (losses, right, others) = jax.grad(loss, has_aux=True)(trainable)
            else:
                grads, losses, right, others = self.accumulated(trainable, others, images, labels)
            with jax.named_scope(trace.OPTIMIZER_SCOPE):
                trainable, optimizer = network.update(grads, optimizer, trainable)
            with jax.named_scope(trace.TOTALS_SCOPE):
                sums = jnp.stack([losses.reshape(parts, -1).sum(1),
                                  right.reshape(parts, -1).sum(1)])
                sums = jax.lax.with_sharding_constraint(
                    sums, NamedSharding(self.mesh, P(None, AXIS)))
            return (trainable, others, optimizer), sums

        return step

    def compiler_options(self) -> dict:
        """XLA's options for the step: with accumulate_sync each, its all-reduce combiners off.
        XLA's CPU pipeline drops optimization barriers (cse_barrier_expander) before its
        cpu-all-reduce-combiner, which then merges the K micro-batches' all-reduces into one
        (seen in the compiled program, JAX 0.10); GPUs run all-reduce-combiner."""
        each = self.cell.accumulate > 1 and self.cell.accumulate_sync == "each"
        return {"xla_disable_hlo_passes": ",".join(UNCOMBINED)} if each else {}

    def compile_details(self):
        return {"xla_options": self.compiler_options()} if self.compiler_options() else {}

    def accumulated(self, trainable, others, images, labels) -> tuple:
        """The gradients of the global batch's mean loss over K micro-batches (each device's share
        split K ways on its device), one device's each under shard_map, summed, and crossed by an
        explicit psum of them all as one vector: once after the last, or after every micro-batch.
        Left to XLA's partitioner, every micro-batch's gradients would be all-reduced and its passes
        decide which it merges; so `last` sums locally first, and `each` passes every micro-batch's
        reduced sum and the weights through an optimization_barrier, which the next micro-batch's
        gradients then depend on, and compiles without XLA's all-reduce combiners
        (`compiler_options`): the K all-reduces stay K (counted in the compiled program,
        tests/test_knobs.py). Returns (grads, losses, right, others): BatchNorm's running statistics
        averaged over the devices (each device's are its own micro-batches')."""
        network, data, cell = self.network, self.job.data, self.cell
        each = cell.accumulate_sync == "each"

        def summed(grads):  # one all-reduce of them all (a psum per leaf is one per leaf)
            with jax.named_scope(trace.ACCUMULATE_SCOPE):
                flat, unflatten = ravel_pytree(grads)
            return unflatten(jax.lax.psum(flat, AXIS))

        def local(trainable, others, images, labels):
            grads = None
            losses, right = [], []
            for micro_images, micro_labels in zip(jnp.split(images, cell.accumulate),
                                                  jnp.split(labels, cell.accumulate)):
                def loss(trainable, others=others, micro_images=micro_images,
                         micro_labels=micro_labels):
                    logits, updated = network.forward(trainable, others,
                                                      model_inputs(micro_images, data),
                                                      training=True)
                    values, hits = losses_and_right(logits, micro_labels)
                    return values.sum() / cell.global_batch, (values, hits, updated)

                micro, (values, hits, others) = jax.grad(loss, has_aux=True)(trainable)
                losses.append(values)
                right.append(hits)
                if each:
                    micro = summed(micro)
                with jax.named_scope(trace.ACCUMULATE_SCOPE):
                    grads = micro if grads is None else jax.tree.map(jnp.add, grads, micro)
                if each:
                    grads, trainable = jax.lax.optimization_barrier((grads, trainable))
            if not each:
                grads = summed(grads)
            return (grads, jnp.concatenate(losses), jnp.concatenate(right),
                    jax.lax.pmean(others, AXIS))

        return jax.shard_map(local, mesh=self.mesh, in_specs=(P(), P(), P(AXIS), P(AXIS)),
                             out_specs=(P(), P(AXIS), P(AXIS), P()), check_vma=False)(
            trainable, others, images, labels)

    # --- the loop's hooks ---------------------------------------------------------------------

    def sync(self):
        jax.block_until_ready(self.state)

    def set_learning_rate(self, value):
        trainable, others, optimizer = self.state
        self.state = (trainable, others, self.network.set_learning_rate(
            optimizer, self.place_replicated(np.float32(value))))

    def batches(self, epoch):
        """This epoch's batches, each gathered and placed when the loop asks for it (the input
        part of its step)."""
        order = rank_indices(self.samples, self.cell.global_batch, self.cell.seed, epoch,
                             self.comm.rank, self.comm.world, len(self.local))
        for start in range(0, len(order), self.local_batch):
            yield self.place_batch(order[start:start + self.local_batch])

    def train_step(self, batch):
        images, labels, indices = batch
        self.marks.mark("host")
        if slow := self.faults.slow_for(self.comm.rank):  # the slow-rank fault: this rank's
            time.sleep(slow)  # compute made longer (backward, as TensorFlow's trace labels it)
            self.marks.mark("backward")
        if self.tracer.active:  # a sampled step
            self.state, sums = self.tracer.call(self.run_step(images, labels),
                                                time.perf_counter() - self.marks.origin)
        else:
            self.state, sums = self.run_step(images, labels)()
        self.marks.mark(CALL)  # split by the trace, or as the traced steps' calls were
        self.step_sums.append(sums)
        self.taken.append(indices)

    def run_step(self, images, labels):
        """The compiled step's call on a batch, waiting for its result (JAX dispatches
        asynchronously, on a CPU too: the call's window must hold its compute)."""
        return lambda: jax.block_until_ready(self.step(self.state, images, labels))

    def compiled_ahead_seconds(self):
        return self.compile_seconds

    def attribution_sources(self):
        traced = (f"JAX's profiler inside the step's call (one XLA program), every k-th step of "
                  f"each timed epoch from the second ({SAMPLED} an epoch): each op by its name or "
                  f"the work it serves (jax_backend.trace); other calls as the traced calls split")
        traits = self.backend.traits
        collective = (f"{traced}; the collective: {traits.collectives_counted}"
                      if traits.collectives_counted else traits.collectives_not_counted)
        return {"input": "the host clock: gathering this process's share of the batch and "
                         "placing it on the mesh (jax.make_array_from_process_local_data)",
                **dict.fromkeys(("forward", "backward", "optimizer"), traced),
                "waiting": collective, "communication": collective,
                "host": "the host clock outside the call (bookkeeping), and the step's loss "
                        "and right sums inside it",
                "untraced": "the share of the call's time no op of the trace covers (its "
                            "dispatch, the runtime between ops)"}

    def consumed(self):
        taken, self.taken = self.taken, []
        replicas = len(self.local)
        return [np.concatenate([np.split(step, replicas)[replica] for step in taken]) if taken
                else np.zeros(0, np.int64) for replica in range(replicas)]

    def reset_totals(self):
        self.step_sums = []

    def totals(self):
        """[loss sum, right sum] of this process's devices, each step's kept on them till now."""
        return np.sum([np.zeros(2), *self.step_totals()], axis=0)

    def first_unfinite_step(self):
        unfinite = np.flatnonzero(~np.isfinite(np.cumsum([t[0] for t in self.step_totals()])))
        return int(unfinite[0]) + 1 if len(unfinite) else None

    def step_totals(self) -> list[np.ndarray]:
        return [sum(np.asarray(shard.data, np.float64).sum(axis=1)
                    for shard in sums.addressable_shards) for sums in self.step_sums]

    @property
    def steps_per_epoch(self):
        return self.samples // self.cell.global_batch

    # --- what the replicas hold ---------------------------------------------------------------

    def host_state(self, device: int = 0) -> tuple:
        """(trainable, others) as this process's `device`-th device holds them, on the host."""
        trainable, others, _ = self.state
        return jax.tree.map(lambda leaf: np.asarray(leaf.addressable_data(device)),
                            (trainable, others))

    def replica_weights(self):
        return [self.network.weights(self.host_state(device)[0])
                for device in range(len(self.local))]

    def replica_batchnorm(self):
        return [self.network.batchnorm(self.host_state(device)[1])
                for device in range(len(self.local))]

    def model_state_bytes(self):
        """Every device holds a whole copy of the parameters and the optimizer's state
        (replicated)."""
        trainable, _, optimizer = self.state
        held = sum(leaf.addressable_data(0).nbytes
                   for leaf in jax.tree.leaves((trainable, optimizer)))
        return [held] * len(self.local)

    def peak_memory(self):
        if self.kind == "cuda":
            return [device.memory_stats()["peak_bytes_in_use"] for device in self.local]
        return [peak_rss_bytes()]

    def evaluate(self):
        """Accuracy and mean loss on the whole test set, with the first local device's copy of
        the weights, on that device alone (the evaluation is compiled once, at the first)."""
        data, network = self.job.data, self.network
        trainable, others, _ = jax.tree.map(lambda leaf: leaf.addressable_data(0), self.state)
        if self.evaluate_sums is None:
            def sums(trainable, others, samples, targets):
                logits, _ = network.forward(trainable, others, model_inputs(samples, data),
                                            training=False)
                losses, right = losses_and_right(logits, targets)
                return losses.sum(), right.sum()

            self.evaluate_sums = jax.jit(sums)
        loss_sum = correct = 0.0
        size = eval_batch(self.job.model)
        for start in range(0, len(data.test_images), size):
            samples, targets = jax.device_put(
                (data.test_images[start:start + size],
                 data.test_labels[start:start + size].astype(np.int32)), self.local[0])
            loss, right = self.evaluate_sums(trainable, others, samples, targets)
            loss_sum += float(loss)
            correct += float(right)
        return Evaluation(accuracy=correct / len(data.test_images),
                          loss=loss_sum / len(data.test_images))

    def describe(self):
        per_device = self.cell.global_batch // len(self.devices)
        counted = self.xla_flops / per_device if self.xla_flops else None
        return {
            "framework_version": jax.__version__,
            "params": self.network.parameter_count(self.state[0]),
            "train_samples": self.samples,
            "device_type": self.kind,
            "device_name": self.local[0].device_kind if self.kind == "cuda" else cpu_name(),
            **self.network.details(),
            "mesh": {"axis": AXIS, "devices": len(self.devices), "processes": self.comm.world,
                     "local_devices": [str(d) for d in self.local]},
            "compile_seconds": self.compile_seconds,
            "cpu_affinity": self.backend.cores if self.kind == "cpu" else None,
            "xla_training_flops_per_sample": counted,
            "xla_flops_check": flops_check(counted, own_model(self.cell.model)),
            "math": {**dict.fromkeys(("matmul", "convolution"), self.float32_math()),
                     "precision": self.cell.precision, "lower": lower_dtype(self.cell.precision),
                     "jax_default_matmul_precision":
                         jax.config.jax_default_matmul_precision or "default"}}

    def float32_math(self) -> str:
        """The precision float32 matmuls and convolutions run in here: TF32 on a GPU that has
        it (compute capability 8.0 on) unless the cell asked for fp32 ("highest"), as JAX's
        default precision allows there; else fp32."""
        tf32 = (has_tf32(self.kind, self.local[0])
                and jax.config.jax_default_matmul_precision != "highest")
        return "tf32" if tf32 else "fp32"

    def thread_pools(self):
        """XLA reports no pools: xbench's reading of them. Its CPU client sizes its compute pool
        by the cores the process may use (JaxBackend.take_cores' share: 13 threads in all with
        1 core, 17 with 2, here), runs each local device's program apart, and the loop's own
        thread gathers and places the batches."""
        return {"intra_op": len(os.sched_getaffinity(0)), "inter_op": len(self.local),
                "input_pipeline": 1}

    def gpu_indices(self):
        return [d.local_hardware_id for d in self.local] if self.kind == "cuda" else []
