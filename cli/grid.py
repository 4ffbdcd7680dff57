"""`xbench grid`: run a grid of cells, one result row per cell and repeat."""
import dataclasses
import math
import sys

import click

from xbench.cli.console import (
    DEFAULT_RESULTS_DIR,
    EXIT_CELLS_FAILED,
    FiniteRange,
    quiet,
    say,
    verbose,
)
from xbench.cli.options import setting_options
from xbench.common.backends.traits import TRAITS, in_words
from xbench.common.errors import UserError
from xbench.common.grids import grid as grid_module
from xbench.common.grids.settings import SETTINGS
from xbench.common.grids.table import format_rows
from xbench.common.results import store as results
from xbench.common.results.outputs import not_read
from xbench.common.running.busy_machine import LOOK_SECONDS, Load, auto_waiting
from xbench.common.running.estimate import dry_run_plan, forecasts
from xbench.common.running.launch import make_launcher
from xbench.common.running.runner import check_cells, files_written, run_grid
from xbench.common.workload import data as data_module
from xbench.common.workload.resolve import resolve_model

UNFINISHED = ("failed", "timeout")


@click.command()
@click.argument("grid_file", required=False, type=click.Path(dir_okay=False))
@click.option("--preset", help="A grid in experiments/ by name (smoke, seed, lab...).")
@setting_options(SETTINGS.values())
@click.option("--batch-sweep", metavar="STARTxFACTOR",
              help="Instead of --batch: grow the batch from START by FACTOR (32x4: 32, 128, "
                   "512, ...) until the first that does not fit in memory, per line of the grid.")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Folder with the MNIST files, CIFAR-10 (cifar-10-batches-py or its archive), or "
                   "Tiny Shakespeare's input.txt (also found in a tinyshakespeare folder in it "
                   "or beside it).")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Results file (JSON Lines); default results/<grid>.jsonl.")
@click.option("--resume/--force", default=True,
              help="Skip cells that already have an ok row in the results file (default), or "
                   "rerun all.")
@click.option("--dry-run", is_flag=True,
              help="List the cells with what would happen to each here and about how long it "
                   "takes, training nothing: from earlier rows, else from each framework's "
                   "short reference cell, measured once per machine (seconds) and kept.")
@click.option("--probe", is_flag=True,
              help="With --dry-run: forecast each cell from a short cell of its own model, "
                   "data, batch and knobs (its framework's single-device backend, run here "
                   "once and kept): nearer, and a short cell per setup.")
@click.option("--until-conclusive", is_flag=True,
              help="After the grid, keep adding repeats of the cells whose comparisons are still "
                   "inconclusive, most uncertain first, until each is settled or --budget is "
                   "spent; then say what is left.")
@click.option("--budget", type=FiniteRange(min=0, max=30 * 24 * 60), default=60.0,
              show_default=True, metavar="MINUTES",
              help="With --until-conclusive: the most time its added repeats may take.")
