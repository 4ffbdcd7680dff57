"""Why an N-device cell's step takes what it takes: its parts beyond compute, what its
collectives cost on the steps that carry them (reports.numbers.communication), its compute
against the same backend's 1-device compute, and its bus bandwidth against the probe's; no
number of a run whose row breaks an invariant guarding it (common.results.invariants)."""
import math

import numpy as np

from xbench.common.measuring.attribution import COMPUTE
from xbench.common.results.invariants import GUARDS
from xbench.reports.numbers.communication import alone_words
from xbench.reports.step_model.step import split_apart

PART_WORDS = {"communication": "waiting for the collective after every rank's compute is done "
                               "(exposed communication)",
              "waiting": "waiting for the slowest rank", "input": "waiting for input",
              "host": "on host overhead"}


def hidden_words(cell) -> str:
    """What the cell's collectives cost its step, every number on the steps that carry them
    (reports.numbers.communication): '; on the 32 steps that carry collectives: of 29 ms of
    all-reduce a step alone (replayed ...), 2 ms ran under compute and 27 ms were exposed
    (hidden 7%; in flight while computing, HTA's overlap share: 45%); in flight 40 ms: 1 ms
    waiting for the slowest rank, 10 ms waiting for a core'; what could not be measured where a
    number cannot be had; '' where no collective was timed."""
    def ms(name):
        return f"{cell[name] * 1000:.3g} ms"
    if isinstance(cell["why_missing"], str):  # a merged frame holds NaN where it is None
        return f"; its collectives: {cell['why_missing']}"
    if not np.isfinite(cell["alone_seconds"]):
        return ""
    basis = f"; on the {cell['basis_steps']:.0f} steps that carry collectives: "
    if cell["all_after_backward"]:
        return (basis + f"every collective ran after backward, nothing hidden: "
                f"{ms('exposed_basis_seconds')} a step exposed, "
                f"{ms('waiting_basis_seconds')} waiting for the slowest rank")
    overlap = cell["overlap_share"]
    return (basis + f"of {ms('alone_seconds')} of {cell['reduction']} a step alone "
            f"({alone_words(cell['alone_source'])}), {ms('under_compute_seconds')} ran under "
            f"compute and {ms('exposed_basis_seconds')} were exposed (hidden "
            f"{cell['hidden_share']:.0%}"
            + (f"; in flight while computing, HTA's overlap share: {overlap:.0%}"
               if np.isfinite(overlap) else "")
            + f"); in flight {ms('busy_basis_seconds')}: {ms('waiting_basis_seconds')} waiting "
            f"for the slowest rank, {ms('core_wait_seconds')} waiting for a core")


def why(cell, attributed, limits):
    """What an N-device cell's step spends beyond compute, how its compute compares with the
    same backend's 1-device compute, and its bandwidth against the probe's (None where its rows
    do not attribute their steps)."""
    def same(frame, devices):
        return frame[(frame["env"] == cell["env"]) & (frame["backend"] == cell["backend"])
                     & (frame["training"] == cell["training"]) & (frame["model"] == cell["model"])
                     & (frame["dataset_multiple"] == cell["dataset_multiple"])
                     & (frame["batch_mode"] == cell["batch_mode"])
                     & (frame["batch"] == cell["batch"]) & (frame["devices"] == devices)]
    mine = same(attributed, cell["devices"]) if len(attributed) else attributed
    if mine.empty:
        return None
    mine = mine.iloc[0]
    if not split_apart(mine.to_frame().T).iloc[0]:  # one opaque call (an untraced JAX row)
        return (f"not known: {mine['untraced_share']:.0%} of the step is one call no mark or "
                f"trace splits (its compute and communication together)")
    unsplit = [name for name in mine["broken"] if GUARDS[name] == "step parts"]
    if unsplit:
        return ("not drawn: its runs break " + "; ".join(f"'{name}'" for name in unsplit)
                + " (their numbers are kept in the rows)")
    parts = [f"{mine[f'{part}_share']:.0%} {PART_WORDS[part]}" for part in PART_WORDS
             if mine[f"{part}_share"] >= 0.05]
    text = ("the step spends " + ", ".join(parts) if parts
            else "the step is nearly all compute")
    text += hidden_words(mine)
    one = same(attributed, 1)
    if len(one):
        compute = sum(mine[f"{part}_step"] for part in COMPUTE)
        alone = sum(one.iloc[0][f"{part}_step"] for part in COMPUTE)
        ideal = 1 / mine["devices"] if mine["batch_mode"] == "global" else 1.0
        text += (f"; each rank's compute takes {compute / alone:.2f}× the 1-device step's "
                 f"(ideal {ideal:.2f}×)")
    probed = limits[(limits["env"] == mine["env"]) & (limits["cell_key"] == mine["cell_key"])]
    if len(probed) and math.isfinite(probed["bandwidth_share"].iloc[0]):
        share = probed["bandwidth_share"].iloc[0]
        text += ("; its bus bandwidth is SUSPECT (above the probe's)" if share > 1 else
                 f"; the link reached {share:.0%} of the probe's bus bandwidth")
    return text
