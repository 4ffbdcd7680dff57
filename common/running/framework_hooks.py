"""What a framework's training loop supplies: the hooks
`common.running.training_loop.TrainingLoop` calls, each framework code (building the model, one
training step, reading its totals, weights and memory, evaluating).

A module apart from the loop because it is the other side of the contract: what a framework
implements (pt_backend.train.TorchLoop, tf_backend.train.TensorFlowLoop,
jax_backend.train.JaxLoop), read without the loop's order and arithmetic, as
common.backends.backend's `Backend` is read without the runner's. A hook with a body here is one
a framework may leave as it is.
"""
from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from xbench.common.measuring.attribution import Step
from xbench.common.measuring.target import Evaluation


class TrainingHooks(abc.ABC):
    """The framework's part of training one cell; `TrainingLoop` gives each hook its moment."""

    @abc.abstractmethod
    def set_up(self) -> None:
        """Build the model, optimizer and input pipeline (counted in start-up, not in epochs)."""

    def sync(self) -> None:
        """Wait until the device has finished its queued work (nothing to wait for on the CPU)."""

    def step_clock(self) -> tuple[Callable[[], object], Callable[[object, object], float]]:
        """Where each step's moments come from, and the seconds between two of them: the host
        clock (on a GPU: CUDA events, so that a part is device time)."""
        return time.perf_counter, lambda start, end: end - start

    @abc.abstractmethod
    def batches(self, epoch: int) -> Iterable:
        """This process's batches of `epoch`, lazily: nothing may be fetched before the loop asks
        for the first batch, which happens after the epoch's clock has started."""

    @abc.abstractmethod
    def set_learning_rate(self, value: float) -> None:
        """Use `value` from the next optimizer step on (called only when it changes)."""

    @abc.abstractmethod
    def train_step(self, batch) -> None:
        """One optimizer step on `batch`, adding its loss sum and correct count to the totals and
        keeping the sample indices each replica consumed (read from the batch). It marks where
        each part it can see ends (`self.marks.mark(part)`), reports its collective
        (`self.marks.collective`), and makes this rank's compute `self.faults.slow_for(rank)`
        seconds longer (the slow-rank fault)."""

    def between_steps(self, epoch: int, step: int | None) -> None:
        """Work between two timed steps that is no part of training (TensorFlow's tracer
        started before a sampled step and stopped after it), before step `step` of `epoch`
        begins (None: after its last, or before an evaluation): its seconds are taken out of
        the epoch's time and lie outside every step's window, as an evaluation's do."""

    def traced_steps(self) -> list[tuple[int, int, Step]] | None:
        """(epoch, step, what a tracer saw inside that step's call: a
        common.measuring.attribution.Step in seconds from its epoch's origin) of the timed
        steps a tracer sampled, for a framework whose step is one opaque call; None where
        `train_step`'s marks see every part."""
        return None

    def tracing(self) -> dict | None:
        """Which timed steps the tracer sampled, as the row records it (None: none)."""
        return None

    def compile_details(self) -> dict:
        """What the framework's compiler was told and did, for the row's `compiled` record
        (where --compile chose one)."""
        return {}

    def compiled_ahead_seconds(self) -> float:
        """Seconds the set-up spent compiling the step before epoch 1 (JAX compiles it ahead
        of time); 0 where the first steps compile it (in epoch 1's time)."""
        return 0.0

    def collective_buffer(self, size: int) -> Any:
        """A float32 buffer of `size` bytes on this rank's device, that the cell's collectives
        (`self.comm.sum`, where they carry the gradients) reduce: a step's collectives replayed
        alone (common.measuring.alone)."""
        return np.zeros(size // 4, np.float32)

    def attribution_sources(self) -> dict[str, str]:
        """How each part of a step is known here: {part: how}."""
        return {}

    def sampler_evidence(self) -> dict:
        """What the framework's own sampler dealt, where the backend uses one (PyTorch's
        DistributedSampler: the lab's question 5)."""
        return {}

    @abc.abstractmethod
    def consumed(self) -> list[np.ndarray]:
        """Per replica of this process, the sample indices it trained on since the last call
        (the epoch just timed), in order; called after the epoch's clock stopped."""

    @abc.abstractmethod
    def reset_totals(self) -> None:
        """Zero the epoch's loss sum and correct count."""

    @abc.abstractmethod
    def totals(self):
        """[loss sum, correct count] of this process's replicas, as the framework's tensor or
        array (the collectives add them over the processes)."""

    @abc.abstractmethod
    def first_unfinite_step(self) -> int | None:
        """The epoch's first step (1-based) after which this process's loss sum was no longer
        finite, None while it is: counted on the device as the steps run (a host read per step
        would stall a GPU's queue and change what is timed)."""

    @property
    @abc.abstractmethod
    def steps_per_epoch(self) -> int:
        """Optimizer steps in one epoch (global batches; the incomplete last one dropped)."""

    @abc.abstractmethod
    def replica_weights(self) -> list[Iterable[np.ndarray]]:
        """The final weights of each replica this process holds, as numpy arrays."""

    @abc.abstractmethod
    def replica_batchnorm(self) -> list[list[np.ndarray]]:
        """Per replica of this process, every BatchNorm's running mean and variance as it holds
        them (empty lists where the model has no BatchNorm)."""

    @abc.abstractmethod
    def peak_memory(self) -> list[int]:
        """Peak bytes per device of this process (per GPU, or the process's peak RSS on CPU)."""

    @abc.abstractmethod
    def model_state_bytes(self) -> list[int]:
        """Per device of this process: bytes of the trainable parameters and the optimizer's
        state it holds between steps (the part a sharding backend divides over the devices),
        counted on the tensors at the end of the run."""

    @abc.abstractmethod
    def evaluate(self) -> Evaluation:
        """Accuracy and mean loss on the whole test set (called on rank 0 only)."""

    def gather_for_evaluation(self) -> None:
        """On every rank, before rank 0 evaluates: assemble the whole model where the ranks
        hold shards of it (a collective); nothing where every rank holds all of it."""

    @abc.abstractmethod
    def describe(self) -> dict:
        """framework_version, params, train_samples, device_type, device_name, and the
        framework's own backend details."""

    @abc.abstractmethod
    def thread_pools(self) -> dict:
        """The process's thread pools as the framework reports them: intra_op, inter_op,
        input_pipeline."""

    def gpu_indices(self) -> list[int]:
        """The GPUs this process drives (whose other users are watched); none on the CPU."""
        return []
