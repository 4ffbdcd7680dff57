"""`xbench grid`: run a grid of cells, one result row per cell and repeat."""
import dataclasses
import sys

import click

from xbench.cli.console import DEFAULT_RESULTS_DIR, EXIT_CELLS_FAILED, quiet, say, verbose
from xbench.cli.options import setting_options
from xbench.common import data as data_module
from xbench.common import grid as grid_module
from xbench.common import results
from xbench.common.errors import UserError
from xbench.common.estimate import dry_run_plan
from xbench.common.launch import make_launcher
from xbench.common.runner import run_grid
from xbench.common.settings import SETTINGS
from xbench.common.table import format_rows

UNFINISHED = ("failed", "timeout")


@click.command()
@click.argument("grid_file", required=False, type=click.Path(dir_okay=False))
@click.option("--preset", help="A grid in experiments/ by name (smoke, seed, lab...).")
@setting_options(SETTINGS.values())
@click.option("--batch-sweep", metavar="STARTxFACTOR",
              help="Instead of --batch: grow the batch from START by FACTOR (32x4: 32, 128, "
                   "512, ...) until the first that does not fit in memory, per line of the grid.")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Folder with the MNIST files, or CIFAR-10 (cifar-10-batches-py or its archive).")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Results file (JSON Lines); default results/<grid>.jsonl.")
@click.option("--resume/--force", default=True,
              help="Skip cells that already have an ok row in the results file (default), or rerun all.")
@click.option("--dry-run", is_flag=True, help="List the cells, run nothing.")
def grid(grid_file, preset, batch_sweep, data_dir, results_path, resume, dry_run, **overrides):
    """Run a grid of cells (a grid file, or --preset), one result row per cell and repeat.
    Each option from --backend to --loader-workers overrides the grid-file key it names
    (--backend: backends; an axis takes a comma-separated list)."""
    if bool(grid_file) == bool(preset):
        raise UserError("give a grid file or --preset NAME (not both), e.g. `xbench grid --preset smoke`")
    spec = grid_module.read_grid_file(grid_file or grid_module.preset_path(preset))
    if overrides["batches"] and batch_sweep:
        raise UserError("give --batch or --batch-sweep, not both")
    overrides["batches"] = batch_sweep or overrides["batches"]
    where = make_launcher(grid_module.resolve(spec, overrides)[1])
    cells = grid_module.expand(spec, overrides)
    where.check(cells)
    # Every path is resolved here, once: the cells run in other working directories.
    results_path = results.check_results_path(
        results_path or DEFAULT_RESULTS_DIR / f"{spec['name']}.jsonl")
    if dry_run:
        click.echo("\n".join(dry_run_plan(cells, results_path, resume)))
        return
    if cells[0].data != "synthetic":  # fail now, not in every cell, if it is missing or damaged
        folder = data_module.data_folder(cells[0].data, data_dir)
        cells = [dataclasses.replace(cell, data_dir=folder) for cell in cells]
    else:
        click.secho("SYNTHETIC DATA: random images shaped as each model's dataset; rates are "
                    "real, accuracy is meaningless; rows say dataset=synthetic", fg="yellow",
                    err=True)
    rows = run_grid(cells, results_path, resume=resume, echo=say, launcher=where, quiet=quiet())
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
