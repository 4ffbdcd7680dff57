"""The one shape of training in every backend: the loop's side of a contract whose other side,
what each framework supplies, is common.running.framework_hooks.

`TrainingLoop.run` is the order of the parts (set-up; per epoch: barrier, clock, timed steps,
totals; then the evidence, the attribution of the steps and the measurement) and all the
arithmetic on them, written once. A framework's loop (pt_backend.train.TorchLoop,
tf_backend.train.TensorFlowLoop, jax_backend.train.JaxLoop) implements only the hooks, which are
framework code: building the model, one training step (marking where its parts end:
common.measuring.attribution), reading its totals.
"""
from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass, field

import numpy as np

from xbench.common.backends.backend import Backend
from xbench.common.backends.collectives import Collectives
from xbench.common.errors import UserError
from xbench.common.measuring import alone, attribution
from xbench.common.measuring.contention import ContentionProbe, epoch_contention
from xbench.common.measuring.evidence import batchnorm_evidence, sample_evidence, weights_digest
from xbench.common.measuring.step_marks import StepMarks, WindowMarks
from xbench.common.measuring.target import Evaluation, TargetRun
from xbench.common.measuring.timeline import timeline_record
from xbench.common.measuring.timing import EpochClock, epoch_record, step_percentiles
from xbench.common.results.schema import Measurement
from xbench.common.running.busy_machine import OMP_VARIABLES
from xbench.common.running.framework_hooks import TrainingHooks
from xbench.common.running.job import Job
from xbench.common.running.placement import node_name, pin_rank
from xbench.common.workload import faults
from xbench.common.workload.model import Model

EVAL_BATCH = 1000  # test images per forward pass of an evaluation
EVAL_TOKENS = 64 * 1024  # a language model's: test windows of this many tokens in all
# The thread budget of every device in every backend, besides its compute threads (the cores
# shared out over the devices): one inter-op thread and one input-pipeline thread. A process
# driving k devices gets k times each.
INTER_OP_PER_DEVICE = 1
INPUT_PIPELINE_PER_DEVICE = 1


