"""Published scaling results put through the model of reports.predict: `xbench predict
--published [FILE]` (default reports/published.toml). A check, never a fit: each record gives the
inputs the model needs (the per-device rate at the per-device batch, the parameters and the bytes
of each one's gradient, the devices per node and the nodes, the links, and the backend whose
collectives carried them), and the model's efficiency is printed three ways beside the published
one: none of the collectives hidden, all of them hidden behind backward, and as the step's
timeline predicts (reports.timeline). No waiting for the slowest rank is added: none of the
records published their steps' spread; nothing measured on this machine enters.
"""
from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.grids.settings import SETTINGS
from xbench.reports.predict import parse_link, read_links
from xbench.reports.step_model import step_collectives

PUBLISHED_FILE = Path(__file__).with_name("published.toml")
RESHARD = SETTINGS["reshard"].default[0]  # a sharded backend's record: FSDP's default
BACKWARD_SHARE = 2 / 3  # of a step's compute, where nothing measured it: twice forward's work
NEEDED = ("title", "backend", "per_device_rate", "per_device_batch", "parameters", "devices",
          "nodes", "link", "efficiency", "sources")


def against_published(path: Path = PUBLISHED_FILE) -> pd.DataFrame:
    """Every record of the published file `path` through the model (`published_record`)."""
    try:
        entries = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UserError(f"--published {path}: cannot read it as TOML: {e}") from None
    links = read_links()
    return pd.DataFrame([published_record(name, entry, links)
                         for name, entry in entries.items()])


def published_record(name: str, entry: dict, links: dict) -> dict:
    """One record: the compute per step from its per-device rate, the collectives' seconds over
    its links (named in links.toml or RATE,LATENCY), and its efficiency against its baseline
    (one device, or `baseline_devices` on one node) with none of them hidden, all hidden behind
    backward (taken as BACKWARD_SHARE of the step), and as the step's timeline predicts them
    (reports.timeline: the gradients ready evenly over backward, in the backend's messages)."""
    missing = [key for key in NEEDED if key not in entry] if isinstance(entry, dict) else NEEDED
    if missing or entry["backend"] not in TRAITS:
        raise UserError(f"published record [{name}]: "
                        + (f"no {', '.join(missing)}" if missing
                           else f"unknown backend {entry['backend']!r}"))
    link = parse_link(str(entry["link"]), links, f"published record [{name}]: link")
    node_link = parse_link(str(entry.get("node_link", entry["link"])), links,
                           f"published record [{name}]: node_link")
    traits = TRAITS[entry["backend"]]
    compute = entry["per_device_batch"] / entry["per_device_rate"]
    size = entry.get("gradient_bytes_per_parameter", 4) * entry["parameters"]
    baseline = int(entry.get("baseline_devices", 1))

    crossing = traits.protocol_on("cuda")  # GPUs
    backward = BACKWARD_SHARE * compute

    def collectives(devices: int, nodes: int) -> dict[str, float]:
        return step_collectives(None, crossing, size, backward, devices, nodes, link, node_link,
                                None, RESHARD)

    def efficiency(exposed: Callable[[dict], float]) -> float:
        base, scaled = collectives(baseline, 1), collectives(entry["devices"], entry["nodes"])
        return (compute + exposed(base)) / (compute + exposed(scaled))
    moving = collectives(entry["devices"], entry["nodes"])
    return {"name": name, "title": entry["title"], "sources": entry["sources"],
            "devices": entry["devices"] * entry["nodes"], "baseline": baseline,
            "compute": compute, "moving": moving["moving"], "published": entry["efficiency"],
            "no_overlap": efficiency(lambda c: c["moving"]),
            "full_overlap": efficiency(lambda c: max(c["moving"] - backward, 0.0)),
            "hidden": moving["hidden"], "predicted": efficiency(lambda c: c["exposed"])}


def as_json(record: pd.DataFrame) -> dict:
    """{record name: its efficiencies as fractions (NaN where there is none), title, devices}."""
    return {row["name"]: {key: row[key] for key in
                          ("published", "no_overlap", "full_overlap", "predicted", "hidden")}
            | {"title": row["title"], "devices": int(row["devices"])}
            for _, row in record.iterrows()}
