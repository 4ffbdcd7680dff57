"""The `xbench` command: run grids, list models and backends, get the data, make reports."""
import dataclasses
import importlib
import sys
from pathlib import Path

import click

from common import data as data_module
from common import grid as grid_module
from common import models, results
from common.backend import BACKENDS, get_backend
from common.errors import UserError
from common.launch import LocalLauncher, SlurmLauncher
from common.runner import run_grid
from common.table import format_rows

DEFAULT_RESULTS_DIR = Path("results")
# A grid exits 0 when every cell ended ok, oom or unsupported (each a result); this code when a
# cell failed or timed out; 2 on bad input (nothing ran); 130 when interrupted.
EXIT_CELLS_FAILED = 3
UNFINISHED = ("failed", "timeout")
FRAMEWORK_MODELS = {"PyTorch": "pt_backend.models:describe", "Keras": "tf_backend.models:describe"}


def int_list(ctx, param, value):
    """'1,2,4' -> [1, 2, 4] (a clear error for anything else)."""
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of whole numbers") from None


def str_list(ctx, param, value):
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@click.group()
def main():
    """xbench: data-parallel training benchmarks across PyTorch, TensorFlow and Horovod."""


@main.command()
@click.argument("grid_file", required=False, type=click.Path(dir_okay=False))
@click.option("--preset", help="A grid in experiments/ by name (smoke, seed, lab...).")
@click.option("--backend", callback=str_list, help="Backends, comma-separated: " + ", ".join(BACKENDS))
@click.option("--model", callback=str_list, help="Models, comma-separated: " + ", ".join(models.MODELS))
@click.option("--multiple", callback=int_list, help="Dataset multiples, e.g. 1,4,8.")
@click.option("--batch", callback=int_list, help="Batch sizes, e.g. 128,256,512.")
@click.option("--nodes", callback=int_list,
              help="Node counts, e.g. 1,2 (each node has --devices devices; needs --launcher slurm "
                   "beyond 1).")
@click.option("--devices", callback=int_list, help="Device counts per node, e.g. 1,2,4.")
@click.option("--epochs", type=int, help="Epochs per run (>= 2: epoch 1 warms up).")
@click.option("--repeat", type=int, help="Repeats of every cell (dispersion needs >= 3).")
@click.option("--batch-mode", type=click.Choice(grid_module.BATCH_MODES),
              help="global: the batch is split over devices (strong scaling); "
                   "per_device: each device keeps it (weak scaling).")
@click.option("--max-train-samples", type=int, help="Cap the base training set (before multiples).")
@click.option("--data", type=click.Choice(grid_module.DATA_KINDS), help="Real MNIST or synthetic data.")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Folder with the MNIST files.")
@click.option("--device", type=click.Choice(grid_module.DEVICE_KINDS), help="Force cpu or cuda.")
@click.option("--seed", type=int, help="Seed of the model and the data order.")
@click.option("--timeout", type=int, help="Seconds a cell may run before it is killed.")
@click.option("--contention-limit", type=float,
              help="Share of the cores (0-1) that other processes and steal may use during a "
                   "timed epoch before its row is marked contended (default 0.25).")
@click.option("--compute-references/--no-compute-references", default=None,
              help="Add (default) or leave out the 1-device runs at the N-device cells' "
                   "per-device batch and threads that compute vs communication needs.")
@click.option("--launcher", type=click.Choice(grid_module.LAUNCHERS),
              help="Where cells run: this machine (local, the default) or a Slurm cluster, every "
                   "cell one job.")
@click.option("--slurm-partition", help="Slurm partition to submit to (default: the cluster's).")
@click.option("--slurm-account", help="Slurm account to charge.")
@click.option("--slurm-time", type=int,
              help="Slurm time limit per cell, minutes (default: the cell's timeout, rounded up).")
@click.option("--slurm-gpus-per-node", type=int,
              help="GPUs to ask for per node (default: --devices with --device cuda, else none).")
@click.option("--slurm-args", help="Extra sbatch arguments, e.g. \"--qos=short --exclusive\".")
@click.option("--memory-limit-mb", type=int,
              help="Memory each worker may allocate for training, on top of its framework and "
                   "data (emulates a smaller device: a batch that does not fit is an 'oom' row).")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Results file (JSON Lines); default results/<grid>.jsonl.")
@click.option("--resume/--force", default=True,
              help="Skip cells that already have an ok row in the results file (default), or rerun all.")