def grid(grid_file, preset, batch_sweep, data_dir, results_path, resume, dry_run, probe,
         until_conclusive, budget, **overrides):
    """Run a grid of cells (a grid file, or --preset), one result row per cell and repeat.
    Each option from --backend to --loader-workers overrides the grid-file key it names
    (--backend: backends; an axis takes a comma-separated list)."""
    if bool(grid_file) == bool(preset):
        raise UserError("give a grid file or --preset NAME (not both), e.g. "
                        "`xbench grid --preset smoke`")
    grid_path = grid_file or grid_module.preset_path(preset)
    spec = grid_module.read_grid_file(grid_path)
    if overrides["batches"] and batch_sweep:
        raise UserError("give --batch or --batch-sweep, not both")
    if probe and not dry_run:
        raise UserError("--probe is for --dry-run: a grid run measures nothing before its cells")
    overrides["batches"] = batch_sweep or overrides["batches"]
    where = make_launcher(grid_module.resolve(spec, overrides)[1])
    click.get_current_context().call_on_close(where.close)  # a Ray started for the grid ends
    cells = grid_module.expand(spec, overrides)
    check_cells(cells, where)  # what the run refuses, the dry run refuses too
    # Every path is resolved here, once: the cells run in other working directories.
    results_path = results.check_results_path(
        results_path or DEFAULT_RESULTS_DIR / f"{spec['name']}.jsonl")
    data_files = ()
    if cells[0].data not in ("synthetic", "model"):  # fail now if it is missing or damaged
        folder, data_files = data_module.data_folder(cells[0].data, data_dir)
        cells = [dataclasses.replace(cell, data_dir=folder) for cell in cells]
    not_over_inputs(results_path, grid_path, data_files, cells)
    if dry_run:
        click.echo("\n".join(dry_run_plan(cells, results_path, resume, where, probe)))
        return
    if cells[0].data == "synthetic":
        click.secho("SYNTHETIC DATA: random images (or tokens) shaped as each model's dataset; "
                    "rates are real, accuracy and loss are meaningless; rows say "
                    "dataset=synthetic", fg="yellow", err=True)
    if until_conclusive:  # the grid's own repeats are the sequential plan's first look
        cells = [dataclasses.replace(cell, look=1) for cell in cells]
    load = where.load()
    warn_if_busy(load, cells)
    rows = run_grid(cells, results_path, resume=resume, echo=say, launcher=where, quiet=quiet(),
                    load=load, forecasts=forecasts(cells, results_path, resume, where))
    if until_conclusive:
        from xbench.reports.judging.settle import settle  # pandas and scipy: loaded here
        rows += settle(cells, results_path, budget, say, lambda more: run_grid(
            more, results_path, echo=say, launcher=where, quiet=quiet(), load=load))
    click.echo(format_rows(rows))
    click.echo(f"results: {results_path}")
    if verbose():
        for row in rows:
            click.echo(f"{row['cell_key']} r{row['repeat']}: log {row['log'] or '(not started)'}")
    not_finished = [r for r in rows if r["status"] in UNFINISHED]
    if not_finished:
        click.secho(f"{len(not_finished)} cell(s) {' or '.join(UNFINISHED)}: see their rows' "
                    f"errors and logs; exit code {EXIT_CELLS_FAILED}", fg="red", err=True)
        sys.exit(EXIT_CELLS_FAILED)


def not_over_inputs(results_path, grid_path, data_files, cells) -> None:
    """A UserError where the results, or a file the grid writes beside them, is a file the grid
    reads: its grid file, its data, a model file."""
    models = {path: "the model file" for name in {c.model for c in cells}
              for path in resolve_model(name).files()}
    not_read(files_written(results_path), {
        grid_path: "the grid file", **dict.fromkeys(data_files, "a data file of the grid"),
        **models}, "--results")


def warn_if_busy(load: Load | None, cells) -> None:
    """Say, before the first cell, that other processes already take more of the machine than
    the cells' contention limit allows, what is running, and the choices; and how the OpenMP
    threads of cells of `--omp-wait auto` wait, as their rows will record it (the limit
    changes that in no way)."""
    limit = min(cell.contention_limit for cell in cells)
    if load is None or not load.busy(limit):
        return
    higher = min(1.0, math.ceil((load.share + 0.05) * 20) / 20)
    waiting = [TRAITS[cell.backend].framework for cell in cells if cell.omp_wait == "auto"]
    openmp = list(dict.fromkeys(f.title for f in waiting if not f.no_omp_wait))
    click.secho(f"warning: {'the cluster' if load.where else 'this machine'} is busy: "
                f"{load.words()} over the last "
                f"{LOOK_SECONDS:g} s, above the cells' contention limit of {limit:.0%}; the rows "
                f"of cells they disturb will be marked contended, and the report and predict "
                f"leave those out. Choices: wait until it is quiet; --pin-ranks (each rank on "
                f"cores of its own, judged there); or --contention-limit {higher:g} (the rows "
                f"record the limit they were judged by)."
                + (f" The OpenMP threads of {in_words(openmp)}'s CPU cells (--omp-wait auto) "
                   f"{auto_waiting(load)}." if openmp else ""), fg="yellow", err=True)
