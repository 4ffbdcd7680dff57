"""Published scaling results put through the model of reports.predict: `xbench predict
--published [FILE]` (default reports/published.toml). A check, never a fit: each record gives the
inputs the model needs (the per-device rate at the per-device batch, the parameters and the bytes
of each one's gradient, the devices per node and the nodes, the links, and the backend whose
collectives carried them), and the model's efficiency is printed three ways beside the published
one: none of the collectives hidden, all of them hidden behind backward, and as the step's
timeline predicts (reports.timeline: the gradients ready evenly over backward, in the backend's
messages, on one stream). No waiting for the slowest rank is added: none of the records
published their steps' spread; nothing measured on this machine enters.

Terms beyond the step model's own, each with a source other than the records, and named in each
record's `terms`: `achieved NAME`, a link's rate as NVIDIA's published nccl-tests bus bandwidth
(links.toml `achieved`) in place of the data sheet's, since a ring's pass sees the bus bandwidth;
`accumulation`, micro-batches per collective (the publication's table): the collective runs
once per `accumulation` forward-backward passes and hides behind the last one's backward only.
A record's `bucket_bytes` is the bucket its run set (DDP's bucket_cap_mb), where not the default.
"""
from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.grids.settings import SETTINGS
from xbench.reports.predict import LINKS_FILE, parse_link, read_links
from xbench.reports.step_model import Link, step_collectives

PUBLISHED_FILE = Path(__file__).with_name("published.toml")
RESHARD = SETTINGS["reshard"].default[0]  # a sharded backend's record: FSDP's default
BACKWARD_SHARE = 2 / 3  # of a step's compute, where nothing measured it: twice forward's work
NEEDED = ("title", "backend", "per_device_rate", "per_device_batch", "parameters", "devices",
          "nodes", "link", "efficiency", "sources")
POSITIVE = ("per_device_rate", "per_device_batch", "parameters", "devices", "nodes", "efficiency",
            "gradient_bytes_per_parameter", "baseline_devices", "accumulation",
            "baseline_accumulation", "bucket_bytes")
ERROR_GOAL_POINTS = 5.0  # the median absolute error of `predicted`, points of efficiency
BRACKET_GOAL = 0.8  # the share of records whose bounds bracket the published efficiency


def against_published(path: Path = PUBLISHED_FILE) -> pd.DataFrame:
    """Every record of the published file `path` through the model (`published_record`)."""
    try:
        entries = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UserError(f"--published {path}: cannot read it as TOML: {e}") from None
    links, achieved = read_links(), achieved_links()
    return pd.DataFrame([published_record(name, entry, links, achieved)
                         for name, entry in entries.items()])


def achieved_links(path: Path = LINKS_FILE) -> dict[str, Link]:
    """The named links with a published all-reduce bus bandwidth (links.toml `achieved`), at
    that rate: what NCCL reaches over the link, where the data sheet gives the line rate."""
    entries = tomllib.loads(path.read_text(encoding="utf-8"))
    return {name: Link(entry["title"], float(entry["achieved"]), float(entry["latency"]),
                       f"{entry['achieved_source']} (achieved, per {entry['per']})")
            for name, entry in entries.items() if "achieved" in entry}


def checked_entry(name: str, entry: object) -> dict:
    """The record, or one UserError naming it and what is wrong: a missing key, an unknown
    backend, a number that is not one above 0."""
    where = f"published record [{name}]"
    if not isinstance(entry, dict):
        raise UserError(f"{where}: not a table of keys")
    missing = [key for key in NEEDED if key not in entry]
    if missing:
        raise UserError(f"{where}: no {', '.join(missing)}")
    if entry["backend"] not in TRAITS:
        raise UserError(f"{where}: unknown backend {entry['backend']!r} "
                        f"(one of {', '.join(TRAITS)})")
    for key in POSITIVE:
        value = entry.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UserError(f"{where}: {key} = {value!r} is not a number above 0")
    return entry


def record_link(name: str, entry: dict, key: str, links: dict[str, Link],
                achieved: dict[str, Link]) -> tuple[Link, list[str]]:
    """The record's link under `key` (node_link defaults to link): its achieved rate where
    links.toml has one (and the term that says so), else as parse_link reads it."""
    text = str(entry.get(key, entry["link"]))
    if text in achieved:
        return achieved[text], [f"achieved {text}"]
    return parse_link(text, links, f"published record [{name}]: {key}"), []


