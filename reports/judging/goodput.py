"""Time to a target accuracy and goodput: what more devices and larger batches buy once the
accuracy they reach is counted (the runs of cells with a target accuracy, common.measuring.target).

A configuration is a cell key without its seed: its runs are its seeds (and repeats). Time to the
target is noisy by nature, so each configuration's time is given as MLPerf Training gives it:
the mean of its runs without the fastest and the slowest (the trimmed mean), beside the median
with its distribution-free interval (order statistics; with 5 runs the widest such interval,
[fastest, slowest], covers the median with 93.8%, which is said). A run that never reached the
target counts as slower than every run that did: the median and the trimmed mean exist while
few enough runs failed to converge, and are "not reached" otherwise.
"""
import math

import numpy as np
import pandas as pd
from scipy import stats

from xbench.common.grids.columns import draws
from xbench.reports.numbers import analysis
from xbench.reports.numbers.stats import LEVEL, false_discoveries_controlled, summarize

# A configuration (reports.numbers.analysis.configuration) and the environment: its runs are its
# seeds.
IDENTITY = ["env", "configuration"]
TIME_TEXT = (
    "A cell with a target accuracy trains until its test accuracy, evaluated after every "
    "1/evals_per_epoch of an epoch's steps (the same steps in every backend), reaches the "
    "target (a target loss: until its test loss falls to it), or until its epochs are done "
    "(then it did not converge). Time to target: the "
    "epochs' wall clock from the first step to the end of the evaluation that reached it, "
    "evaluations included, as MLPerf Training counts it (xbench's own bookkeeping between "
    "epochs left out); training only: the evaluations taken out too. Each "
    "configuration's runs are its seeds: trimmed mean = MLPerf's mean without the fastest and "
    "the slowest run (3 runs or more); median with its distribution-free interval (order "
    "statistics, scipy; its coverage said where 95% cannot be had from so few runs). A run "
    "that did not converge counts as slower than any that did. Throughput: samples / mean "
    "epoch-2 time over all the runs, with its 95% interval. The shortest is ranked by the "
    "training time to the target, evaluations left out: rank 0 evaluates the whole test set "
    "at every device count, a fixed cost more devices cannot shrink, and counting it would "
    "charge them for it (the time with evaluations is in the table above). A configuration "
    "is surely the fastest to the target only where a two-sided Mann-Whitney test of its "
    "runs against every other configuration's is significant, each after the "
    "Benjamini-Hochberg adjustment at 5%; with 3 runs a side the smallest p such a test can "
    "give is 0.1, so that takes 4 seeds or more, and the report says so. "
    "Whether and after how many samples a run converged counts every ok run; its times only "
    "the runs no other load contended.")


