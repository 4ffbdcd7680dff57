"""Training to a target, MLPerf Training's measure: a test accuracy to reach (a classifier's), or
a validation loss to fall to (a language model's, in nats per token); where in an epoch the test
set is evaluated (the same optimizer steps in every backend), the curve, and what the row says of
the time to the target.

The time to the target is counted as MLPerf counts it: the epochs' wall clock from the first step
to the end of the evaluation that reached the target, evaluations included ("seconds"; xbench's
bookkeeping between epochs is not counted, nor its work between steps: TensorFlow's tracer, which
every epoch's time leaves out as `untimed_seconds`); beside it the training alone
("training_seconds": the evaluations taken out, as every epoch's time is). A run
that reaches its target goes on to the end of that epoch, and of epoch 2 at least, so that every
epoch in its row is whole and its rate is read from epoch 2 as in every other row; no evaluation
runs after the target is reached.

Framework-free: the loop (common.running.training_loop) evaluates and reports here; the
arithmetic is here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

MIN_EPOCHS = 2  # every ok row has a warm-up epoch and a steady one (common.results.schema)


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation of the whole test set found."""
    accuracy: float  # the share of samples (a language model's: of next tokens) predicted right
    loss: float      # the mean cross-entropy, nats (a language model's: per token)


@dataclass
class TargetRun:
    """One run's way to its target, kept alike on every rank (each rank learns the evaluation
    from rank 0, so that all stop at the same step)."""
    target: float
    evals_per_epoch: int
    steps_per_epoch: int
    global_batch: int
    metric: str = "accuracy"           # reached at or above it; "loss": at or below it
    curve: list[dict] = field(default_factory=list)
    reached: dict | None = None        # the curve's first point that meets the target
    _training_before: float = 0.0      # training seconds of the finished epochs
    _wall_before: float = 0.0          # the same with their evaluations

    @classmethod
    def of(cls, cell, steps_per_epoch: int) -> TargetRun | None:
        """The cell's target run, or None where it has no target."""
        if cell.target_loss:
            return cls(cell.target_loss, cell.evals_per_epoch, steps_per_epoch,
                       cell.global_batch, metric="loss")
        if cell.target_accuracy:
            return cls(cell.target_accuracy, cell.evals_per_epoch, steps_per_epoch,
                       cell.global_batch)
        return None

    @cached_property
    def points(self) -> list[int]:
        """The steps of an epoch (1-based) after which the test set is evaluated: after every
        1/evals_per_epoch of its steps, rounded, the last one the epoch's last step
        (worked out once: `due` asks after every timed step)."""
        return sorted({max(1, round(k * self.steps_per_epoch / self.evals_per_epoch))
                       for k in range(1, self.evals_per_epoch + 1)})

    def due(self, step: int) -> bool:
        """Whether to evaluate after step `step` of the epoch."""
        return self.reached is None and step in self.points

    def met(self, evaluation: Evaluation) -> bool:
        if self.metric == "loss":
            return evaluation.loss <= self.target
        return evaluation.accuracy >= self.target

    def record(self, epoch: int, step: int, evaluation: Evaluation, training: float,
               wall: float) -> None:
        """The evaluation after step `step` of epoch `epoch`; `training` and `wall`: seconds
        of this epoch so far, without and with its evaluations (this one's included)."""
        steps = (epoch - 1) * self.steps_per_epoch + step
        point = {"epoch": epoch, "step": steps, "samples": steps * self.global_batch,
                 "epochs": steps / self.steps_per_epoch, "accuracy": float(evaluation.accuracy),
                 "loss": float(evaluation.loss), "seconds": self._wall_before + wall,
                 "training_seconds": self._training_before + training}
        self.curve.append(point)
        if self.reached is None and self.met(evaluation):
            self.reached = point

    def end_epoch(self, epoch: int, training: float, evaluating: float) -> None:
        """Epoch `epoch` just timed: its training seconds as its record has them (the slowest
        rank's, its evaluations and the work between its steps out) and its evaluations'. A point
        evaluated after its last step takes these: a target reached at an epoch's end took the
        epochs' time as their records have it (the slowest rank's, not this rank's own clock)."""
        last = self.curve[-1] if self.curve else None
        if last and last["step"] == epoch * self.steps_per_epoch:
            last.update(seconds=self._wall_before + training + evaluating,
                        training_seconds=self._training_before + training)
        self._training_before += training
        self._wall_before += training + evaluating

    def finished(self, epoch: int) -> bool:
        """Whether the run ends after epoch `epoch` (the target reached, epoch 2 done)."""
        return self.reached is not None and epoch >= MIN_EPOCHS

    def summary(self) -> dict:
        """What the row records (its `time_to_target`): the target, whether it was reached, the
        time, samples and epochs to it (null where it was not) and the curve."""
        reached = self.reached or {}
        return {"target": self.target, "metric": self.metric,
                "evals_per_epoch": self.evals_per_epoch,
                "converged": self.reached is not None,
                **{name: reached.get(name) for name in
                   ("seconds", "training_seconds", "samples", "epochs")},
                "curve": self.curve}
