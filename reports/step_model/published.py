"""Published scaling results put through the model of reports.step_model.predict: `xbench predict
--published [FILE]` (default reports/step_model/published.toml). A check, never a fit: each record
gives the inputs the model needs (the per-device rate at the per-device batch, the parameters and
the bytes of each one's gradient, the devices per node and the nodes, the links, and the backend
whose collectives carried them), and the model's efficiency is printed three ways beside the
published one: none of the collectives hidden, all of them hidden behind backward, and as the step's
timeline predicts (reports.step_model.timeline: the gradients ready evenly over backward, in the
backend's messages, on one stream). No waiting for the slowest rank is added: none of the records
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
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from xbench.common.backends.protocol import MIB
from xbench.common.backends.traits import TRAITS, having, spanning_nodes
from xbench.common.errors import UserError
from xbench.common.grids.settings import SETTINGS
from xbench.common.measuring.timing import FASTEST_STEP_SECONDS
from xbench.common.results.store import open_regular
from xbench.reports.step_model.predict import LINKS_FILE, parse_link, read_links
from xbench.reports.step_model.record_step import OPTIMIZER_BYTES, record_step
from xbench.reports.step_model.skill import MODEL, discriminating, published_scores, skill_text
from xbench.reports.step_model.step import Link

PUBLISHED_FILE = Path(__file__).with_name("published.toml")
RESHARD = SETTINGS["reshard"].default[0]  # a sharded backend's record: FSDP's default
NEEDED = ("title", "backend", "per_device_rate", "per_device_batch", "parameters", "devices",
          "nodes", "link", "efficiency", "sources")
# A record's texts, as NUMBERS its numbers: the record's own fields (a record is not a cell).
TEXT = {"title": "what was trained where", "backend": "the xbench backend it maps to",
        "link": "links.toml's name of the link between devices",
        "node_link": "links.toml's name of the link between nodes",
        "sources": "where its figures are published", "optimizer": "its optimizer's name"}
# tomllib holds the whole file and what it parses in memory: the shipped file of 66 records is
# 150 kB, so a hundred times its size is room for any list of publications.
MOST_BYTES = 16 * MIB
# A published efficiency: the N-device rate over N/baseline times the baseline's. Above 1 only
# by a measurement's noise or a cache's luck (the shipped records reach 1.0093); 2.0 is a typo.
MOST_EFFICIENCY = 1.1
MODELLED = ("compute", "moving", "no_overlap", "full_overlap", "predicted")  # finite, each
# The largest model a record can describe: fifty times the largest trained (about 2 x 10^12).
MOST_PARAMETERS = 1e14
WIDEST_GRADIENT = 8  # bytes of one parameter's gradient: float64's, the widest a library sends


@dataclass(frozen=True)
class Bound:
    """What a record's number may be: whole or not, above (or from) `least`, at most `most`."""
    whole: bool = False
    least: float = 0.0
    above: bool = True  # False: `least` itself allowed
    most: float = math.inf
    why: str = ""


def setting_bound(key: str) -> Bound:
    """The grid's own range of the setting `key` (common.grids.settings): a record is checked
    as a cell is."""
    setting = SETTINGS[key]
    return Bound(setting.kind is int, setting.minimum, False, setting.maximum, setting.why)


NUMBERS = {
    "per_device_rate": Bound(why="samples a second on one device"),
    "per_device_batch": setting_bound("batches"),
    "parameters": Bound(least=1, above=False, most=MOST_PARAMETERS,
                        why="fifty times the largest model trained"),
    "gradient_bytes_per_parameter": Bound(most=WIDEST_GRADIENT, why="float64's, the widest"),
    "devices": setting_bound("devices"),
    "nodes": setting_bound("nodes"),
    "efficiency": Bound(most=MOST_EFFICIENCY, why="a share of perfect scaling"),
    "baseline_devices": setting_bound("devices"),
    "accumulation": setting_bound("accumulate"),
    "baseline_accumulation": setting_bound("accumulate"),
    "bucket_bytes": Bound(least=1, above=False, most=SETTINGS["bucket_mb"].maximum * MIB,
                          why=SETTINGS["bucket_mb"].why),
    "memory_bandwidth": Bound(why="bytes a second of the device's memory, its data sheet's"),
    "step_spread": Bound(least=0, above=False, most=1, why="a step time's standard deviation "
                                                           "over its mean"),
    "input_rate": Bound(why="samples a second one node's input pipeline delivers"),
    "sharing_factor": Bound(least=1, above=False, most=2, why="how much slower compute runs "
                                                              "beside collectives"),
}
BRACKET_GOAL = 0.8  # the share of discriminating records whose bounds bracket the published one


