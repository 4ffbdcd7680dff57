"""`xbench compare BASE NEW`: the same cells in two results files (before and after a change: a new
torch, a new driver), each cell's epoch-2 rate NEW / BASE with Fieller's 95% interval, marked
faster, slower or "inconclusive" at that confidence, and what differs between their environments.

Contended runs are compared too (a regression check wants every run), and marked: a slowdown
beside other load may be the machine's, not the change's (`--exclude-contended` leaves them out).
Cells with an injected fault are never compared: they are slow on purpose.
"""

import pandas as pd

from xbench.common.errors import UserError
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load
from xbench.reports.numbers.stats import ratio_of_means

ENVIRONMENT = ("host", "cpu_count", "python")
SHOWN = 3  # cells named of a side that shares none with the other


def compare(base_paths, new_paths, include_contended=True, refuse_unshared=False):
    """(cells, notes): one row per cell in both files, and the environments' differences (their
    contention limits among them). With `refuse_unshared`, files that share no cell at all are
    a UserError that says which cells each has: two unrelated files, not a comparison."""
    base_frame, base_problems = load(base_paths, include_contended=include_contended)
    new_frame, new_problems = load(new_paths, include_contended=include_contended)
    base, new = (analysis.cell_table(frame[frame["training"] == frame["training_without_fault"]])
                 if len(frame) else analysis.cell_table(frame) for frame in (base_frame, new_frame))
    if refuse_unshared and not set(base["cell_key"]) & set(new["cell_key"]):
        raise UserError(f"no cell is in both files, nothing to compare: "
                        f"{cells_text(base_paths, base, base_problems)}; "
                        f"{cells_text(new_paths, new, new_problems)}")
    keys = [*analysis.CONFIG, "cell_key", "epoch2_samples"]
    both = (base[base["n"] > 0][[*keys, "epoch2_rate", "epoch2_seconds_values", "n",
                                "contended_runs"]]
            .merge(new[new["n"] > 0][["cell_key", "epoch2_rate", "epoch2_seconds_values", "n",
                                      "contended_runs"]], on="cell_key", suffixes=("_base", "")))
    both["ratio"] = [ratio_of_means(old, now) for old, now in zip(
        both["epoch2_seconds_values_base"], both["epoch2_seconds_values"], strict=True)]
    both["verdict"] = [verdict(r) for r in both["ratio"]]
    both["contended"] = (both["contended_runs"] + both["contended_runs_base"]) > 0
    notes = [*base_problems, *new_problems, *environment_differences(base_frame, new_frame),
             *contention_limits_differ(base_paths, base_frame, new_paths, new_frame)]
    only = set(base["cell_key"]) ^ set(new["cell_key"])
    if only:
        notes.append(f"{len(only)} cell(s) are in only one of the files: not compared")
    return both, notes


def cells_text(paths, cells, problems) -> str:
    """What one side of a comparison holds, briefly: its first SHOWN cells' keys and how many
    more, or that it has none (and how many of its lines were not rows)."""
    name = ", ".join(map(str, paths))
    keys = list(dict.fromkeys(cells["cell_key"]))
    if not keys:
        return f"{name} has no cell" + (f" ({len(problems)} problem(s) reading it)"
                                        if problems else "")
    more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return f"{name} has {len(keys)} cell(s): {', '.join(keys[:SHOWN])}{more}"


def contention_limits_differ(base_paths, base_frame, new_paths, new_frame) -> list[str]:
    """One note where the two sides' rows were judged contended under different limits (each
    row's contention_limit, common.measuring.contention): a run one side calls quiet, the other
    might have called contended."""
    limits = [", ".join(f"{limit:.0%}" for limit in sorted(set(frame["contention_limit"].dropna())))
              for frame in (base_frame, new_frame)]
    if not all(limits) or limits[0] == limits[1]:
        return []
    return [f"contention limits differ: {', '.join(map(str, base_paths))} judged its runs "
            f"contended above {limits[0]} of a rank's cores, {', '.join(map(str, new_paths))} "
            f"above {limits[1]}: a run one calls quiet the other might call contended"]


def verdict(ratio):
    if not ratio.has_interval:
        return "no interval (n = 1 on a side)"
    if ratio.above(1):
        return "faster"
    if ratio.below(1):
        return "slower"
    return "inconclusive"  # the interval holds 1: the data cannot tell a change from none


def environment_differences(base_frame, new_frame):
    """'env: BASE -> NEW' for what the two files' rows were measured with (versions, host,
    CPUs, Python, devices, threads per device)."""
    def seen(frame, get):
        return ", ".join(sorted({str(get(r)) for _, r in frame.iterrows()})) or "—"
    lines = []
    packages = sorted({p for f in (base_frame, new_frame) for r in f["env_record"]
                       for p in (r.get("packages") or {})})
    for name in packages:
        old, now = (seen(f, lambda r, name=name: (r["env_record"].get("packages") or {}).get(name))
                    for f in (base_frame, new_frame))
        if old != now:
            lines.append(f"{name}: {old} -> {now}")
    for field in ENVIRONMENT:
        old, now = (seen(f, lambda r, field=field: r["env_record"].get(field))
                    for f in (base_frame, new_frame))
        if old != now:
            lines.append(f"{field}: {old} -> {now}")
    for field in ("device_name", "threads_per_device"):
        old, now = (seen(f[f["status"] == "ok"], lambda r, field=field: r[field])
                    for f in (base_frame, new_frame))
        if old != now:
            lines.append(f"{field}: {old} -> {now}")
    return ["environment differs: " + line for line in lines]


def slower_than(cells, percent):
    """Cells whose interval shows a slowdown larger than `percent`: NEW / BASE's upper bound
    below 1 - percent/100 (0.94 [0.90, 0.99] does not show a 5% slowdown; 0.90 [0.86, 0.93]
    does)."""
    return cells[[r.below(1 - percent / 100) for r in cells["ratio"]]]


def text_table(cells) -> pd.DataFrame:
    from xbench.reports.rendering.tables import ratio_text
    return pd.DataFrame([{
        "backend": c["series"], "model": c["model"],
        "batch": f"{analysis.batch_kind(c['batch_mode'])} {c['batch']}",
        "devices": c["devices"], "n (base / new)": f"{c['n_base']} / {c['n']}",
        "base rate": f"{c['epoch2_rate_base']:,.0f}", "new rate": f"{c['epoch2_rate']:,.0f}",
        "new / base, 95% CI": ratio_text(c["ratio"]), "verdict": c["verdict"]
        + (" (contended)" if c["contended"] else "")} for _, c in cells.iterrows()])


def as_json(cells, notes) -> dict:
    """The comparison as `xbench compare --json` prints it (NaN where a number is missing)."""
    return {"notes": notes, "cells": [{
        "cell_key": c["cell_key"], "backend": c["backend"], "model": c["model"],
        "devices": int(c["devices"]), "base_rate": c["epoch2_rate_base"],
        "new_rate": c["epoch2_rate"], "ratio": c["ratio"].value,
        "ratio_low": c["ratio"].low, "ratio_high": c["ratio"].high,
        "n_base": int(c["n_base"]), "n_new": int(c["n"]), "verdict": c["verdict"],
        "contended": bool(c["contended"])} for _, c in cells.iterrows()]}