def given_targets(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each row's target accuracy and target loss, 0 where it has none."""
    accuracy, loss = (pd.to_numeric(frame[f"target_{metric}"], errors="coerce").fillna(0)
                      for metric in ("accuracy", "loss"))
    return accuracy, loss


def target_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of runs given a target (an accuracy, or a loss)."""
    accuracy, loss = given_targets(frame)
    return frame[(accuracy > 0) | (loss > 0)]


def target_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One record per configuration with a target (an accuracy, or a loss) and environment: its
    runs (usable ones: ok and not contended unless asked), how many converged, the time,
    training time, samples and epochs to the target over them, and its throughput."""
    accuracy, loss = given_targets(frame)
    rows = target_rows(frame)
    if rows.empty:
        return pd.DataFrame(columns=TARGET_COLUMNS)
    rows = rows.assign(configuration=analysis.configuration(rows))
    records = []
    for _, group in rows.groupby(IDENTITY, sort=False):
        # whether and after how many samples a run reached the target does not depend on what
        # else ran: every ok run counts there; its times only where the run was not contended
        ran, usable = group[group["status"] == "ok"], group[group["usable"]]
        first = (usable if len(usable) else group).iloc[0]
        reached = [t or {} for t in ran["time_to_target"]]
        timed = [t or {} for t in usable["time_to_target"]]
        record = {column: first.get(column) for column in (*analysis.CONFIG, "device_type")}
        record.update(
            configuration=first["configuration"], training=first["training"],
            metric="loss" if loss[first.name] > 0 else "accuracy",
            target=float(loss[first.name] or accuracy[first.name]),
            seeds=sorted({int(s) for s in ran["seed"]}), runs=len(ran),
            not_ok=len(group) - len(ran), timed_runs=len(usable),
            converged=sum(bool(t.get("converged")) for t in reached),
            curves=[t.get("curve") or [] for t in timed])  # its seconds: usable runs' only
        for field in ("seconds", "training_seconds", "samples", "epochs"):
            runs = timed if field.endswith("seconds") else reached
            values = [t[field] if t.get("converged") else math.inf for t in runs]
            record[field] = time_statistics(values)
            if field == "training_seconds":
                record["training_seconds_values"] = values
        epoch2 = summarize(usable["epoch2_seconds"])
        samples = first["epoch2_samples"]
        record.update(rate=samples / epoch2["mean"] if epoch2["n"] else math.nan,
                      rate_low=samples / (epoch2["mean"] + epoch2["ci"]),
                      rate_high=samples / (epoch2["mean"] - epoch2["ci"])
                      if epoch2["ci"] < epoch2["mean"] else math.inf)
        records.append(record)
    table = pd.DataFrame(records, columns=TARGET_COLUMNS)
    table["_order"] = table["backend"].map(analysis.backend_order)
    return (table.sort_values(["env", "_order", "training", "metric", "target", *analysis.AXES,
                               "devices"])
            .drop(columns="_order").reset_index(drop=True))


TARGET_COLUMNS = [*analysis.CONFIG, "device_type", "configuration", "training", "metric", "target",
                  "seeds", "runs", "not_ok", "timed_runs", "converged", "curves", "seconds",
                  "training_seconds", "training_seconds_values", "samples", "epochs", "rate",
                  "rate_low", "rate_high"]


def target_text(record) -> str:
    """'accuracy 0.98', or 'loss 1.8 nats' (a target loss: at or below it)."""
    if record["metric"] == "loss":
        return f"loss {record['target']:g} nats"
    return f"accuracy {record['target']:g}"


def time_statistics(values) -> dict:
    """Of one configuration's runs (math.inf: did not converge): n, the median with its
    distribution-free interval and that interval's coverage, and MLPerf's trimmed mean."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return {"n": 0, "median": math.nan, "low": math.nan, "high": math.nan,
                "coverage": math.nan, "trimmed_mean": math.nan}
    median = float(x[(n - 1) // 2]) if n % 2 else float((x[n // 2 - 1] + x[n // 2]) / 2)
    low = high = coverage = math.nan
    if n >= 3:
        # [x(j), x(n+1-j)] covers the median with 1 - 2 P(Binomial(n, 1/2) < j): the
        # narrowest with LEVEL, or the widest there is
        j = max((j for j in range(1, n // 2 + 1) if _coverage(n, j) >= LEVEL), default=1)
        low, high, coverage = float(x[j - 1]), float(x[n - j]), _coverage(n, j)
    trimmed = float(x[1:-1].mean()) if n >= 3 else math.nan
    return {"n": n, "median": median, "low": low, "high": high, "coverage": coverage,
            "trimmed_mean": trimmed}


def _coverage(n: int, j: int) -> float:
    return float(1 - 2 * stats.binom.cdf(j - 1, n, 0.5))


def goodput(targets: pd.DataFrame) -> pd.DataFrame:
    """Per backend (and environment, training, target): the configuration with the shortest
    median training time to the target (evaluations left out: TIME_TEXT says why) beside the
    one with the highest throughput, and whether the shortest is surely shorter than every
    other (`settled`)."""
    records = []
    if targets.empty:
        return pd.DataFrame(records)
    # per backend, its configurations: each batch and device count
    keys = ["series", "metric", "target", *[c for c in analysis.SETUP
                                  if c not in ("backend", analysis.BATCH, *draws())]]
    for _, group in targets.groupby(keys, sort=False, dropna=False):
        timed = group[[math.isfinite(s["median"]) for s in group["training_seconds"]]]
        fastest = group.loc[group["rate"].idxmax()] if group["rate"].notna().any() else None
        shortest = timed.loc[timed["training_seconds"].map(lambda s: s["median"]).idxmin()] \
            if len(timed) else None
        records.append({**{k: group.iloc[0][k] for k in keys}, "configurations": len(group),
                        "shortest": shortest, "fastest": fastest,
                        "settled": settled(shortest, group) if shortest is not None else None})
    return pd.DataFrame(records)


def settled(best, group) -> str:
    """Whether `best` (the lowest median) is surely shorter to the target than every other
    configuration of `group`: a two-sided Mann-Whitney test of its runs against each other's
    (distribution-free; a run that did not converge is simply the slowest), each significant
    after the Benjamini-Hochberg adjustment over the comparisons at 5%."""
    others = group[group["configuration"] != best["configuration"]]
    if others.empty:
        return "the only configuration"
    mine = best["training_seconds_values"]
    fewest = min((len(o["training_seconds_values"]) for _, o in others.iterrows()
                  if len(o["training_seconds_values"])), default=0)
    if fewest and mine and smallest_p(len(mine), fewest) > 1 - LEVEL:
        return (f"no verdict possible: with {len(mine)} and {fewest} runs the smallest two-sided "
                f"Mann-Whitney p is {smallest_p(len(mine), fewest):.2g}, above 5%; it takes 4 "
                f"or more seeds a configuration")
    p_values = [stats.mannwhitneyu(mine, o["training_seconds_values"],
                                   alternative="two-sided").pvalue
                if len(mine) and len(o["training_seconds_values"]) else math.nan
                for _, o in others.iterrows()]
    stated = false_discoveries_controlled(p_values)
    unsure = [f"{setup_text(o)} (p = {p:.2g})" for (_, o), p, sure
              in zip(others.iterrows(), p_values, stated, strict=True) if not sure]
    if unsure:
        return "inconclusive: not surely shorter than " + ", ".join(unsure)
    return f"yes: shorter than every other (Mann-Whitney, p ≤ {max(p_values):.2g})"


def smallest_p(n: int, m: int) -> float:
    """The smallest two-sided Mann-Whitney p two samples of n and m runs can give (every run
    of one below every run of the other): 2 / C(n + m, n), 0.1 with 3 a side."""
    return min(1.0, 2 / math.comb(n + m, n))


def setup_text(c) -> str:
    """'batch 512 on 2 devices'."""
    return f"{analysis.batch_kind(c['batch_mode'])} batch {c['batch']} on " \
           f"{analysis.devices_text(c['devices'])}"


def time_text(summary: dict, unit: str = " s", digits: int = 1, spread: bool = True) -> str:
    """'12.3 s [10.1, 15.2]' (`spread`: with the interval, its coverage said where it is less
    than 95%); 'not reached' where too few runs converged."""
    def shown(value):
        return "not reached" if math.isinf(value) else f"{value:,.{digits}f}"
    if math.isnan(summary["median"]):
        return "—"
    if math.isinf(summary["median"]):
        return "not reached"
    text = shown(summary["median"]) + unit
    if spread and not math.isnan(summary["low"]):
        text += f" [{shown(summary['low'])}, {shown(summary['high'])}]"
        if summary["coverage"] < LEVEL - 1e-9:
            text += f" (a {summary['coverage']:.1%} interval)"
    return text


def trimmed_text(summary: dict, digits: int = 1) -> str:
    value = summary["trimmed_mean"]
    if math.isnan(value):
        return "— (fewer than 3 runs)"
    return "not reached" if math.isinf(value) else f"{value:,.{digits}f} s"


def rate_text(c) -> str:
    if math.isnan(c["rate"]):
        return "—"
    if c["runs"] < 2 or math.isnan(c["rate_low"]):
        return f"{c['rate']:,.0f}"
    high = "∞" if math.isinf(c["rate_high"]) else f"{c['rate_high']:,.0f}"
    return f"{c['rate']:,.0f} [{c['rate_low']:,.0f}, {high}]"


def converged_text(c) -> str:
    text = f"{c['converged']} of {c['runs']}"
    if c["not_ok"]:
        text += f" ({c['not_ok']} more not ok)"
    if c["timed_runs"] < c["runs"]:
        text += f"; times from {c['timed_runs']} (the others contended)"
    return text


TARGET_TABLE = [
    ("env", lambda c: c["env"]), ("backend", lambda c: c["series"]),
    ("model", lambda c: c["model"]), ("training", lambda c: c["training"]),
    ("target", lambda c: target_text(c)),
    ("batch", lambda c: f"{analysis.batch_kind(c['batch_mode'])} {c['batch']}"),
    ("devices", lambda c: c["devices"]),
    ("throughput (samples/s), 95% CI", rate_text),
    ("samples to target, median", lambda c: time_text(c["samples"], "", 0, spread=False)),
    ("epochs to target, median", lambda c: time_text(c["epochs"], "", 2, spread=False)),
    ("time to target, median [interval]", lambda c: time_text(c["seconds"])),
    ("trimmed mean (MLPerf)", lambda c: trimmed_text(c["seconds"])),
    ("training only, median", lambda c: time_text(c["training_seconds"], spread=False)),
    ("converged", converged_text),
]


def target_text_table(targets: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([[get(c) for _, get in TARGET_TABLE] for _, c in targets.iterrows()],
                        columns=[heading for heading, _ in TARGET_TABLE])


def goodput_table(targets: pd.DataFrame) -> pd.DataFrame:
    """Per backend: the shortest time to target beside the highest throughput."""
    lines = []
    for _, g in goodput(targets).iterrows():
        best, fastest = g["shortest"], g["fastest"]
        lines.append({
            "env": g["env"], "backend": g["series"], "training": g["training"],
            "target": target_text(g),
            "shortest training time to target": (
                f"{setup_text(best)}: {time_text(best['training_seconds'])}"
                if best is not None else "no configuration reached it"),
            "surely the shortest?": g["settled"] or "—",
            "highest throughput": (f"{setup_text(fastest)}: {rate_text(fastest)} samples/s"
                                   if fastest is not None else "—"),
            "the same?": ("—" if best is None or fastest is None else "the same configuration"
                          if best["configuration"] == fastest["configuration"] else "different"),
        })
    return pd.DataFrame(lines)


def goodput_lines(targets: pd.DataFrame) -> list[str]:
    """The summary's lines: per backend, the shortest time to target and the highest
    throughput."""
    lines = []
    for _, g in goodput(targets).iterrows():
        best, fastest = g["shortest"], g["fastest"]
        where = f"{g['series']} ({g['training']}), to {target_text(g)}"
        if best is None:
            lines.append(f"{where}: no configuration reached the target")
            continue
        lines.append(f"{where}: shortest at {setup_text(best)}, "
                     f"{time_text(best['training_seconds'])} training ({g['settled']}); "
                     f"highest throughput at {setup_text(fastest)}")
    return lines


def remedies_table(targets: pd.DataFrame) -> pd.DataFrame:
    """The lab's question 4 measured to a target: per backend, devices and batch, the time to
    target under each training (the remedies: lr scaling, warm-up) side by side."""
    if targets.empty:
        return pd.DataFrame()
    frame = targets.assign(cell=[f"{time_text(c['seconds'])}, {c['converged']} of {c['runs']} "
                                 f"converged" for _, c in targets.iterrows()],
                           batch_text=[f"{analysis.batch_kind(m)} {b}" for m, b in
                                       zip(targets["batch_mode"], targets["batch"], strict=True)])
    wide = frame.pivot_table(index=["series", "target", "devices", "batch_text"],
                             columns="training", values="cell", aggfunc="first")
    wide = wide.reset_index().rename(columns={"series": "backend", "batch_text": "batch"})
    wide.columns.name = None
    return wide.fillna("—").astype(str)
