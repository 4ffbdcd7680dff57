"""The verdicts at the top of the report: for each model, data and batch, which backend is fastest
at each device count and whether adding devices pays off, each stated only where its 95% interval
says so, otherwise "inconclusive" with the repeats that would settle it; whether more devices
changed accuracy; and warnings for what the verdicts leave out.
"""
import math

from xbench.common.attribution import COMPUTE
from xbench.reports import analysis
from xbench.reports.stats import ratio_of_means, repeats_to_settle

MIN_REPEATS = 3


def family_title(cells):
    first = cells.iloc[0]
    return (f"{first['model']} ×{first['dataset_multiple']} {first['dataset']}, "
            f"{analysis.batch_kind(first['batch_mode'])} batch {first['batch']} "
            f"({analysis.scaling_kind(first['batch_mode'])} scaling), {first['device_type']}"
            + (f" [env {first['env']}]" if first.get("env") not in (None, "A") else ""))


def interval_text(ratio, unit="×"):
    if not ratio.has_interval:
        return f"{ratio.value:.2f}{unit}"
    return f"{ratio.value:.2f}{unit} [{ratio.low:.2f}, {ratio.high:.2f}]"


def undecided(a_seconds, b_seconds, threshold=1.0):
    """Why a comparison cannot be stated yet, and what would settle it."""
    if min(len(a_seconds), len(b_seconds)) < 2:
        return "inconclusive: one run on a side has no interval (run --repeat 3)"
    needed = repeats_to_settle(a_seconds, b_seconds, threshold)
    return ("inconclusive: " + (f"about {needed} repeats each would settle it" if needed else
                                "within the noise of these runs; more repeats are unlikely to "
                                "settle it"))


def fastest(cells, devices):
    """A line on the fastest backend at `devices`, against the runner-up."""
    here = cells[cells["devices"] == devices].sort_values("epoch2_rate", ascending=False)
    if here.empty:
        return None
    best = here.iloc[0]
    head = f"{analysis.devices_text(devices)}: "
    if len(here) == 1:
        return head + f"only {best['series']} ran ({best['epoch2_rate']:,.0f} samples/s)"
    second = here.iloc[1]
    ratio = ratio_of_means(second["epoch2_seconds_values"], best["epoch2_seconds_values"])
    versus = (f"{best['series']} {best['epoch2_rate']:,.0f} samples/s vs {second['series']} "
              f"{second['epoch2_rate']:,.0f}: {interval_text(ratio)}")
    if ratio.above(1):
        return head + f"{best['series']} is fastest ({versus})"
    return head + f"{versus}; " + undecided(second["epoch2_seconds_values"],
                                            best["epoch2_seconds_values"])


def pays_off(scaled, attributed, limits):
    """A line per backend and device count on its speedup over its own 1-device run, and where
    it is below 1, why (from the N-device cell's step attribution)."""
    lines = []
    for _, row in scaled[scaled["devices"] > 1].iterrows():
        ratio, efficiency = row["speedup_ratio"], row["efficiency_ratio"]
        head = (f"{row['series']} on {analysis.devices_text(row['devices'])}: speedup "
                f"{interval_text(ratio)}, efficiency ")
        head += (f"SUSPECT ({efficiency.value:.0%}, above 100%: the 1-device baseline or the "
                 f"machine was disturbed)" if row["suspect"] else f"{efficiency.value:.0%}")
        if row["suspect"]:
            lines.append(f"{head}: not taken as a result")
        elif ratio.above(1):
            lines.append(f"{head}: pays off")
        elif ratio.below(1):
            lines.append(f"{head}: does not pay off (slower than 1 device)")
        else:
            lines.append(f"{head}; " + undecided(row["epoch2_seconds_values_ref"],
                                                 row["epoch2_seconds_values"]))
        reason = why(row, attributed, limits) if ratio.value < 1 else None
        if reason:
            lines.append(f"  why: {reason}")
    return lines


PART_WORDS = {"communication": "waiting for the collective after every rank's compute is done "
                               "(exposed communication)",
              "waiting": "waiting for the slowest rank", "input": "waiting for input",
              "host": "on host overhead"}


def why(cell, attributed, limits):
    """One line on what an N-device cell's step spends beyond compute, how its compute compares
    with the same backend's 1-device compute, and its bandwidth against the probe's (None where
    its rows do not attribute their steps)."""
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
    parts = [f"{mine[f'{part}_share']:.0%} {PART_WORDS[part]}" for part in PART_WORDS
             if mine[f"{part}_share"] >= 0.05]
    text = ("the step spends " + ", ".join(parts) if parts
            else "the step is nearly all compute")
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


