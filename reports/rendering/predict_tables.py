"""The tables `xbench predict` prints, and the report's sections on predictions show: every
measured N-device cell beside its prediction, the published records, the what-if."""
import math

import pandas as pd

from xbench.reports.rendering.tables import batch_text, bounds, column, num, table


def check_table(check):
    """Every N-device cell the model predicted, beside what was measured
    (reports.step_model.predict)."""
    return table(check, [
        ("env", column("env")), ("backend", column("backend")), ("model", column("model")),
        ("batch", batch_text), ("training", column("training")),
        ("devices", lambda c: f"{c['devices_per_node']} × {c['nodes']} nodes" if c["nodes"] > 1
         else c["devices"]),
        ("link", lambda c: c["link"] + (f" ({c['inject']})" if c["inject"] not in (None, "none")
                                        else "")),
        ("predicted compute + exposed + waiting (ms/step)", lambda c: " + ".join(
            num(c[part] * 1000) for part in ("compute", "exposed", "waiting"))
            if math.isfinite(c["step"]) else "—"),
        ("predicted hidden", lambda c: "—" if math.isnan(c["hidden"]) else f"{c['hidden']:.0%}"),
        ("predicted epoch (s)", lambda c: num(c["epoch_seconds"])),
        ("measured epoch, median (s)", lambda c: num(c["measured_seconds"]) + (
            f" ({num(c['measured_low'])}–{num(c['measured_high'])} over {c['measured_runs']} runs)"
            if c["measured_runs"] > 1 else "")),
        ("error (over the runs)", error_text)])


def error_text(cell) -> str:
    """'+12% [+5%, +20%]': the predicted epoch over the measured median, and over the slowest
    and the fastest run where there were several."""
    if not math.isfinite(cell["error"]):
        return "—"
    if cell["measured_runs"] < 2:
        return f"{cell['error']:+.0%} (1 run)"
    return f"{cell['error']:+.0%} [{cell['error_low']:+.0%}, {cell['error_high']:+.0%}]"


def published_table(record):
    """Published scaling results beside the efficiency the model predicts from their inputs
    (reports.step_model.published), and the terms beyond the step model each record used."""
    share = lambda value: "—" if pd.isna(value) else f"{value:.0%}"  # noqa: E731
    return table(record, [
        ("published result", column("title")),
        ("devices", lambda r: f"{r['devices']}" + (f" (against {r['baseline']})"
                                                   if r["baseline"] > 1 else "")),
        ("compute (ms/step)", lambda r: num(r["compute"] * 1000)),
        ("collectives moving (ms/step)", lambda r: num(r["moving"] * 1000)),
        ("published efficiency", lambda r: share(r["published"])),
        ("none hidden", lambda r: share(r["no_overlap"])),
        ("predicted (its timeline)", lambda r: f"{share(r['predicted'])} (hides "
                                               f"{share(r['hidden'])})"),
        ("all hidden behind backward", lambda r: share(r["full_overlap"])),
        ("predicted − published", lambda r: f"{(r['predicted'] - r['published']) * 100:+.0f} pt"),
        ("terms", column("terms"))])


def what_if_table(scaled):
    """The predicted rate and efficiency of each backend's setup at every count
    (reports.step_model.predict), labelled predicted, with the held-out errors' interval, whose
    compute it is (measured, given or assumed: reports.step_model.target), the batch a device
    and the links that carry it; a count that cannot be predicted says why."""
    def predicted(show):
        return lambda c: show(c) if c["note"] == "predicted" else c["note"]
    return table(scaled, [
        ("env", column("env")), ("backend", column("backend")), ("model", column("model")),
        ("measured batch", batch_text),
        ("nodes × devices", lambda c: f"{c['nodes']} × {c['devices']}"),
        ("batch a device", lambda c: num(c["per_device_batch"])),
        ("compute", column("compute_from")),
        ("links: devices / nodes", lambda c: f"{c['link']} / {c['node_link']}"),
        ("bucket (MiB)", lambda c: (f"{c['bucket_mb']:g}" if c["bucket_mb"] else "library's")
         + (" (best)" if c["best_bucket"] else "")),
        ("predicted rate (samples/s)", predicted(
            lambda c: num(c["rate"]) + ("" if math.isnan(c["rate_low"]) else
                                        f" {bounds(c['rate_low'], c['rate_high'])}"))),
        ("predicted efficiency", predicted(lambda c: f"{c['efficiency']:.0%}" + (
            "" if math.isnan(c["efficiency_low"]) else
            f" [{c['efficiency_low']:.0%}, {c['efficiency_high']:.0%}]"))),
        ("predicted exposed + waiting (ms/step)", predicted(
            lambda c: f"{num(c['exposed'] * 1000)} + {num(c['waiting'] * 1000)}")),
        ("stops paying", lambda c: "not up to here" if pd.isna(c["stops_paying_at"])
         else f"from {int(c['stops_paying_at'])} devices")])


def scores_table(scores: dict):
    """Each predictor's errors over all published records and over the discriminating ones
    (reports.step_model.skill.published_scores): median and mean absolute error in points of
    efficiency, and of the step time."""
    groups = list(scores)
    rows = pd.DataFrame({"predictor": list(scores[groups[0]]["predictors"])})
    def errors(group, key, show):
        return lambda r: show(scores[group]["predictors"][r["predictor"]][key])
    points = lambda value: "—" if pd.isna(value) else f"{value:.2f} pt"  # noqa: E731
    step = lambda value: "—" if pd.isna(value) else f"{value:.1%}"  # noqa: E731
    return table(rows, [("predictor", column("predictor")), *[
        (f"{group} ({scores[group]['records']}): {heading}", errors(group, key, show))
        for group in groups for heading, key, show in (
            ("median", "median_points", points), ("mean", "mean_points", points),
            ("median step", "median_step", step), ("mean step", "mean_step", step))]])