def published_record(name: str, entry: dict, links: dict[str, Link],
                     achieved: dict[str, Link]) -> dict:
    """One record: a micro-batch's compute from its per-device rate, the collectives over its
    links once per `accumulation` micro-batches, and its efficiency against its baseline (one
    device, or `baseline_devices` on one node, at `baseline_accumulation`) with none of them
    hidden, all hidden behind the last micro-batch's backward (BACKWARD_SHARE of it), and as
    the step's timeline predicts them (reports.timeline)."""
    entry = checked_entry(name, entry)
    link, terms = record_link(name, entry, "link", links, achieved)
    node_link, node_terms = record_link(name, entry, "node_link", links, achieved)
    terms = list(dict.fromkeys(terms + node_terms))
    crossing = TRAITS[entry["backend"]].protocol_on("cuda")  # GPUs
    micro = entry["per_device_batch"] / entry["per_device_rate"]
    backward = BACKWARD_SHARE * micro
    size = entry.get("gradient_bytes_per_parameter", 4) * entry["parameters"]
    bucket = int(entry["bucket_bytes"]) if "bucket_bytes" in entry else None
    baseline = int(entry.get("baseline_devices", 1))
    accumulation = int(entry.get("accumulation", 1))
    baseline_accumulation = int(entry.get("baseline_accumulation", accumulation))
    if max(accumulation, baseline_accumulation) > 1:
        terms.append("accumulation")

    def collectives(devices: int, nodes: int) -> dict[str, float]:
        return step_collectives(None, crossing, size, backward, devices, nodes, link, node_link,
                                bucket, RESHARD)

    def efficiency(exposed: Callable[[dict], float]) -> float:  # per-sample time, base over N
        base, scaled = collectives(baseline, 1), collectives(entry["devices"], entry["nodes"])
        return ((baseline_accumulation * micro + exposed(base)) / baseline_accumulation
                / ((accumulation * micro + exposed(scaled)) / accumulation))
    scaled = collectives(entry["devices"], entry["nodes"])
    return {"name": name, "title": entry["title"], "sources": entry["sources"],
            "devices": entry["devices"] * entry["nodes"], "baseline": baseline,
            "compute": accumulation * micro, "moving": scaled["moving"],
            "published": entry["efficiency"], "terms": ", ".join(terms) or "none",
            "no_overlap": efficiency(lambda c: c["moving"]),
            "full_overlap": efficiency(lambda c: max(c["moving"] - backward, 0.0)),
            "hidden": scaled["hidden"], "predicted": efficiency(lambda c: c["exposed"])}


def as_json(record: pd.DataFrame) -> dict:
    """{record name: its efficiencies as fractions (NaN where there is none), the share of its
    collectives its timeline hides, the terms it used, title, devices}."""
    return {row["name"]: {key: row[key] for key in
                          ("published", "no_overlap", "full_overlap", "predicted", "hidden",
                           "terms")}
            | {"title": row["title"], "devices": int(row["devices"])}
            for _, row in record.iterrows()}


def published_summary(record: pd.DataFrame) -> dict:
    """The two goals of the check over `record` (against_published's rows), as a benchmark
    prints them: the median absolute error of `predicted` in points of efficiency (goal: at
    most ERROR_GOAL_POINTS over at least 30 records) and the share of records whose bounds,
    none hidden .. all hidden, bracket the published efficiency (goal: at least BRACKET_GOAL)."""
    errors = ((record["predicted"] - record["published"]).abs() * 100).tolist()
    inside = ((record["no_overlap"] <= record["published"])
              & (record["published"] <= record["full_overlap"]))
    below = record["published"] < record["no_overlap"]
    median = statistics.median(errors) if errors else math.nan
    return {"records": len(record),
            "publishers": int(record["name"].str.split("-").str[0].nunique()),
            "median_absolute_error_points": median,
            "error_goal_met": len(record) >= 30 and median <= ERROR_GOAL_POINTS,
            "bracketed": int(inside.sum()), "bracketed_share": float(inside.mean()),
            "bracket_goal_met": bool(inside.mean() >= BRACKET_GOAL),
            "below_no_overlap": int(below.sum())}