def more_devices(cells, attributed, limits):
    """The decision itself: the fastest N-device cell against the fastest 1-device cell,
    whatever their backends (and why, where the N devices are slower)."""
    ones = cells[cells["devices"] == 1]
    if ones.empty:
        return []
    one = ones.loc[ones["epoch2_rate"].idxmax()]
    lines = []
    for devices in sorted(d for d in cells["devices"].unique() if d > 1):
        here = cells[cells["devices"] == devices]
        best = here.loc[here["epoch2_rate"].idxmax()]
        ratio = ratio_of_means(one["epoch2_seconds_values"], best["epoch2_seconds_values"])
        ratio = ratio.scaled(best["epoch2_samples"] / one["epoch2_samples"])
        head = (f"{analysis.devices_text(devices)} at best ({best['series']}) vs 1 device at "
                f"best ({one['series']}): {interval_text(ratio)}")
        lines.append(decided(head, ratio, f"{devices} devices pay off here",
                             f"{devices} devices do not pay off here (slower than 1)",
                             one["epoch2_seconds_values"], best["epoch2_seconds_values"]))
        reason = why(best, attributed, limits) if ratio.value < 1 else None
        if reason:
            lines.append(f"  why ({best['series']}): {reason}")
    return lines


def decided(head, ratio, above, below, reference_seconds, seconds):
    """'head: above' or 'head: below' where the ratio's interval excludes 1, else 'head;' and how
    many repeats would settle it."""
    if ratio.above(1):
        return f"{head}: {above}"
    if ratio.below(1):
        return f"{head}: {below}"
    return f"{head}; " + undecided(reference_seconds, seconds)


def wrapper_lines(wrapper):
    lines = []
    for _, row in wrapper.iterrows():
        ratio = row["ratio"]
        head = (f"{row['series']} at 1 device: {interval_text(ratio)} the rate of "
                f"{row['reference']} (no parallel wrapper)")
        lines.append(decided(head, ratio, "faster than no wrapper",
                             "its machinery costs time at 1 device",
                             row["epoch2_seconds_values_ref"], row["epoch2_seconds_values"]))
    return lines


def accuracy_lines(changes):
    differences = [row["difference"][0] for _, row in changes.iterrows()
                   if not math.isnan(row["difference"][0])]
    if differences and max(abs(d) for d in differences) < 5e-5:
        return ["test accuracy: the same on every device count, in every backend "
                f"({changes.iloc[0]['test_accuracy_ref']:.4f}; one seed)"]
    lines = []
    for _, row in changes.iterrows():
        d, low, high = row["difference"]
        if math.isnan(d):
            continue
        points = f"{d * 100:+.2f} points"
        if math.isnan(low):
            judged = "one run each, one seed: no interval"
        elif low == high:
            judged = "identical repeats (one seed): exact for this seed, seed-to-seed spread unmeasured"
        elif low > 0 or high < 0:
            judged = f"[{low * 100:+.2f}, {high * 100:+.2f}]: a real change"
        else:
            judged = f"[{low * 100:+.2f}, {high * 100:+.2f}]: no detectable change"
        lines.append(f"{row['series']} on {analysis.devices_text(row['devices'])} vs 1: test "
                     f"accuracy {row['test_accuracy']:.4f} vs {row['test_accuracy_ref']:.4f}, "
                     f"{points} ({judged})")
    return lines


def verdicts(cells, frame, include_contended=False, attributed=None, limits=None):
    """The verdict lines: per family a heading and indented findings, then warnings. Cells with
    an injected fault are left out (they show where a fault lands, not what to choose)."""
    attributed = analysis.attribution(cells) if attributed is None else attributed
    limits = analysis.against_limits(cells, attributed, {}) if limits is None else limits
    scaled, changes = analysis.scaling(cells), analysis.accuracy_change(cells)
    wrapper = analysis.wrapper_cost(cells)
    lines = []
    for _, family in analysis.families(cells):
        lines.append(f"{family_title(family)}:")
        keys = set(family["cell_key"])
        for devices in sorted(family["devices"].unique()):
            lines.append("  fastest on " + fastest(family, devices))
        lines += ["  " + line for line in more_devices(family, attributed, limits)]
        lines += ["  " + line for line in pays_off(scaled[scaled["cell_key"].isin(keys)],
                                                   attributed, limits)]
        lines += ["  " + line for line in wrapper_lines(wrapper[wrapper["cell_key"].isin(keys)])]
        lines += ["  " + line for line in accuracy_lines(changes[changes["cell_key"].isin(keys)])]
    if not lines:
        lines.append("No verdict: no cell has a usable run.")
    return lines + warnings(cells, frame, include_contended)


def warnings(cells, frame, include_contended):
    lines = []
    contended = frame[frame["status"].eq("ok") & frame["contended"]]
    if len(contended):
        lines.append(f"WARNING: {len(contended)} run(s) were contended (other processes used "
                     f"more than their cell's limit of the cores while it was timed): "
                     + ("included at your request (--include-contended)" if include_contended
                        else "left out of every number and verdict above"))
    measured = analysis.measured(cells)
    few = measured[measured["n"] < MIN_REPEATS]
    if len(few):
        lines.append(f"WARNING: {len(few)} of {len(measured)} cells have fewer than "
                     f"{MIN_REPEATS} usable repeats: their comparisons stay inconclusive or rest "
                     f"on little; run the grid with --repeat {MIN_REPEATS} or more")
    return lines
