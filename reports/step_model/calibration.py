"""What reports.step_model.predict takes from measured cells, never from the cell it predicts: how a
rank's compute grows with the cores it lost, and how fast each library's collectives run on this
machine's links when nothing else runs beside them.

The second is calibrated on collectives of known bytes that ran with nothing to overlap: those
launched once backward was over (common.measuring.timeline's `after_backward`: one bucket as
large as the model, DDP's last bucket, TensorFlow's packs). On a CPU a collective in flight
beside backward waits for cores, so its time says little of the link. Per carrier (the library,
or a process's copies) and link class (the experimenter's cap, or the machine's own), a least-
squares fit with both terms at least 0 of

    seconds = messages x ring steps x latency + seconds at the nominal link rate / efficiency

where the nominal rate is the cap (shared by the ranks on one loopback) on a capped link, and 1
byte a second on the machine's own (whose rate is then what the efficiency says).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize

from xbench.common.backends.protocol import FUSED_EACH_CYCLE
from xbench.reports.step_model.step import (
    COMPUTE_PARTS,
    Link,
    bucket_bytes,
    carrier,
    collective_seconds,
    compute_parts,
    cores_lost,
    expected_largest,
    injected_link,
    protocol,
    sync_bytes,
    syncs,
)

# What a Wire is calibrated on, the first preferred: the collectives launched after backward,
# else (a cell with none carrying enough bytes) all of a step's over their moving time, which on
# a CPU includes their wait for cores beside backward: a slower rate than the link's.
ALONE, MOVING = "collectives after backward", "moving time"


@dataclass(frozen=True)
class Wire:
    """A library's collectives on a class of link, as calibrated: seconds per ring step of a
    message, and the share of the nominal link rate it moves bytes at; the `cells` it came from
    and what of theirs (`basis`: ALONE or MOVING)."""
    latency: float
    efficiency: float
    cells: int
    basis: str = ALONE


# The collectives launched after backward must carry at least this share of a step's bytes for
# their rate to stand for all of them (a last small tensor's says only its latency).
AFTER_BACKWARD_SHARE = 0.25


@dataclass
class Calibration:
    """How a rank's compute grows with the cores it lost (the exponent, per device type and
    backend), how much of each second its collectives run under backward the backward loses
    (`sharing`, per carrier, with the cells it came from), how far apart N ranks' steps are
    (`spread`, per device type and backend, with its cells), each carrier's Wire per link
    class, and how many cells it came from."""
    core_exponent: dict[str, dict[str, float]]
    wire: dict[tuple[str, str, str], Wire]  # by carrier, class of link and basis
    family: dict[str, str]  # each calibrated carrier's family (step_model.carrier)
    cells: int
    sharing: dict[str, tuple[float, int]] = field(default_factory=dict)
    spread: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)


def link_class(pair) -> str:
    """What a measured collective is of: a capped link's cells (the experimenter's cap) or the
    machine's own."""
    return "capped" if injected_link(pair["inject"]) is not None else "uncapped"


def nominal_link(pair) -> Link:
    """The link a cell's collectives are calibrated against: its cap, shared by the ranks of the
    one loopback, or 1 byte a second on the machine's own."""
    cap = injected_link(pair["inject"])
    if cap is not None:
        return Link("capped loopback", cap, 0.0, "inject", shared=True)
    return Link("nominal", 1.0, 0.0, "calibration")


def calibration_point(pair) -> tuple[str, tuple[float, float, float]] | None:
    """(basis, (ring steps its messages paid, seconds at the nominal link, seconds measured)):
    the collectives a cell launched after backward where they carried at least
    AFTER_BACKWARD_SHARE of the step's bytes (a last small bucket's time is its latency and its
    wait for a core, no rate; a reduction through one device: all its copies, all after
    backward), else all of the step's over their time alone where the cell replayed them
    (common.measuring.alone), else over their moving time; None where nothing was timed."""
    crossing, devices = protocol(pair), pair["devices"]
    if not crossing.crosses:
        return None
    basis, size, seconds = ALONE, pair.get("after_bytes"), pair.get("after_seconds")
    messages = 1 if crossing.launch == FUSED_EACH_CYCLE else pair.get("after_messages")
    steps = crossing.ring_passes(pair["reshard"]) * (devices - 1)
    if crossing.through_one_device:
        size, messages, steps = pair["bytes"], 1, 2 * (devices - 1)
        seconds = pair["moving_seconds"] or pair["communication_step"]
    if not (size and seconds and np.isfinite(size) and np.isfinite(seconds) and seconds > 0
            and size >= AFTER_BACKWARD_SHARE * pair["bytes"]):
        alone = pair.get("alone_seconds")
        basis, size, seconds = ((ALONE, pair["bytes"], alone) if alone and np.isfinite(alone)
                                else (MOVING, pair["bytes"], pair["moving_seconds"]))
        micro_batches, each = syncs(pair)  # every sync's messages, where each micro-batch syncs
        messages = (micro_batches if each else 1) * crossing.messages(sync_bytes(pair, size),
                                                                      bucket_bytes(pair))
        if not (size and seconds and np.isfinite(seconds) and seconds > 0):
            return None
    link = nominal_link(pair)
    nominal = collective_seconds(crossing, size, devices, 1, link, link, 0, pair["reshard"])
    return basis, (max(messages or 1, 1) * steps, nominal, seconds)