@click.option("--dry-run", is_flag=True, help="List the cells, run nothing.")
def grid(grid_file, preset, backend, model, multiple, batch, nodes, devices, epochs, repeat,
         batch_mode, max_train_samples, data, data_dir, device, seed, timeout, contention_limit,
         compute_references, launcher, slurm_partition, slurm_account, slurm_time,
         slurm_gpus_per_node, slurm_args, memory_limit_mb, results_path, resume, dry_run):
    """Run a grid of cells (a grid file, or --preset), one result row per cell and repeat."""
    if bool(grid_file) == bool(preset):
        raise UserError("give a grid file or --preset NAME (not both), e.g. `xbench grid --preset smoke`")
    spec = grid_module.read_grid_file(grid_file or grid_module.preset_path(preset))
    overrides = {"backends": backend, "models": model, "multiples": multiple, "batches": batch,
                 "nodes": nodes, "devices": devices, "epochs": epochs, "repeats": repeat,
                 "batch_mode": batch_mode, "launcher": launcher,
                 "slurm_partition": slurm_partition, "slurm_account": slurm_account,
                 "slurm_time": slurm_time, "slurm_gpus_per_node": slurm_gpus_per_node,
                 "slurm_args": slurm_args,
                 "max_train_samples": max_train_samples, "data": data, "device": device,
                 "seed": seed, "timeout": timeout, "memory_limit_mb": memory_limit_mb,
                 "contention_limit": contention_limit, "compute_references": compute_references}
    where = make_launcher(grid_module.resolve(spec, overrides)[1])
    cells = grid_module.expand(spec, overrides, cores=where.cores)
    where.check(cells)
    # Every path is resolved here, once: the cells run in other working directories.
    results_path = results.check_results_path(
        results_path or DEFAULT_RESULTS_DIR / f"{spec['name']}.jsonl")
    if dry_run:
        for cell in cells:
            click.echo(f"{cell.label}  [{cell.key}]")
        click.echo(f"{len(cells)} cells; would append to {results_path}")
        return
    if cells[0].data == "mnist":  # fail now, not in every cell, if it is missing or damaged
        folder = data_module.mnist_folder(data_dir)
        cells = [dataclasses.replace(cell, data_dir=folder) for cell in cells]
    else:
        click.secho("SYNTHETIC DATA: random MNIST-shaped images; rates are real, accuracy is "
                    "meaningless; rows say dataset=synthetic", fg="yellow", err=True)
    rows = run_grid(cells, results_path, resume=resume, echo=click.echo, launcher=where)
    click.echo(format_rows(rows))
    click.echo(f"results: {results_path}")
    not_finished = [r for r in rows if r["status"] in UNFINISHED]
    if not_finished:
        click.secho(f"{len(not_finished)} cell(s) {' or '.join(UNFINISHED)}: see their rows' "
                    f"errors and logs; exit code {EXIT_CELLS_FAILED}", fg="red", err=True)
        sys.exit(EXIT_CELLS_FAILED)


def make_launcher(settings):
    """The launcher the grid's settings ask for."""
    if settings["launcher"] == "slurm":
        return SlurmLauncher(settings["slurm_partition"], settings["slurm_account"],
                             settings["slurm_time"], settings["slurm_gpus_per_node"],
                             settings["slurm_args"])
    return LocalLauncher()


@main.command("models")
def list_models():
    """Every model: parameters and FLOPs per sample, from the spec and from each framework."""
    header = f"{'model':<7} {'source':<20} {'parameters':>12} {'FLOPs/sample':>14}"
    click.echo(header)
    for name in models.MODELS:
        click.echo(f"{name:<7} {'spec (common)':<20} {models.parameter_count(name):>12,} "
                   f"{models.flops_per_sample(name):>14,}")
        for framework, path in FRAMEWORK_MODELS.items():
            module, function = path.split(":")
            try:
                described = getattr(importlib.import_module(module), function)(name)
            except ImportError as e:
                click.echo(f"{name:<7} {framework:<20} not installed ({e.name})")
                continue
            click.echo(f"{name:<7} {described['framework']:<20} {described['params']:>12,} "
                       f"{described['flops_per_sample']:>14,}")
    click.echo("FLOPs = 2 x multiply-accumulates of the forward pass (conv and dense layers).")


@main.command("backends")
def list_backends():
    """Every backend: available here or not, and why."""
    for name in BACKENDS:
        backend = get_backend(name)
        reason = backend.missing()
        click.echo(f"{name:<12} {backend.framework:<11} " + (f"NOT AVAILABLE: {reason}" if reason
                                                             else "available " + backend.describe()))


@main.group("data")
def data_group():
    """Get MNIST."""


@data_group.command("download")
@click.option("--to", "folder", required=True, type=click.Path(file_okay=False),
              help="Folder to put the four MNIST .gz files in.")
def download(folder):
    """Download MNIST (needs internet; tests and CI never do this)."""
    click.echo(f"MNIST is in {data_module.download(folder)}; use --data-dir {folder}")


@main.command("export")
@click.argument("results_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("target", type=click.Path(dir_okay=False))
def export(results_file, target):
    """Write a results file as a flat .csv or .parquet table."""
    rows, problems = results.read_rows(results_file)
    for problem in problems:
        click.secho(problem, fg="yellow", err=True)
    click.echo(f"{len(rows)} rows -> {results.export(rows, target)}")


@main.command()
@click.argument("results_files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False),
              help="Folder to write into; default reports/out/<name of the first results file>.")
@click.option("--format", "formats", default="html,md,png,svg,csv", show_default=True,
              help="What to write, comma-separated: html, md, png, svg, csv.")
@click.option("--where",
              help="Keep only the rows matching a pandas query, e.g. \"model == 'small'\".")
@click.option("--include-contended", is_flag=True,
              help="Use runs marked contended in the numbers and verdicts (left out by default).")
def report(results_files, out, formats, where, include_contended):
    """Figures, tables and one HTML page from results files (default: the newest in results/)."""
    import reports
    from reports.load import newest_results
    from reports.tables import shorten
    paths = [Path(p) for p in results_files] or [newest_results(DEFAULT_RESULTS_DIR)]
    out = Path(out or Path("reports/out") / paths[0].stem)
    notices, summary, written = reports.build_report(paths, out, reports.parse_formats(formats),
                                                     where, include_contended)
    for line in notices:
        click.secho(line, fg="yellow", err=True)
    click.echo("\n".join(shorten(summary)))
    click.echo(f"report: {written.get('html', out)}")


def run():
    """Entry point: user errors print one message and exit 2, never a traceback."""
    try:
        main(standalone_mode=False)
    except UserError as e:
        click.secho(f"error: {e}", fg="red", err=True)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):  # Ctrl-C, or SIGTERM during a grid
        click.echo("interrupted: the running cell was stopped and nothing half-written was kept; "
                   "run the same command again to resume", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(2)


if __name__ == "__main__":
    run()
