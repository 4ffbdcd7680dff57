"""What a cell's collectives cost its step, from its runs' numbers on one basis
(common.measuring.basis): exposed communication, waiting for the slowest rank and for a core,
the collectives' time alone and of it the time under compute, the hidden share and the overlap
share, each the mean over the cell's runs; the bytes a step reduced, and the bus bandwidth of
the collectives' time alone (never of a moving time beside backward). A run whose row breaks an
invariant guarding a number (common.results.invariants.GUARDS) gives none of it; where no run
can give a number, `why_missing` says what could not be measured."""
import math

import numpy as np

from xbench.common.measuring.alone import SOURCES
from xbench.common.measuring.peaks import bus_bandwidth
from xbench.common.results.invariants import GUARDS
from xbench.reports.numbers.stats import summarize

COLUMNS = ["bytes", "bytes_how", "moving_seconds", "moving_ci", "algbw", "busbw", "busbw_ci",
           "busbw_from", "overlap_share", "timeline", "after_bytes", "after_seconds",
           "after_messages", "basis_steps", "exposed_basis_seconds", "waiting_basis_seconds",
           "busy_basis_seconds", "alone_seconds", "alone_source", "under_compute_seconds",
           "hidden_share", "core_wait_seconds", "all_after_backward", "broken", "why_missing"]
NOT_REPLAYED = ("their time alone was not measured: not every one ran after backward, and this "
                "backend's collectives cannot be replayed alone (they cross inside its compiled "
                "step, or are gathers and reductions of parameters' shards, which the replay's "
                "reduction of whole buffers is not)")


def guarded(runs: list[dict], number: str) -> list[dict]:
    """The runs whose rows break no invariant that guards `number` (GUARDS' values)."""
    return [run for run in runs if not any(GUARDS[name] == number for name in run["broken"])]


def communication_columns(cell, runs: list[dict], wire_size: float,
                          all_reducing: bool, centre: str = "mean") -> dict:
    """The cell's columns of COLUMNS from its attributed `runs` (reports.numbers.repeats);
    `wire_size`: its gradients' bytes a step as the model gives them (where no library counted
    them); `all_reducing`: whether its protocol is an all-reduce (bus bandwidth is one's);
    `centre`: the runs' "mean" or "median" of each number."""
    moving = summarize([r["moving"] for r in runs])
    if centre == "median":
        moving["mean"] = float(np.median([r["moving"] for r in runs]))
    counted = [r["bytes"] for r in guarded(runs, "bandwidth") if r["bytes"]]
    found = {column: math.nan for column in COLUMNS}
    found.update(bytes=counted[0] if counted else wire_size,
                 bytes_how="counted" if counted else "computed from the model",
                 moving_seconds=moving["mean"], moving_ci=moving["ci"], busbw_from=None,
                 timeline=next((t for r in runs for t in r.get("timelines") or [] if t), None),
                 broken=tuple(sorted({name for r in runs for name in r["broken"]})),
                 why_missing=None, alone_source=None, all_after_backward=False)
    found.update(after_backward(runs, found["bytes"]))
    basis = [r["communication"] for r in guarded(runs, "why") if r["communication"]]
    if cell["devices"] < 2 or not basis:
        found["why_missing"] = why_missing(runs, basis)
        return found
    found.update(on_basis(basis, np.median if centre == "median" else np.mean))
    rates = [r["communication"].alone and found["bytes"] / r["communication"].alone
             for r in guarded(runs, "bandwidth") if r["communication"]]
    if all_reducing and rates and all(rates):
        busbw = summarize([bus_bandwidth(rate, cell["devices"]) for rate in rates])
        found.update(algbw=summarize(rates)["mean"], busbw=busbw["mean"], busbw_ci=busbw["ci"],
                     busbw_from=f"the collectives alone ({found['alone_source']})")
    return found


def on_basis(basis: list, centre=np.mean) -> dict:
    """The means (or another `centre`) over runs of the why's numbers
    (common.measuring.basis.Communication)."""
    def mean(values):
        kept = [v for v in values if v is not None]
        return float(centre(kept)) if kept and len(kept) == len(values) else math.nan
    alone = [c.alone for c in basis]
    shares = [c.overlap_share for c in basis if c.overlap_share is not None]
    return {"basis_steps": min(c.basis_steps for c in basis),
            "exposed_basis_seconds": mean([c.exposed for c in basis]),
            "waiting_basis_seconds": mean([c.waiting for c in basis]),
            "busy_basis_seconds": mean([c.busy for c in basis]),
            "overlap_share": float(np.mean(shares)) if shares else math.nan,
            "alone_seconds": mean(alone), "under_compute_seconds": mean(
                [c.under_compute for c in basis]),
            "hidden_share": mean([c.hidden_share for c in basis]),
            "core_wait_seconds": mean([c.core_wait for c in basis]),
            "alone_source": basis[0].alone_source,
            "all_after_backward": all(c.after_backward for c in basis),
            "why_missing": None if None not in alone else NOT_REPLAYED}


def why_missing(runs: list[dict], basis: list) -> str | None:
    """What could not be measured of the why where no run gives its numbers (None: one
    device, nothing crossed)."""
    broken = sorted({name for r in runs for name in r["broken"] if GUARDS[name] == "why"})
    if broken:
        return ("not drawn: its runs break " + "; ".join(f"'{name}'" for name in broken)
                + " (their numbers are kept in the rows)")
    if any(r["bytes"] for r in runs) and not basis:
        return "not measured on one basis: a row from before schema 18"
    return None


def after_backward(runs: list[dict], size: float) -> dict:
    """The collectives launched once backward was over (a timeline's `after_backward`): bytes
    and moving seconds a step and their count, the medians over ranks and runs (what predict
    calibrates a link's rate on); NaN where none ran then."""
    after = [found for r in runs for t in r.get("timelines") or [] if t
             and (found := after_of(t, size))]
    if not after:
        return {}
    return {"after_bytes": float(np.median([b for b, _, _ in after])),
            "after_seconds": float(np.median([s for _, s, _ in after])),
            "after_messages": float(np.median([n for _, _, n in after]))}


def after_of(timeline: dict, size: float) -> tuple[float, float, int] | None:
    """(bytes, moving seconds, count) of a rank's collectives launched after backward (a
    timeline's `after_backward`; bytes the step's `size` where the library did not tell them
    and every collective ran then), None where there are none or their bytes are unknown."""
    after = timeline["after_backward"]
    if not after or after["seconds"] <= 0:
        return None
    size = after["bytes"] if after["bytes"] is not None else (size if after.get("all") else None)
    count = sum(c["launch"] >= timeline["backward_seconds"] for c in timeline["collectives"])
    return (float(size), after["seconds"], count) if size else None


def alone_words(source: str | None) -> str:
    return SOURCES.get(source, "not measured")
