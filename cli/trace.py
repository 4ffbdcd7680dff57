"""`xbench trace`: a cell's recorded steps as a Chrome / Perfetto trace
(reports.rendering.trace)."""
import json
import re
from pathlib import Path

import click

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError, did_you_mean
from xbench.common.results.outputs import not_read, whole_file, writable_file
from xbench.common.results.store import read_rows
from xbench.reports.rendering.trace import has_timeline, trace

TIMELINE_SCHEMA = 15  # the schema version that added the step's timeline to a row


@click.command("trace")
@click.argument("results_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--cell", "key", required=True, metavar="KEY",
              help="The cell's key, as the results file (and the report's tables) give it.")
@click.option("--repeat", type=click.IntRange(min=0),
              help="Which repeat of the cell (default: its newest run).")
@click.option("--out", type=click.Path(dir_okay=False),
              help="The trace file to write (default: trace-<cell key>-r<repeat>.json here).")
def trace_cell(results_file, key, repeat, out):
    """Write a cell's recorded steps as a Chrome / Perfetto trace (JSON): per rank its step's
    parts and its collectives from launch to end, with each gradient's ready moment, for every
    timed epoch. Open it in https://ui.perfetto.dev or chrome://tracing. Exit 2 where the cell
    is not in the file or its row recorded no timeline."""
    row = chosen_row(results_file, key, repeat)
    why = no_timeline(row)
    if why:
        raise UserError(f"no timeline to trace for {key} (repeat {row['repeat']}): {why}")
    safe = re.sub(r"[^\w.-]+", "_", key)
    path = writable_file(out or f"trace-{safe}-r{row['repeat']}.json", "the trace")
    not_read([path], {results_file: "the results file"}, "--out")  # never over what it draws
    drawn = trace(row)
    with whole_file(path) as partial:
        partial.write_text(json.dumps(drawn), encoding="utf-8")
    ranks = len(row["attribution"]["epochs"][0]["ranks"])
    click.echo(f"trace: {path} ({ranks} rank(s), {drawn['otherData']['epochs']} epoch(s) of "
               f"run {row['run_id']}); open it in https://ui.perfetto.dev or chrome://tracing")


def chosen_row(results_file, key: str, repeat: int | None) -> dict:
    """The row of `key` in the file: of the given repeat, else the newest run (the last
    finished; of equal times, the last in the file)."""
    rows, problems = read_rows(Path(results_file))
    for problem in problems:
        click.secho(problem, fg="yellow", err=True)
    runs = [row for row in rows if row["cell_key"] == key]
    if not runs:
        keys = dict.fromkeys(row["cell_key"] for row in rows)
        raise UserError(f"no cell '{key}' in {results_file}{did_you_mean(key, keys)}"
                        + ("" if keys else ": the file holds no rows"))
    if repeat is not None:
        of_repeat = [row for row in runs if row["repeat"] == repeat]
        if not of_repeat:
            raise UserError(f"{key} has no repeat {repeat} in {results_file}; its repeats: "
                            f"{', '.join(map(str, sorted({row['repeat'] for row in runs})))}")
        runs = of_repeat
    return max(enumerate(runs), key=lambda found: (found[1]["finished_at"] or "", found[0]))[1]


def no_timeline(row: dict) -> str | None:
    """Why the row holds no step timeline, or None where it does."""
    if row["status"] != "ok":
        return f"the run ended {row['status']}, so no step was timed"
    if not row.get("attribution"):
        return "the row records no attribution of its steps"
    if has_timeline(row):
        return None
    traits = TRAITS.get(row["backend"])
    if traits and not traits.collectives_counted:
        return (f"{row['backend']} records no timeline: its collectives are not timed apart "
                f"({traits.collectives_not_counted})")
    return (f"the row was written by an xbench before schema {TIMELINE_SCHEMA}, which added "
            f"the timeline, or no step showed both its backward and a gradient's ready moment; "
            f"run the cell again to record one")