def against_published(path: Path = PUBLISHED_FILE) -> pd.DataFrame:
    """Every record of the published file `path` through the model (`published_record`), each
    checked first (`checked_entry`); one UserError naming the file, the record and the field
    for the first one that is not a record."""
    links, achieved = read_links(), achieved_links()
    found = []
    for name, entry in read_published(path).items():
        where = f"{path}: published record [{name}]"
        entry = checked_entry(where, entry)
        try:
            record = published_record(name, entry, links, achieved, where)
        except OverflowError:  # a Horovod cycle's tick past a float's range
            record = dict.fromkeys(MODELLED, math.inf)
        if not all(math.isfinite(record[key]) for key in MODELLED):
            raise UserError(f"{where}: its numbers overflow the model's arithmetic: give "
                            f"per_device_rate, per_device_batch, parameters, "
                            f"gradient_bytes_per_parameter and the links as published")
        found.append(record)
    return pd.DataFrame(found)


def read_published(path: Path) -> dict:
    """The TOML of `path`, read as results files are (common.results.store.open_regular: never a
    pipe or a device) and at most MOST_BYTES of it; a UserError naming it otherwise."""
    try:
        with open_regular(path, "published records", mode="rb") as f:
            data = f.read(MOST_BYTES + 1)
    except OSError as e:
        raise UserError(f"--published {path}: cannot read it: {e.strerror}") from None
    if len(data) > MOST_BYTES:
        raise UserError(f"--published {path}: larger than {MOST_BYTES // MIB} MiB, which no list "
                        f"of published records comes near: is it the file you meant?")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # not UTF-8, not TOML, an integer of 4,300 digits
        raise UserError(f"--published {path}: cannot read it as TOML: "
                        f"{str(e) or type(e).__name__}") from None


def achieved_links(path: Path = LINKS_FILE) -> dict[str, Link]:
    """The named links with a published all-reduce bus bandwidth (links.toml `achieved`), at
    that rate: what NCCL reaches over the link, where the data sheet gives the line rate."""
    entries = tomllib.loads(path.read_text(encoding="utf-8"))
    return {name: Link(entry["title"], float(entry["achieved"]), float(entry["latency"]),
                       f"{entry['achieved_source']} (achieved, per {entry['per']})")
            for name, entry in entries.items() if "achieved" in entry}


def checked_entry(where: str, entry: object) -> dict:
    """The record, or one UserError (`where`: the file and the record) naming what is wrong in
    it, checked as the grid checks a cell: a missing key, a text or a number of the wrong
    kind, a number out of its range (NUMBERS), baseline devices beyond the node's, a backend
    unknown or unable to span the record's devices and nodes."""
    if not isinstance(entry, dict):
        raise UserError(f"{where}: not a table of keys")
    missing = [key for key in NEEDED if key not in entry]
    if missing:
        raise UserError(f"{where}: no {', '.join(missing)}")
    for key in TEXT:
        if key in entry and not isinstance(entry[key], str):
            raise UserError(f"{where}: {key} = {entry[key]!r} is not text")
        if key in entry and not entry[key].strip():
            raise UserError(f"{where}: {key} = {entry[key]!r} is empty: give the record's "
                            f"{key}" + (" (where each number was published)"
                                        if key == "sources" else ""))
    if entry["backend"] not in TRAITS:
        raise UserError(f"{where}: unknown backend {entry['backend']!r} "
                        f"(one of {', '.join(TRAITS)})")
    for key, bound in NUMBERS.items():
        if key in entry:
            check_number(where, key, entry[key], bound)
    devices, nodes = entry["devices"], entry["nodes"]
    if entry.get("baseline_devices", 1) > devices:
        raise UserError(f"{where}: baseline_devices = {entry['baseline_devices']} is more than "
                        f"devices = {devices}: the baseline is that many devices of one node")
    traits = TRAITS[entry["backend"]]
    if devices * nodes > 1 and not traits.spans_devices:
        raise UserError(f"{where}: devices = {devices}, nodes = {nodes} on backend "
                        f"{traits.name}, a single-device reference that reduces nothing between "
                        f"devices (1 device only); these span devices: "
                        f"{', '.join(having(lambda t: t.spans_devices))}")
    if nodes > 1 and not traits.spans_nodes:
        raise UserError(f"{where}: nodes = {nodes} on backend {traits.name}, which runs on one "
                        f"machine; these span nodes: {', '.join(spanning_nodes())}")
    step = entry["per_device_batch"] / entry["per_device_rate"]
    if not math.isfinite(step):
        raise UserError(f"{where}: per_device_rate = {entry['per_device_rate']!r}: a batch of "
                        f"{entry['per_device_batch']} takes longer than a float can say")
    if "optimizer" in entry and (entry["optimizer"] not in OPTIMIZER_BYTES
                                 or "memory_bandwidth" not in entry):
        raise UserError(f"{where}: optimizer = {entry['optimizer']!r}: give one of "
                        f"{', '.join(OPTIMIZER_BYTES)} with the device's memory_bandwidth")
    if not isinstance(entry.get("collectives_after_backward", False), bool):
        raise UserError(f"{where}: collectives_after_backward = "
                        f"{entry['collectives_after_backward']!r} is not true or false")
    if not math.isfinite(entry.get("gradient_bytes_per_parameter", 4) * entry["parameters"]):
        raise UserError(f"{where}: parameters = {entry['parameters']!r} x "
                        f"gradient_bytes_per_parameter: more bytes than a float can say")
    if step < FASTEST_STEP_SECONDS:
        raise UserError(f"{where}: per_device_rate = {entry['per_device_rate']!r}: a step of "
                        f"{entry['per_device_batch']} samples in {step:.3g} s, under "
                        f"{FASTEST_STEP_SECONDS * 1e6:g} µs, faster than any device trains")
    return entry


