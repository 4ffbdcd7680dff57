"""One published record's step, part by part (reports.step_model.published reads and checks the
records): its compute from the published per-device rate, its collectives on the step's timeline
(reports.step_model.timeline, the gradients ready evenly over backward) over the record's links,
and the terms beyond them, each from a cited source or the record's own fields, each named in the
record's `terms` where it entered:

- optimizer: the update paid once per optimizer step, not once per micro-batch: the bytes an
  update reads and writes per parameter (OPTIMIZER_BYTES, from each optimizer's published
  algorithm) over the device's memory bandwidth (the record's `memory_bandwidth`, from its data
  sheet). It moves a record's efficiency only where the record accumulates differently at its
  baseline and at N devices; the published rate holds it at the baseline's accumulation.
- sharing: compute slowed while collectives share the device (SHARING: a cited mean slowdown
  of compute overlapped with communication on GPUs, or the record's own `sharing_factor`): the
  seconds of backward under collectives do 1/factor as much work each, in the timeline's
  prediction and in the all-hidden bound.
- accumulation: the record's micro-batches per collective, and where its code all-reduces the
  summed gradients once after the last micro-batch (`collectives_after_backward`), every
  message launched after backward.
- stragglers: the record's published spread of one device's step time (`step_spread`, relative
  standard deviation), the expected largest of N draws of it (none where no spread was
  published).
- input: the samples a second one node's input pipeline delivers (`input_rate`, cited), a floor
  under the step where N devices ask for more.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from xbench.common.backends.protocol import AFTER_BACKWARD, Protocol
from xbench.reports.step_model.step import Link, expected_largest, step_collectives

BACKWARD_SHARE = 2 / 3  # of a step's compute, where nothing measured it: twice forward's work


@dataclass(frozen=True)
class Sharing:
    """How much slower compute runs while collectives share its device, and where that is said."""
    factor: float
    source: str


SHARING = Sharing(1.189, (
    "arXiv:2507.03114 (Characterizing Compute-Communication Overlap in GPU-Accelerated "
    "Distributed Deep Learning, 2025), abstract: 'overlapping computation and communication can "
    "result in an average computational slowdown of 18.9%, with a maximum of 40.0%' (GPT and "
    "LLaMA models on 4 A100s, H100s, MI250s and MI210s)"))

# Bytes an update reads and writes per parameter, fp32 state: SGD with momentum reads the
# parameter, its gradient and the momentum and writes the parameter and the momentum (5 x 4);
# Adam (torch.optim.Adam's algorithm: m, v and the parameter from the gradient) reads 4 tensors
# and writes 3 (7 x 4); LAMB (You et al. 2019, arXiv:1904.00962, Algorithm 2) is Adam's update
# and, per layer, the norms of the parameter and of the update read once more (9 x 4).
OPTIMIZER_BYTES = {"sgd-momentum": 20.0, "adam": 28.0, "lamb": 36.0}


@dataclass(frozen=True)
class RecordStep:
    """What a record's step is made of, per micro-batch and per update."""
    micro: float         # seconds of one micro-batch's compute (forward and backward)
    optimizer: float     # seconds of one update
    batch: int           # samples of a micro-batch on one device
    size: float          # bytes of one sync's gradients
    crossing: Protocol
    link: Link
    node_link: Link
    bucket: int | None
    reshard: str
    sharing: float = 1.0     # compute's slowdown under collectives (1: none)
    spread: float = 0.0      # a device's step time's relative standard deviation
    input_rate: float = 0.0  # samples a second one node's input delivers (0: no floor)

    @property
    def backward(self) -> float:
        return BACKWARD_SHARE * self.micro

    def collectives(self, devices: int, nodes: int, backward: float) -> dict[str, float]:
        return step_collectives(None, self.crossing, self.size, backward, devices, nodes,
                                self.link, self.node_link, self.bucket, self.reshard)

    def per_sample(self, devices: int, nodes: int, accumulation: int) -> dict[str, float]:
        """Seconds per sample on one device, none of the collectives hidden, all hidden behind
        the last micro-batch's backward, and as the timeline has them (with the moving and
        exposed seconds and the share hidden of one optimizer step)."""
        found = self.collectives(devices, nodes, self.backward)
        moving = found["moving"]
        slowed = (1 - 1 / self.sharing) * found["under_backward"]
        if slowed > 0:  # backward lengthened by its slowed seconds, its timeline once more
            found = self.collectives(devices, nodes, self.backward + slowed)
            slowed = (1 - 1 / self.sharing) * found["under_backward"]
        hidden_most = min(moving, self.backward * self.sharing)
        steps = {"no_overlap": moving,
                 "full_overlap": (1 - 1 / self.sharing) * hidden_most
                 + max(moving - self.backward * self.sharing, 0.0),
                 "predicted": slowed + found["exposed"]}
        compute = accumulation * self.micro + self.optimizer
        waiting = accumulation * self.micro * self.spread * expected_largest(devices * nodes)
        floor = devices * accumulation * self.batch / self.input_rate if self.input_rate else 0.0
        samples = accumulation * self.batch
        per_sample = {key: max(compute + exposed + waiting, floor) / samples
                      for key, exposed in steps.items()}
        # a single pass of the timeline's fixed point: keep it within the bounds it refines
        per_sample["predicted"] = min(max(per_sample["predicted"], per_sample["full_overlap"]),
                                      per_sample["no_overlap"])
        return {**per_sample, "moving": moving, "exposed": found["exposed"],
                "hidden": found["hidden"], "waiting": waiting, "floor": floor}


