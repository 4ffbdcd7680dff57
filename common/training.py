"""The one shape of training in every backend, and what each launched process is given.

`TrainingLoop.run` is the order of the parts (set-up; per epoch: barrier, clock, timed steps,
totals; then the evidence and the measurement) and all the arithmetic on them, written once. A
framework's loop (pt_backend.train.TorchLoop, tf_backend.train.TensorFlowLoop) implements only the
hooks, which are framework code: building the model, one training step, reading its totals.
"""
import abc
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from common.backend import Backend
from common.collectives import Collectives
from common.data import MNIST
from common.evidence import shard_overlap, weights_digest
from common.grid import Cell
from common.schema import Measurement
from common.timing import EpochClock, StepTimer, epoch_record, step_percentiles

EVAL_BATCH = 1000  # test images per forward pass when measuring test accuracy


@dataclass
class Job:
    """What each launched process is given: the cell, its data, its share of the cores, and the
    wall-clock time (`time.time()`) at which the runner launched it (start-up is counted from it)."""
    cell: Cell
    data: MNIST
    threads: int
    launched_at: float

    def startup_seconds(self) -> float:
        return time.time() - self.launched_at


class TrainingLoop(abc.ABC):
    """Train one cell in this process and measure it. Subclasses implement the hooks below."""

    def __init__(self, job: Job, comm: Collectives, backend: Backend):
        self.job, self.cell, self.comm, self.backend = job, job.cell, comm, backend

    # --- hooks: the framework's part -------------------------------------------------------

    @abc.abstractmethod
    def set_up(self) -> None:
        """Build the model, optimizer and input pipeline (counted in start-up, not in epochs)."""

    def sync(self) -> None:
        """Wait until the device has finished its queued work (nothing to wait for on the CPU)."""

    def step_timer(self) -> StepTimer:
        return StepTimer()

    @abc.abstractmethod
    def batches(self, epoch: int) -> Iterable:
        """This process's batches of `epoch`, lazily: nothing may be fetched before the loop asks
        for the first batch, which happens after the epoch's clock has started."""

    @abc.abstractmethod
    def train_step(self, batch) -> None:
        """One optimizer step on `batch`, adding its loss sum and correct count to the totals."""

    @abc.abstractmethod
    def reset_totals(self) -> None:
        """Zero the epoch's loss sum and correct count."""

    @abc.abstractmethod
    def totals(self):
        """[loss sum, correct count] of this process's replicas, as the framework's tensor or
        array (the collectives add them over the processes)."""

    @property
    @abc.abstractmethod
    def samples_per_epoch(self) -> int:
        """Samples one epoch trains on, over all processes (the incomplete last batch dropped)."""

    @abc.abstractmethod
    def rank_indices(self, epoch: int) -> np.ndarray:
        """The sample indices this process trains on in `epoch`."""

    @abc.abstractmethod
    def replica_weights(self) -> list[Iterable[np.ndarray]]:
        """The final weights of each replica this process holds, as numpy arrays."""

    @abc.abstractmethod
    def peak_memory(self) -> list[int]:
        """Peak bytes per device of this process (per GPU, or the process's peak RSS on CPU)."""

    @abc.abstractmethod
    def evaluate(self) -> float:
        """Accuracy on the whole test set (called on rank 0 only)."""

    @abc.abstractmethod
    def describe(self) -> dict:
        """framework_version, params, train_samples, device_type, device_name, and the
        framework's own backend details."""

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> Measurement | None:
        """Train for the cell's epochs; the measurement on rank 0, None on the other ranks."""
        self.set_up()
        epochs, startup, step_seconds = [], None, []
        for epoch in range(1, self.cell.epochs + 1):
            batches = self.batches(epoch)
            self.reset_totals()
            self.comm.barrier()
            if startup is None:
                startup = self.job.startup_seconds()
            clock = EpochClock(self.sync)
            clock.start()
            timer = self.step_timer()
            for batch in batches:
                self.train_step(batch)
                timer.mark()
            seconds = clock.stop()
            loss_sum, correct = (float(v) for v in self.comm.sum(self.totals()))
            epochs.append(epoch_record(epoch, self.comm.gather(seconds), self.samples_per_epoch,
                                       loss_sum, correct))
            if epoch == self.cell.epochs:
                step_seconds = _flat(self.comm.gather(timer.seconds()))

        memory = _flat(self.comm.gather(self.peak_memory()))
        digests = _flat(self.comm.gather([weights_digest(w) for w in self.replica_weights()]))
        overlap = shard_overlap(self.comm.gather(self.rank_indices(1).tolist()))
        if self.comm.rank != 0:
            return None
        described = self.describe()
        return Measurement(
            framework_version=described.pop("framework_version"),
            params=described.pop("params"), dataset_source=self.job.data.source,
            train_samples=described.pop("train_samples"),
            device_type=described.pop("device_type"), device_name=described.pop("device_name"),
            epochs=epochs, startup_seconds=startup, **step_percentiles(step_seconds),
            test_accuracy=self.evaluate(), peak_memory_per_device=memory,
            backend_details={"world_size": self.comm.world, "threads_per_process": self.job.threads,
                             "learning_rate_scaled": False, "replica_weight_digests": digests,
                             "shard_overlap_epoch1": overlap, **described,
                             **self.backend.details()})


def _flat(lists):
    return [item for items in lists for item in items]