class TrainingLoop(TrainingHooks):
    """Train one cell in this process and measure it. Subclasses implement the hooks
    (`TrainingHooks`)."""

    def __init__(self, job: Job, comm: Collectives, backend: Backend):
        self.job, self.cell, self.comm, self.backend = job, job.cell, comm, backend
        self.faults = faults.parse(self.cell.inject)

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> Measurement | None:
        """Train for the cell's epochs; the measurement on rank 0, None on the other ranks."""
        self.set_up()
        if self.cell.pin_ranks:
            pin_rank(self.comm)
        marks = StepMarks if attribution.INSTRUMENTED else WindowMarks
        self.marks = marks(*self.step_clock())
        ran = Ran(target=TargetRun.of(self.cell, self.steps_per_epoch))
        self.train_epochs(ran)
        self.gather(ran)
        measurement = self.measure(ran) if self.comm.rank == 0 else None
        # Every rank leaves together: a gloo rank that tore its process group down while rank 0
        # still evaluated aborted now and then ("terminate called without an active exception").
        self.comm.leave()
        return measurement

    def train_epochs(self, ran: Ran) -> None:
        """The timed epochs, until the cell's last or the one that reached its target."""
        probe = ContentionProbe(node_name(), self.gpu_indices())
        report = self.job.progress
        if self.comm.rank == 0:
            report.start(self.cell.epochs, self.steps_per_epoch, self.cell.global_batch)
        for epoch in range(1, self.cell.epochs + 1):
            record = self.train_epoch(epoch, ran, probe)
            ran.epochs.append(record)
            if ran.target:
                ran.target.end_epoch(epoch, record["seconds"], record["evaluation_seconds"])
                if ran.target.finished(epoch):
                    break
        report.stop()

    def train_epoch(self, epoch: int, ran: Ran, probe: ContentionProbe) -> dict:
        """One epoch, timed from the barrier every rank passed to its last step: its record."""
        batches = self.batches(epoch)
        self.reset_totals()
        probe.list_cell()
        self.comm.barrier()
        self.marks.start_epoch()
        if ran.startup is None:
            ran.startup = self.job.startup_seconds()
        report, target = self.job.progress, ran.target
        report.begin_epoch(epoch)
        probe.start()
        clock = EpochClock(self.sync)
        clock.start()
        evaluating = 0.0  # seconds of this epoch's evaluations, taken out of its time
        untimed = [0.0]  # and of the work between its steps that is no part of training
        for step, batch in enumerate(self.timed_batches(batches, epoch, untimed), 1):
            wanted = self.cell.learning_rate(ran.steps, self.steps_per_epoch)
            if wanted != ran.learning_rate:  # only under a warm-up, and once at the start
                self.set_learning_rate(wanted)
                ran.learning_rate = wanted
            self.train_step(batch)
            self.marks.end()
            ran.steps += 1
            report.done = step  # read by the report's own thread, outside this loop
            if target and target.due(step):
                self.between(epoch, None, untimed)  # a tracer stopped: no evaluation is traced
                evaluating += self.evaluate_for(target, epoch, step, clock, evaluating,
                                                untimed[0])
        seconds = clock.stop() - evaluating - untimed[0]
        watched = probe.stop()
        report.end_epoch(seconds)
        steps = self.marks.steps()
        ran.timed.append((seconds, steps))
        ran.consumed.append(self.consumed())
        return self.epoch_record(epoch, seconds, steps, watched, evaluating, untimed[0])

    def epoch_record(self, epoch: int, seconds: float, steps: list, watched: dict,
                     evaluating: float, untimed: float) -> dict:
        """The epoch as the row records it, from every rank's time, input wait and contention."""
        loss_sum, correct = (float(v) for v in self.comm.sum(self.totals()))
        if not math.isfinite(loss_sum):
            self.diverged(epoch, loss_sum)
        waited = sum(part_seconds(step, "input") for step in steps)
        ranks = self.comm.gather((seconds, watched, waited))
        samples = self.steps_per_epoch * self.cell.global_batch
        record = epoch_record(epoch, [s for s, _, _ in ranks], samples, loss_sum, correct)
        record["input_seconds"] = max(w for _, _, w in ranks)
        record["contention"] = epoch_contention([w for _, w, _ in ranks],
                                                self.cell.contention_limit)
        if self.cell.target_accuracy or self.cell.target_loss:
            record["evaluation_seconds"] = evaluating
        record["untimed_seconds"] = untimed  # in every framework, so rows of one cell compare
        return record

    def diverged(self, epoch: int, loss_sum: float) -> None:
        """Stop the cell (every rank: the loss sum is summed over all): a loss that is not finite
        trains nothing further, and its row is `failed`, naming the epoch and step, never `ok`."""
        steps = [step for step in self.comm.gather(self.first_unfinite_step()) if step]
        at = f", step {min(steps)} of {self.steps_per_epoch}" if steps else ""
        raise UserError(f"epoch {epoch}{at}: the training loss became {loss_sum} (not finite): "
                        f"the weights diverged or the data holds values that are not finite; "
                        f"try a lower learning rate, or check the data")

    def gather(self, ran: Ran) -> None:
        """What every rank recorded, gathered to rank 0 (every rank calls the same collectives
        in the same order), and the test accuracy and loss, evaluated on rank 0."""
        gather = self.comm.gather
        ran.step_seconds = _flat(gather([s.end - s.start for s in ran.timed[-1][1]]))
        ran.memory = _flat(gather(self.peak_memory()))
        ran.model_state = _flat(gather(self.model_state_bytes()))
        ran.digests = _flat(gather([weights_digest(w) for w in self.replica_weights()]))
        ran.statistics = _flat(gather(self.replica_batchnorm()))
        by_replica = [list(epochs_of_replica) for epochs_of_replica in zip(*ran.consumed)]
        ran.replicas = _flat(gather(by_replica))
        ran.hosts = gather(node_name())
        self.gather_for_evaluation()
        ran.evaluation = self.evaluate() if self.comm.rank == 0 else None
        self.comm.barrier()
        ran.attribution = (self.attribute(ran.timed, self.traced_steps())
                           if attribution.INSTRUMENTED else None)

    def evaluate_for(self, target: TargetRun, epoch: int, step: int, clock: EpochClock,
                     evaluated: float, untimed: float) -> float:
        """Evaluate at one of the target's points, every rank told rank 0's accuracy (so that
        all stop together); the seconds it took, from the moment every rank had trained to the
        point (the wait for a slower rank is training's, as at a collective). `evaluated`: the
        seconds of this epoch's earlier evaluations; `untimed`: of the work between its steps so
        far (TensorFlow's tracer), out of the time to the target as out of the epoch's."""
        self.sync()
        self.comm.barrier()
        began = time.perf_counter()
        self.gather_for_evaluation()
        found = self.comm.gather(astuple(self.evaluate()) if self.comm.rank == 0 else None)[0]
        ended = time.perf_counter()
        target.record(epoch, step, Evaluation(*found),
                      training=began - clock.started - evaluated - untimed,
                      wall=ended - clock.started - untimed)
        return ended - began

    def timed_batches(self, batches: Iterable, epoch: int, untimed: list[float]) -> Iterator:
        """The epoch's batches, each step's window opened when the loop asks for its batch, and
        the wait for it marked as the step's input part (the input-delay fault waits there);
        the work between steps outside the windows, its seconds added to `untimed[0]`."""
        batches = iter(batches)
        for step in itertools.count(1):
            self.between(epoch, step, untimed)
            self.marks.begin()
            try:
                batch = next(batches)
            except StopIteration:
                self.marks.discard()
                self.between(epoch, None, untimed)
                return
            if self.faults.input_delay:
                time.sleep(self.faults.input_delay)
            self.marks.mark("input")
            yield batch

    def between(self, epoch: int, step: int | None, untimed: list[float]) -> None:
        if type(self).between_steps is TrainingHooks.between_steps:
            return  # nothing of the framework's runs between its steps
        began = time.perf_counter()
        self.between_steps(epoch, step)
        untimed[0] += time.perf_counter() - began

    def attribute(self, timed: list, traced: list | None) -> dict | None:
        """Every timed epoch's steps split into their parts on every rank
        (common.measuring.attribution), summarised per rank and gathered to rank 0. Where a step
        is one opaque call, a step the tracer sampled is split by what it saw, and every other
        call as the sampled calls were."""
        shares, seen = None, {}
        if traced is not None:
            calls = [step for _, _, step in traced]
            latest = attribution.everyones_ready(calls, self.comm.gather)
            shares = attribution.call_shares(calls, latest)
            seen = {(epoch, index): step for epoch, index, step in traced}
        epochs = []
        for epoch, (seconds, steps) in enumerate(timed, 1):
            steps = [attribution.with_trace(step, seen[(epoch, index)])
                     if (epoch, index) in seen else step for index, step in enumerate(steps, 1)]
            latest = attribution.everyones_ready(steps, self.comm.gather)
            ranks = self.comm.gather({**attribution.summarize(steps, latest, seconds, shares),
                                      "timeline": timeline_record(steps, latest)})
            epochs.append({"ranks": ranks, "slowest_rank": attribution.slowest_rank(ranks)})
        return {"how": self.attribution_sources(), "epochs": epochs,
                "traced_steps": self.tracing(),
                "alone": self.collectives_alone(epochs[-1]["ranks"])}

    def collectives_alone(self, ranks: list[dict]) -> dict | None:
        """The step's collectives replayed alone once training is over (every rank calls the same
        collectives: `ranks` is every rank's last epoch, gathered to all), where some of them ran
        beside backward and the framework reduces through the cell's collectives; None where
        every one ran after backward (those are their own time alone), none crossed, or they
        crossed where the cell's collectives cannot replay them (inside a compiled step)."""
        sizes = alone.step_messages(ranks)
        if (not self.comm.carries_gradients or self.comm.world < 2 or not sizes
                or alone.all_after_backward(ranks)):
            return None
        return alone.replay(self.comm, self.collective_buffer, self.sync, sizes,
                            self.cell.syncs_per_step)

    def measure(self, ran: Ran) -> Measurement:
        """Rank 0's measurement of the run."""
        described, details = self.describe(), self.backend.details()
        per_device = self.job.threads_per_device
        return Measurement(
            framework_version=described.pop("framework_version"),
            params=described.pop("params"), dataset_source=self.job.data.source,
            train_samples=described.pop("train_samples"),
            device_type=described.pop("device_type"), device_name=described.pop("device_name"),
            epochs=ran.epochs, startup_seconds=ran.startup,
            **step_percentiles(ran.step_seconds), test_accuracy=ran.evaluation.accuracy,
            test_loss=ran.evaluation.loss,
            peak_memory_per_device=ran.memory, model_state_per_device=ran.model_state,
            hosts=ran.hosts,
            threads={"per_device": {"compute": per_device, "inter_op": INTER_OP_PER_DEVICE,
                                    "input_pipeline": INPUT_PIPELINE_PER_DEVICE},
                     "per_process": self.thread_pools(),
                     "omp_wait": {**self.job.omp_wait, "environment": {
                         key: os.environ.get(key) for key in OMP_VARIABLES}}},
            contended=any(e["contention"]["contended"] for e in ran.epochs),
            evidence=self.evidence(ran),
            backend_details={"world_size": self.comm.world, **described, **details,
                             **self.job.model.row_record(),
                             "traffic": self.backend.traffic(self.cell, self.job.model,
                                                             details.get("reduction", "none")),
                             "accumulation": self.accumulation(), "compiled": self.compiled(),
                             "buckets": self.buckets()},
            attribution=ran.attribution,
            time_to_target=ran.target.summary() if ran.target else None,
            warmup_seconds=self.warmup_seconds(ran))

    def accumulation(self) -> dict:
        """How the step accumulated its micro-batches, as the backend's traits say it does."""
        cell = self.cell
        return {"micro_batches": cell.accumulate, "micro_batch": cell.micro_batch,
                "sync": cell.accumulate_sync, "syncs_per_step": cell.syncs_per_step,
                "how": self.backend.traits.sync_modes.get(cell.accumulate_sync)}

    def buckets(self) -> dict | None:
        """What the cell's bucket_mb gave its library, in whole bytes (None: its own buckets)."""
        return {"bytes": self.cell.bucket_bytes,
                "through": self.backend.traits.bucket_knob} if self.cell.bucket_mb else None

    def compiled(self) -> dict:
        """Whether the step ran compiled, and by what (JAX's always is, whatever --compile)."""
        framework = self.backend.traits.framework
        on = self.cell.compile == "on"
        how = self.backend.traits.compiler if on else framework.uncompiled
        return {"compiled": on or bool(framework.always_compiled), "how": how,
                **self.compile_details()}

    def warmup_seconds(self, ran: Ran) -> float | None:
        """What starting cost beyond steady steps, the same in every framework: epoch 1's
        seconds less its steps at the last epoch's median step (every rank's), plus what the
        set-up compiled ahead of time. None with one epoch timed (nothing steady to set it
        against)."""
        if len(ran.timed) < 2 or not ran.step_seconds:
            return None
        first = ran.epochs[0]["seconds"] - len(ran.timed[0][1]) * float(np.median(ran.step_seconds))
        return max(first, 0.0) + self.compiled_ahead_seconds()

    def evidence(self, ran: Ran) -> dict:
        """What the replicas' weights and samples say they trained (common.measuring.evidence)."""
        return {"replica_weight_digests": ran.digests,
                **sample_evidence(ran.replicas, self.steps_per_epoch),
                **self.sampler_evidence(),
                **({"batchnorm": batchnorm_evidence(ran.statistics)} if ran.statistics[0]
                   else {})}


@dataclass
class Ran:
    """What a run recorded as it went (its epochs, their timed steps and consumed samples, where
    the learning rate stood), then what the ranks gathered to rank 0 for its measurement."""
    target: TargetRun | None
    epochs: list[dict] = field(default_factory=list)
    timed: list[tuple[float, list]] = field(default_factory=list)  # (seconds, steps) per epoch
    consumed: list = field(default_factory=list)  # per epoch, per replica, the sample indices
    startup: float | None = None
    steps: int = 0
    learning_rate: float | None = None
    step_seconds: list[float] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)
    model_state: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    statistics: list = field(default_factory=list)
    replicas: list = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    evaluation: Evaluation | None = None
    attribution: dict | None = None


def eval_batch(model: Model) -> int:
    """Test samples per forward pass of an evaluation: EVAL_BATCH images, or windows of
    EVAL_TOKENS tokens in all."""
    return max(1, EVAL_TOKENS // model.input_shape()[0]) if model.predicts_sequence else EVAL_BATCH


def part_seconds(step, part: str) -> float:
    """Seconds of the intervals of `step` marked `part`."""
    return sum(end - start for label, start, end, _ in step.intervals if label == part)


def _flat(lists):
    return [item for items in lists for item in items]