def record_step(entry: dict, link: Link, node_link: Link, crossing: Protocol,
                reshard: str) -> tuple[RecordStep, dict]:
    """The record's RecordStep (`entry`: checked by reports.step_model.published), and its terms
    as data: each term that entered, with its numbers and source."""
    accumulation = int(entry.get("accumulation", 1))
    baseline_accumulation = int(entry.get("baseline_accumulation", accumulation))
    terms: dict = {}
    optimizer = 0.0
    if "optimizer" in entry:
        moved = OPTIMIZER_BYTES[entry["optimizer"]] * entry["parameters"]
        optimizer = moved / entry["memory_bandwidth"]
        terms["optimizer"] = {"seconds": optimizer, "optimizer": entry["optimizer"],
                              "bytes_per_parameter": OPTIMIZER_BYTES[entry["optimizer"]],
                              "memory_bandwidth": entry["memory_bandwidth"]}
    batch = entry["per_device_batch"]
    # the published rate holds the baseline's accumulation and its one update per step
    step = baseline_accumulation * batch / entry["per_device_rate"]
    micro = max(step - optimizer, 0.0) / baseline_accumulation
    if entry.get("collectives_after_backward"):
        crossing = dataclasses.replace(crossing, launch=AFTER_BACKWARD)
    if max(accumulation, baseline_accumulation) > 1:
        terms["accumulation"] = {"micro_batches": accumulation,
                                 "baseline_micro_batches": baseline_accumulation,
                                 "after_backward": bool(entry.get("collectives_after_backward"))}
    sharing = entry.get("sharing_factor", SHARING.factor)
    terms["sharing"] = {"factor": sharing, "source": "the record's sources"
                        if "sharing_factor" in entry else SHARING.source}
    if "step_spread" in entry:
        terms["stragglers"] = {"spread": entry["step_spread"]}
    if "input_rate" in entry:
        terms["input"] = {"samples_per_second_per_node": entry["input_rate"]}
    size = entry.get("gradient_bytes_per_parameter", 4) * entry["parameters"]
    bucket = int(entry["bucket_bytes"]) if "bucket_bytes" in entry else None
    return RecordStep(micro, optimizer, batch, size, crossing, link, node_link, bucket, reshard,
                      sharing, entry.get("step_spread", 0.0), entry.get("input_rate", 0.0)), terms