def check_number(where: str, key: str, value: object, bound: Bound) -> None:
    """Nothing if `value` is a number `bound` allows; a UserError naming `key` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{where}: {key} = {value!r} is not a number")
    if not math.isfinite(value):
        raise UserError(f"{where}: {key} = {value!r} is not a finite number")
    if bound.whole and not isinstance(value, int):
        raise UserError(f"{where}: {key} = {value!r} is not a whole number")
    if not ((value > bound.least if bound.above else value >= bound.least)
            and value <= bound.most):
        if bound.above:
            allowed = f"above {bound.least:g}" + (f" and at most {bound.most:,}"
                                                  if math.isfinite(bound.most) else "")
        else:
            allowed = (f"from {bound.least:g} to {bound.most:,}" if math.isfinite(bound.most)
                       else f"at least {bound.least:g}")
        why = f" ({bound.why})" if bound.why else ""
        raise UserError(f"{where}: {key} = {value!r} is out of range: give a "
                        f"{'whole ' if bound.whole else ''}number {allowed}{why}")


def record_link(where: str, entry: dict, key: str, links: dict[str, Link],
                achieved: dict[str, Link]) -> tuple[Link, list[str]]:
    """The record's link under `key` (node_link defaults to link): its achieved rate where
    links.toml has one (and its name, for the term that says so), else as parse_link reads
    it."""
    text = entry.get(key, entry["link"])
    if text in achieved:
        return achieved[text], [text]
    return parse_link(text, links, f"{where}: {key}"), []


def published_record(name: str, entry: dict, links: dict[str, Link],
                     achieved: dict[str, Link], where: str) -> dict:
    """One record through reports.step_model.record_step: its efficiency against its baseline
    (one device, or `baseline_devices` on one node, at `baseline_accumulation`) with none of
    its collectives hidden, all hidden behind the last micro-batch's backward, and as the
    step's timeline predicts them, with the terms that entered. `entry`: checked_entry's;
    `where`: the file and the record, for a link it cannot read."""
    link, terms = record_link(where, entry, "link", links, achieved)
    node_link, node_terms = record_link(where, entry, "node_link", links, achieved)
    achieved_names = list(dict.fromkeys(terms + node_terms))
    crossing = TRAITS[entry["backend"]].protocol_on("cuda")  # GPUs
    step, terms = record_step(entry, link, node_link, crossing, RESHARD)
    terms = {"achieved": achieved_names, **terms}
    baseline = int(entry.get("baseline_devices", 1))
    accumulation = int(entry.get("accumulation", 1))
    base = step.per_sample(baseline, 1, int(entry.get("baseline_accumulation", accumulation)))
    scaled = step.per_sample(entry["devices"], entry["nodes"], accumulation)
    return {"name": name, "title": entry["title"], "sources": entry["sources"],
            "devices": entry["devices"] * entry["nodes"], "baseline": baseline,
            "compute": accumulation * step.micro + step.optimizer, "moving": scaled["moving"],
            "published": entry["efficiency"], "terms": terms_text(terms), "term_values": terms,
            **{key: base[key] / scaled[key] for key in BOUNDS},
            "hidden": scaled["hidden"]}


BOUNDS = ("no_overlap", "full_overlap", "predicted")


def terms_text(terms: dict) -> str:
    """'achieved nvlink3, accumulation 8 (256 at the baseline), sharing x1.19, optimizer lamb
    6.1 ms': the terms beyond the step model's own that a record used."""
    found = [f"achieved {name}" for name in terms["achieved"]]
    if "accumulation" in terms:
        kept = terms["accumulation"]
        found.append(f"accumulation {kept['micro_batches']} ({kept['baseline_micro_batches']} "
                     f"at the baseline" + (", after backward)" if kept["after_backward"] else ")"))
    if terms["sharing"]["factor"] != 1.0:
        found.append(f"sharing x{terms['sharing']['factor']:g}")
    if "optimizer" in terms:
        found.append(f"optimizer {terms['optimizer']['optimizer']} "
                     f"{terms['optimizer']['seconds'] * 1000:.1f} ms")
    if "stragglers" in terms:
        found.append(f"stragglers {terms['stragglers']['spread']:.0%} spread")
    if "input" in terms:
        found.append(f"input {terms['input']['samples_per_second_per_node']:,.0f}/s a node")
    return ", ".join(found)


def as_json(record: pd.DataFrame) -> dict:
    """{record name: its efficiencies as fractions (NaN where there is none), the share of its
    collectives its timeline hides, the terms it used (as data), title, devices}."""
    return {row["name"]: {key: row[key] for key in
                          ("published", "no_overlap", "full_overlap", "predicted", "hidden")}
            | {"terms": row["term_values"], "title": row["title"],
               "devices": int(row["devices"])}
            for _, row in record.iterrows()}


def published_summary(record: pd.DataFrame) -> dict:
    """The check's scores (reports.step_model.skill.published_scores: every predictor's errors
    over all records and the discriminating ones, the model's skill) and its goals: on at least
    MOST_RECORDS discriminating records a median absolute error at most SKILL_GOAL times the
    best trivial predictor's and bounds that bracket at least BRACKET_GOAL of the published
    efficiencies; over all records a median step-time error at most STEP_GOAL."""
    scores = published_scores(record)
    telling, every = scores["discriminating"], scores["all"]
    def median_points(scored, name):
        return scored["predictors"][name]["median_points"] if name else math.nan
    best = median_points(telling, telling["best_trivial"])
    model = median_points(telling, MODEL)
    return {"records": len(record),
            "publishers": int(record["name"].str.split("-").str[0].nunique()),
            "discriminating": telling["records"],
            "discriminating_publishers": int(record.loc[discriminating(record), "name"]
                                             .str.split("-").str[0].nunique()),
            "scores": scores,
            "error_goal_met": bool(telling["records"] >= MOST_RECORDS
                                   and model <= SKILL_GOAL * best),
            "bracket_goal_met": bool(telling["records"] >= MOST_RECORDS
                                     and telling["bracketed_share"] >= BRACKET_GOAL),
            "step_goal_met": bool(every["predictors"][MODEL]["median_step"] <= STEP_GOAL),
            "below_no_overlap": int((record["published"] < record["no_overlap"]).sum())}


MOST_RECORDS = 30  # discriminating records the goals ask for
SKILL_GOAL = 0.7   # the model's median error at most this times the best trivial predictor's
STEP_GOAL = 0.08   # the median step-time error over all records


def goals_text(summary: dict) -> list[str]:
    """The check's verdict on itself, a line each: the model's skill over all records and the
    discriminating ones, and each goal with what was reached (published_summary's)."""
    scores = summary["scores"]
    found = []
    for name, scored in scores.items():
        model = scored["predictors"][MODEL]
        found.append(f"{name} ({scored['records']} records): median absolute error "
                     f"{model['median_points']:.2f} points, step time {model['median_step']:.1%}"
                     f"; {skill_text(scored, 'median_points')}; the bounds bracket "
                     f"{scored['bracketed_share']:.0%}")
    telling = scores["discriminating"]
    best = telling["best_trivial"]
    best_points = telling["predictors"][best]["median_points"] if best else math.nan
    found.append(
        f"goals: on at least {MOST_RECORDS} discriminating records (have "
        f"{summary['discriminating']}, from {summary['discriminating_publishers']} publishers) "
        f"a median error at most {SKILL_GOAL:g} x the best trivial predictor's ("
        f"{SKILL_GOAL * best_points:.2f} points): "
        f"{'met' if summary['error_goal_met'] else 'not met'}; bounds bracketing at least "
        f"{BRACKET_GOAL:.0%}: {'met' if summary['bracket_goal_met'] else 'not met'}; a median "
        f"step-time error at most {STEP_GOAL:.0%} over all: "
        f"{'met' if summary['step_goal_met'] else 'not met'}")
    return found