def fit_wire(points: list[tuple[float, float, float]], basis: str) -> Wire:
    """Latency and efficiency from (ring steps, nominal seconds, seconds) points: least squares,
    both terms at least 0; one point gives its efficiency alone."""
    if len(points) == 1:
        steps, nominal, seconds = points[0]
        return Wire(0.0, nominal / seconds, 1, basis)
    design = np.array([[steps, nominal] for steps, nominal, _ in points], dtype=float)
    scale = design.max(axis=0)
    scale[scale == 0] = 1.0
    (latency, inverse), _ = optimize.nnls(design / scale, np.array([p[2] for p in points]))
    latency, inverse = latency / scale[0], inverse / scale[1]
    if inverse <= 0:  # every point the same size: no slope to read, the efficiency of their mean
        return Wire(0.0, float(np.mean([n / s for _, n, s in points])), len(points), basis)
    return Wire(float(latency), float(1 / inverse), len(points), basis)


def overlapped(pair) -> bool:
    """Whether a cell's collectives ran under its compute (their time alone beyond what the
    step waited for): such a cell's compute is slower by the collectives beside it too."""
    under = pair.get("under_compute_seconds")
    return bool(under and np.isfinite(under) and under > 0)


def core_exponents(pairs: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The cores' exponent per device type and backend, the median over its cells, calibrated
    on the cells whose collectives ran with nothing beside them where a backend has any (the
    others' compute is also slowed by the collectives under it: `sharing`)."""
    exponents: dict = {}
    for _, pair in pairs.iterrows():
        measured = sum(pair[f"{p}_step"] for p in COMPUTE_PARTS)
        unslowed = sum(compute_parts(pair, 0.0).values())
        lost = cores_lost(pair)
        # a backend whose collectives' time is inside its compute (FSDP's) says nothing of it
        if not protocol(pair).collectives_in_compute and unslowed > 0 and lost != 1:
            exponents.setdefault(pair["device_type"], {}).setdefault(pair["backend"], []).append(
                (overlapped(pair), math.log(measured / unslowed) / math.log(lost)))
    def median(found):
        alone = [value for under, value in found if not under]
        return float(np.median(alone or [value for _, value in found]))
    return {kind: {backend: median(v) for backend, v in found.items()}
            for kind, found in exponents.items()}


def sharing_shares(pairs: pd.DataFrame, exponents: dict) -> dict[str, tuple[float, int]]:
    """Per carrier: the share of each second its collectives ran under backward that backward
    lost ((measured backward - backward as the cores' exponent has it) / the collectives' time
    under compute, the median over its overlapped cells, from 0 to 1), and how many cells."""
    found: dict = {}
    for _, pair in pairs.iterrows():
        if not overlapped(pair) or protocol(pair).collectives_in_compute:
            continue
        exponent = exponents.get(pair["device_type"], {}).get(pair["backend"], 1.0)
        expected = compute_parts(pair, exponent)["backward"]
        share = (pair["backward_step"] - expected) / pair["under_compute_seconds"]
        found.setdefault(carrier(pair)[1], []).append(min(max(share, 0.0), 1.0))
    return {name: (float(np.median(v)), len(v)) for name, v in found.items()}


def rank_spreads(pairs: pd.DataFrame) -> dict[tuple[str, str], tuple[float, int]]:
    """Per device type and backend: the spread of a rank's step that the measured wait for the
    slowest rank says (waiting / (compute x the expected largest of N standard normal draws)),
    the median over its N-device cells, and how many: what the ranks' steps spread by when N of
    its processes run at once, which a 1-device cell's own spread does not hold (on shared
    cores, far more). Never pooled over backends: their ranks wait as their frameworks run."""
    found: dict = {}
    for _, pair in pairs.iterrows():
        compute = sum(pair[f"{p}_step"] for p in COMPUTE_PARTS)
        largest = expected_largest(int(pair["devices"]))
        waiting = pair.get("waiting_step")
        if compute > 0 and largest > 0 and waiting is not None and np.isfinite(waiting):
            found.setdefault((pair["device_type"], pair["backend"]), []).append(
                waiting / (compute * largest))
    return {key: (float(np.median(v)), len(v)) for key, v in found.items()}


def calibrate(pairs: pd.DataFrame) -> Calibration:
    """Each calibrated factor over `pairs` (cells with their 1-device cells): the cores'
    exponent, each carrier's share lost beside its collectives and the ranks' spread, medians;
    each carrier's Wire per link class, fitted."""
    points, families = {}, {}
    for _, pair in pairs.iterrows():
        if (found := calibration_point(pair)) is not None:
            family, name = carrier(pair)
            points.setdefault((name, link_class(pair), found[0]), []).append(found[1])
            families[name] = family
    exponents = core_exponents(pairs)
    return Calibration(
        exponents, {key: fit_wire(found, key[2]) for key, found in points.items()}, families,
        len(pairs), sharing_shares(pairs, exponents), rank_spreads(pairs))


def wire_of(calibration: Calibration, pair, kind: str) -> Wire | None:
    """The Wire of the cell's carrier on links of `kind`, else the median of the other carriers'
    of its family there (libraries between processes, or copies within one): on collectives
    after backward where any were, else on moving times; None where nothing was calibrated."""
    family, name = carrier(pair)
    for basis in (ALONE, MOVING):
        if (name, kind, basis) in calibration.wire:
            return calibration.wire[(name, kind, basis)]
        others = [wire for (other, of_kind, of_basis), wire in calibration.wire.items()
                  if (of_kind, of_basis) == (kind, basis)
                  and calibration.family.get(other) == family]
        if others:
            return Wire(float(np.median([w.latency for w in others])),
                        float(np.median([w.efficiency for w in others])),
                        sum(w.cells for w in others), basis)
    return None
