"""The model of one step of an N-device cell, part by part, from its 1-device cell (a pair, as
reports.step_model.predict.references makes them) and the links its collectives cross (Link): what
reports.step_model.predict predicts with.

A step on N devices is its compute, the part of its gradients' collectives that the compute does
not hide, and the wait for the slowest rank:

- compute: the 1-device cell's attributed parts per step (common.measuring.attribution); input,
  forward and backward in proportion to the per-device batch (strong scaling divides it by the
  devices, weak scaling keeps it), optimizer and host overhead as they are. On a CPU an
  N-device cell's ranks share the cores, so their compute is slower by the cores a rank lost
  against the 1-device cell (its threads, or its share of the cores where the ranks outnumber
  them), to a power calibrated on measured cells of the backend (how far from linear its
  framework's threads scale, and what its ranks' own input pipelines cost on shared cores),
  else on those of the other backends on the device type.
- collectives: each pass of a ring (a reduce-scatter or an all-gather) moves (N-1)/N of the
  bytes through every device's link and pays N-1 latencies per message; across M nodes the
  devices of a node reduce among themselves and the nodes exchange through one link each
  (hierarchical, as NCCL and Horovod do): (M-1)/M of the bytes and M-1 latencies per message
  more. The passes are the backend's protocol's (common.backends.protocol: an all-reduce two,
  FSDP's gathers and reduce-scatter three, two when it reshards after backward); a reduction
  through one device moves 2(N-1) copies through that device. Messages: the protocol's, in the
  cell's buckets where its library takes them.
- exposed: what of the collectives the step waits for once backward is over, from the step's
  timeline (reports.step_model.timeline): the 1-device cell's gradients ready over its backward
  (scaled to the N-device cell's), formed into messages as the library forms them and queued on one
  stream, each lasting its ring's latencies and bytes over the link at the library's
  calibrated efficiency (reports.step_model.calibration). HTA's overlap share, the time a collective
  was in flight while its rank computed, is not what is hidden: on a CPU a collective in flight
  beside backward may only be waiting for a core.
- waiting: the expected maximum of N ranks' step times over their mean, from the 1-device cell's
  spread (p50 and p90 of its steps, read as a normal distribution, and the expected largest of N
  draws from it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy import integrate, stats

from xbench.common.backends.protocol import Protocol
from xbench.common.measuring.attribution import COMPUTE
from xbench.common.workload import faults
from xbench.reports.numbers.analysis import protocol, wire_size
from xbench.reports.step_model.timeline import (
    Gradient,
    even_curve,
    exposed_seconds,
    hidden_share,
    messages,
    recorded_curve,
    under_backward,
)
from xbench.reports.step_model.timeline import crossing as crossing_gradients

if TYPE_CHECKING:
    import pandas as pd

COMPUTE_PARTS = ("input", "forward", "backward", "optimizer", "host")
PER_SAMPLE = ("input", "forward", "backward")  # in proportion to the per-device batch


@dataclass(frozen=True)
class Link:
    """A link: bytes per second each way, seconds per ring step, whether its ranks share it (one
    capped loopback carries every rank's bytes), where the figures come from, and the device
    model it joins where only one does (NVLink's GPUs; None for a PCIe slot or a network)."""
    name: str
    rate: float
    latency: float
    source: str
    shared: bool = False
    device: str | None = None


def expected_largest(count: int) -> float:
    """The expected largest of `count` standard normal draws, 0 for one: the integral of x times
    the largest's density, count φ(x) Φ(x)^(count-1)."""
    if count < 2:
        return 0.0
    def density(x):
        return x * count * stats.norm.pdf(x) * stats.norm.cdf(x) ** (count - 1)
    return float(integrate.quad(density, -12, 12, limit=200)[0])


def pass_seconds(size: float, devices: int, nodes: int, link: Link, node_link: Link,
                 messages: int) -> float:
    """One ring pass (reduce-scatter or all-gather) of `size` bytes over `devices` per node and
    `nodes` nodes, hierarchical: within each node, then between the nodes."""
    seconds = 0.0
    for count, over in ((devices, link), (nodes, node_link)):
        if count > 1:
            rate = over.rate / count if over.shared else over.rate
            seconds += (count - 1) / count * size / rate + messages * (count - 1) * over.latency
    return seconds


def collective_seconds(protocol: Protocol, size: float, devices: int, nodes: int, link: Link,
                       node_link: Link, messages: int, reshard: str) -> float:
    """Seconds one step's gradient collectives move data for (none overlapped)."""
    if devices * nodes < 2 or not protocol.crosses:
        return 0.0
    if protocol.through_one_device:  # one process's devices: N-1 copies in, the sum out N-1
        return 2 * (devices - 1) * (size / link.rate + messages * link.latency)
    return protocol.ring_passes(reshard) * pass_seconds(size, devices, nodes, link, node_link,
                                                        messages)


def relative_spread(cell) -> float:
    """The 1-device cell's step-time standard deviation over its median, from p50 and p90."""
    p50, p90 = cell["step_time_p50"], cell["step_time_p90"]
    if not (p50 and p90 and np.isfinite(p50) and np.isfinite(p90)):
        return 0.0
    return max(p90 - p50, 0.0) / stats.norm.ppf(0.9) / p50


def injected_link(inject) -> float | None:
    """The cap of a cell's link (inject link=RATE), None where uncapped."""
    if not isinstance(inject, str) or inject == faults.NONE:
        return None
    return faults.parse(inject).link_bytes_per_second


def fault_outside_model(inject) -> bool:
    """Whether a cell's injected fault has no part in the model (an input delay, a slow rank):
    such a cell is never predicted."""
    if not isinstance(inject, str) or inject == faults.NONE:
        return False
    found = faults.parse(inject)
    return bool(found.input_delay) or found.slow_rank is not None


def core_share(threads, cores, devices_per_node) -> float | None:
    """The cores one rank of a CPU cell computes on: its threads, or its share of the node's
    cores where its node's ranks have more threads than there are cores."""
    known = [v for v in (threads, cores, devices_per_node) if isinstance(v, (int, float)) and v > 0]
    return min(threads, cores / devices_per_node) if len(known) == 3 else None


def cores_lost(pair) -> float:
    """How many times fewer cores a rank of a CPU cell computes on than its 1-device cell did
    (1 off a CPU, or where the row does not say)."""
    if pair["device_type"] != "cpu":
        return 1.0
    mine = core_share(pair["threads_per_device"], pair["cores"], pair["devices_per_node"])
    reference = core_share(pair["threads_per_device_1"], pair["cores_1"],
                           pair["devices_per_node_1"])
    return reference / mine if mine and reference else 1.0


def compute_parts(pair, core_exponent: float) -> dict[str, float]:
    """The N-device cell's compute parts per step, from its 1-device cell's: the per-sample
    parts in proportion to the per-device batch, and all of them slower by the cores a rank
    lost to the power `core_exponent` (1: in proportion, 0: not at all)."""
    share = pair["per_device_batch"] / pair["per_device_batch_1"]
    factor = cores_lost(pair) ** core_exponent
    return {p: pair[f"{p}_step_1"] * (share if p in PER_SAMPLE else 1) * factor
            for p in COMPUTE_PARTS}


def bucket_bytes(pair) -> int | None:
    """The cell's bucket_mb in bytes, None where it set none (its library's own buckets: the
    protocol's messages)."""
    bucket = pair.get("bucket_mb")
    return int(bucket * 2**20) if bucket else None


def probe_rate(pair, probes: dict) -> float | None:
    """The probe's bus bandwidth of the cell's library on as many processes and nodes, at the
    size nearest the cell's gradients (bytes per second), or None."""
    found = [a for a in probes.get(pair["env"], {}).get("all_reduce", [])
             if (a["library"], a["device_type"], a["nodes"], a["world_size"]) ==
             (pair["collective_library"], pair["device_type"], pair["nodes"], pair["devices"])]
    if not found:
        return None
    size = pair["bytes"] or wire_size(pair)
    return min(found, key=lambda a: abs(math.log(a["bytes"] / size)))["busbw"]


def carrier(pair) -> tuple[str, str]:
    """(family, name) of what carries a cell's gradients: its collective library between
    processes, or the copies between the devices of one process (DataParallel,
    MirroredStrategy), which no library's rate says anything of."""
    if protocol(pair).through_one_device:
        return "in-process", f"{pair['backend']} copies"
    library = pair["collective_library"]
    return "between processes", library if isinstance(library, str) else pair["backend"]


def pooled(values: dict[str, float], key: str, default: float | None) -> float | None:
    """The value for `key`, else the median over the other keys, else `default`."""
    if key in values:
        return values[key]
    return float(np.median(list(values.values()))) if values else default


def gradient_curve(timeline: dict | None, size: float, backward: float) -> list[Gradient]:
    """The gradients of a step ready over `backward` seconds, `size` bytes in all: the 1-device
    cell's recorded curve scaled to them, else ready evenly."""
    recorded = timeline["gradients"] if timeline else []
    total = sum(g["bytes"] for g in recorded)
    if not total:
        return even_curve(size, backward)
    return [Gradient(g.ready, g.size * size / total) for g in
            recorded_curve(recorded, backward, timeline["backward_seconds"])]


def syncs(cell) -> tuple[int, bool]:
    """(micro-batches a step, whether every one of them syncs) of a cell (accumulate_sync
    each); rows of no accumulation: (1, False)."""
    return int(cell["accumulate"]), cell["accumulate"] > 1 and cell["accumulate_sync"] == "each"


def sync_bytes(cell, counted: float | None) -> float:
    """The gradient bytes one sync reduces: the bytes a step `counted` over the syncs a step
    makes, else computed from the model."""
    micro_batches, each = syncs(cell)
    return counted / (micro_batches if each else 1) if counted else wire_size(cell)


def step_collectives(timeline: dict | None, crossing: Protocol, size: float, backward: float,
                     devices: int, nodes: int, link: Link, node_link: Link,
                     bucket: int | None, reshard: str, micro_batches: int = 1,
                     each: bool = False) -> dict[str, float]:
    """One optimizer step's collectives on its timeline (`size`: the bytes one sync reduces;
    `micro_batches` backward passes a step, every one synced where `each`): their own seconds
    (moving), the share the step did not wait for (hidden), the seconds that ran before
    backward's end, and the seconds the step waits for after it (exposed)."""
    if devices * nodes < 2 or not crossing.crosses:
        return {"moving": 0.0, "hidden": math.nan, "under_backward": 0.0, "exposed": 0.0}
    def seconds(message: float) -> float:
        return collective_seconds(crossing, message, devices, nodes, link, node_link, 1, reshard)
    every = gradient_curve(timeline, size * micro_batches, backward)
    found = messages(crossing_gradients(every, micro_batches, each), backward, crossing, bucket,
                     seconds)
    moving = sum(m.end - m.start for m in found)
    exposed = exposed_seconds(found, backward)
    share = hidden_share(exposed, moving)
    return {"moving": moving, "hidden": math.nan if share is None else share,
            "under_backward": under_backward(found, backward), "exposed": exposed}


def pair_one(pair) -> dict:
    """The 1-device cell's step-time percentiles of a pair."""
    return {"step_time_p50": pair["step_time_p50_1"], "step_time_p90": pair["step_time_p90_1"]}


def split_apart(frame: pd.DataFrame) -> pd.Series:
    """Which attributed cells' steps were split into parts: not those whose step is one call no
    mark or trace splits (a JAX step recorded before xbench traced it: no forward, backward or
    optimizer seen at all), which the model has no compute of to scale."""
    return frame[[f"{part}_share" for part in COMPUTE]].sum(axis=1) > 0
