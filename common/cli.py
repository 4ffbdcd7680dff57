"""The `xbench` command: run grids, list models and backends, get the data, make reports."""
import contextlib
import dataclasses
import importlib
import importlib.metadata
import json
import os
import sys
import tempfile
import tomllib
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
EXIT_SLOWER = 4  # xbench compare --fail-above: a significant slowdown beyond the threshold
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


def own_version() -> str:
    """xbench's version: installed, or from pyproject.toml when run from a checkout (make
    gpu-check runs it with PYTHONPATH, uninstalled)."""
    try:
        return importlib.metadata.version("xbench")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"] + " (uninstalled)"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(own_version(), prog_name="xbench")
@click.option("-q", "--quiet", is_flag=True, help="Print only results, warnings and errors.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print what runs: each cell's log file, frameworks' own messages.")
@click.pass_context
def main(ctx, quiet, verbose):
    """xbench: data-parallel training benchmarks across PyTorch, TensorFlow and Horovod.

    Shell completion (click's): eval "$(_XBENCH_COMPLETE=bash_source xbench)" in ~/.bashrc
    (zsh_source, fish_source for other shells)."""
    if quiet and verbose:
        raise UserError("-q/--quiet and -v/--verbose contradict each other; give one")
    ctx.obj = {"quiet": quiet, "verbose": verbose}


def say(text="", err=False, **style):
    """Print unless --quiet (errors and warnings, err=True, always print)."""
    ctx = click.get_current_context(silent=True)
    if err or not (ctx and ctx.find_root().obj and ctx.find_root().obj["quiet"]):
        click.secho(text, err=err, **style)


def verbose():
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().obj and ctx.find_root().obj["verbose"])


@main.command()
@click.argument("grid_file", required=False, type=click.Path(dir_okay=False))
@click.option("--preset", help="A grid in experiments/ by name (smoke, seed, lab...).")
@click.option("--backend", callback=str_list, help="Backends, comma-separated: " + ", ".join(BACKENDS))
@click.option("--model", callback=str_list, help="Models, comma-separated: " + ", ".join(models.MODELS))
@click.option("--multiple", callback=int_list, help="Dataset multiples, e.g. 1,4,8.")
@click.option("--batch", callback=int_list, help="Batch sizes, e.g. 128,256,512.")
@click.option("--batch-sweep", metavar="STARTxFACTOR",
              help="Instead of --batch: grow the batch from START by FACTOR (32x4: 32, 128, "
                   "512, ...) until the first that does not fit in memory, per line of the grid.")
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
@click.option("--data", type=click.Choice(data_module.DATA_KINDS),
              help="Real MNIST, real CIFAR-10 (resnet18, vgg19), or synthetic images shaped as "
                   "the model's dataset.")
@click.option("--max-test-samples", type=int,
              help="Cap the test set accuracy is measured on (default: all 10,000).")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Folder with the MNIST files, or CIFAR-10 (cifar-10-batches-py or its archive).")
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
@click.option("--optimizer", type=click.Choice(tuple(grid_module.OPTIMIZERS)),
              help="adam (default) or sgd, the same step in every framework.")
@click.option("--lr", type=float, help="Learning rate (default: adam 0.001, sgd 0.01).")
@click.option("--momentum", type=float, help="SGD's momentum (default 0).")
@click.option("--weight-decay", type=float, help="L2 weight decay, added to the gradient as "
                                                   "PyTorch does (default 0).")
@click.option("--lr-scaling", callback=str_list,
              help="Scale lr with the global batch against --reference-batch: none, linear, "
                   "sqrt (comma-separated: an axis).")
@click.option("--reference-batch", type=int, help="The global batch lr is given for (default 128).")
@click.option("--warmup-epochs", callback=int_list,
              help="Epochs over which lr ramps linearly from lr to the scaled lr (an axis, e.g. 0,1).")
@click.option("--set-epoch/--no-set-epoch", default=None,
              help="PyTorch backends: call DistributedSampler.set_epoch each epoch (default), or "
                   "keep epoch 0's order in every epoch (the lab's question 5, measured).")
@click.option("--host-memory", callback=str_list,
              help="PyTorch backends, how batches reach a GPU: pageable, pinned, "
                   "pinned-non-blocking (comma-separated: an axis; pinned ones need CUDA).")
@click.option("--loader-workers", callback=int_list,
              help="PyTorch backends: DataLoader worker processes, e.g. 0,2 (an axis; 0: batches "
                   "are formed in the training process).")
@click.option("--memory-limit-mb", type=int,
              help="Memory each worker may allocate for training, on top of its framework and "
                   "data (emulates a smaller device: a batch that does not fit is an 'oom' row).")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Results file (JSON Lines); default results/<grid>.jsonl.")
@click.option("--resume/--force", default=True,
              help="Skip cells that already have an ok row in the results file (default), or rerun all.")
@click.option("--dry-run", is_flag=True, help="List the cells, run nothing.")
def grid(grid_file, preset, backend, model, multiple, batch, batch_sweep, nodes, devices, epochs,
         repeat, batch_mode, max_train_samples, data, max_test_samples, data_dir, device, seed, timeout, contention_limit,
         compute_references, launcher, slurm_partition, slurm_account, slurm_time,
         slurm_gpus_per_node, slurm_args, optimizer, lr, momentum, weight_decay, lr_scaling,
         reference_batch, warmup_epochs, set_epoch, host_memory, loader_workers, memory_limit_mb,
         results_path, resume,
         dry_run):
    """Run a grid of cells (a grid file, or --preset), one result row per cell and repeat."""
    if bool(grid_file) == bool(preset):
        raise UserError("give a grid file or --preset NAME (not both), e.g. `xbench grid --preset smoke`")
    spec = grid_module.read_grid_file(grid_file or grid_module.preset_path(preset))
    if batch and batch_sweep:
        raise UserError("give --batch or --batch-sweep, not both")
    overrides = {"backends": backend, "models": model, "multiples": multiple,
                 "batches": batch_sweep or batch,
                 "nodes": nodes, "devices": devices, "epochs": epochs, "repeats": repeat,
                 "batch_mode": batch_mode, "launcher": launcher,
                 "slurm_partition": slurm_partition, "slurm_account": slurm_account,
                 "slurm_time": slurm_time, "slurm_gpus_per_node": slurm_gpus_per_node,
                 "slurm_args": slurm_args,
                 "max_train_samples": max_train_samples, "max_test_samples": max_test_samples, "data": data, "device": device,
                 "seed": seed, "timeout": timeout, "memory_limit_mb": memory_limit_mb,
                 "contention_limit": contention_limit, "compute_references": compute_references,
                 "optimizer": optimizer, "lr": lr, "momentum": momentum,
                 "weight_decay": weight_decay, "lr_scaling": lr_scaling,
                 "reference_batch": reference_batch, "warmup_epochs": warmup_epochs,
                 "set_epoch": set_epoch, "host_memory": host_memory,
                 "loader_workers": loader_workers}
    where = make_launcher(grid_module.resolve(spec, overrides)[1])
    cells = grid_module.expand(spec, overrides, cores=where.cores)
    where.check(cells)
    # Every path is resolved here, once: the cells run in other working directories.
    results_path = results.check_results_path(
        results_path or DEFAULT_RESULTS_DIR / f"{spec['name']}.jsonl")
    if dry_run:
        dry_run_plan(cells, results_path, resume)
        return
    if cells[0].data != "synthetic":  # fail now, not in every cell, if it is missing or damaged
        folder = data_module.data_folder(cells[0].data, data_dir)
        cells = [dataclasses.replace(cell, data_dir=folder) for cell in cells]
    else:
        click.secho("SYNTHETIC DATA: random images shaped as each model's dataset; rates are "
                    "real, accuracy is meaningless; rows say dataset=synthetic", fg="yellow",
                    err=True)
    quiet = click.get_current_context().find_root().obj["quiet"]
    rows = run_grid(cells, results_path, resume=resume, echo=say, launcher=where, quiet=quiet)
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


def dry_run_plan(cells, results_path, resume):
    """Every cell with what would happen to it here, and the total time it should take."""
    from common.estimate import estimate
    from common.progress import duration
    estimates = estimate(cells, results_path, resume)
    for number, (cell, found) in enumerate(zip(cells, estimates), 1):
        what = (f"about {duration(found.seconds)} ({found.source})" if found.status == "to run"
                else f"{found.status}: {found.source}")
        click.echo(f"[{number}/{len(cells)}] {cell.label}  [{cell.key}]  {what}")
    by = {status: [e for e in estimates if e.status == status]
          for status in ("done", "unsupported", "to run")}
    known = [e.seconds for e in by["to run"] if e.seconds is not None]
    total = f"about {duration(sum(known))} here" if known else "no estimate here"
    unknown = len(by["to run"]) - len(known)
    click.echo(f"{len(cells)} cells: {len(by['done'])} done already, {len(by['unsupported'])} "
               f"unsupported here, {len(by['to run'])} to run: {total}"
               + (f" (and {unknown} without an estimate)" if unknown else "")
               + f"; would append to {results_path}")


SLURM_SETTINGS = ("slurm_partition", "slurm_account", "slurm_time", "slurm_gpus_per_node",
                  "slurm_args")


def make_launcher(settings):
    """The launcher the grid's settings ask for."""
    if settings["launcher"] == "slurm":
        return SlurmLauncher(settings["slurm_partition"], settings["slurm_account"],
                             settings["slurm_time"], settings["slurm_gpus_per_node"],
                             settings["slurm_args"])
    return LocalLauncher()


@main.command()
@click.option("--backend", callback=str_list,
              help="Which probes: the frameworks' matmuls (pt-single, tf-single) and the "
                   "collectives of pt-ddp, hvd-torch, tf-multiworker; default: every one "
                   "installed here.")
@click.option("--devices", callback=int_list, default="2,4", show_default=True,
              help="Processes per node of the all-reduce probes (the grid's device counts).")
@click.option("--nodes", callback=int_list, default="1", show_default=True,
              help="Node counts of the all-reduce probes (beyond 1: --launcher slurm).")
@click.option("--device", type=click.Choice(("auto", "cpu", "cuda")), default="auto",
              show_default=True, help="auto: cuda when nvidia-smi lists a GPU, else cpu.")
@click.option("--launcher", type=click.Choice(grid_module.LAUNCHERS), default="local",
              show_default=True, help="Run the probes here, or as Slurm jobs.")
@click.option("--results-dir", type=click.Path(file_okay=False), default=str(DEFAULT_RESULTS_DIR),
              show_default=True, help="Folder of the results files the probe is kept beside.")
def probe(backend, devices, nodes, device, launcher, results_dir):
    """Measure this machine's limits, the report's denominators: dense matmul GFLOP/s with each
    framework's kernels, and all-reduce bus bandwidth of each collective library at the byte
    sizes of the models' gradients (nccl-tests' algbw and busbw). Appends one record to
    RESULTS_DIR/probe.jsonl; the report uses the newest one of the rows' environment."""
    from common.limits import append_probe, probe_path
    from common.machine import nvidia_gpus
    from common.probe import ALL_REDUCE_BACKENDS, MATMUL_BACKENDS, run_probe
    chosen = backend or [*MATMUL_BACKENDS, *ALL_REDUCE_BACKENDS]
    unknown = [b for b in chosen if b not in (*MATMUL_BACKENDS, *ALL_REDUCE_BACKENDS)]
    if unknown:
        raise UserError(f"no probe for {', '.join(unknown)}; choose from "
                        f"{', '.join([*MATMUL_BACKENDS, *ALL_REDUCE_BACKENDS])}")
    devices = grid_module.check_axis("devices", devices, int)
    nodes = grid_module.check_axis("nodes", nodes, int)
    if launcher == "local" and max(nodes) > 1:
        raise UserError("--nodes beyond 1 needs --launcher slurm")
    if device == "auto":
        device = "cuda" if nvidia_gpus() else "cpu"
    path = results.check_results_path(Path(results_dir) / "probe.jsonl")
    where = make_launcher({"launcher": launcher, **dict.fromkeys(SLURM_SETTINGS)})
    record = run_probe(chosen, devices, nodes, device, where, say)
    append_probe(probe_path(path), record)
    click.echo(probe_text(record))
    click.echo(f"probe: {probe_path(path)}")


def probe_text(record):
    """The probe's figures as two small tables."""
    lines = [f"{'matmul':<11} {'device':<32} {'precision':<10} {'threads':>7} "
             f"{'GFLOP/s':>9}  (slowest-fastest repeat)"]
    for m in record["matmul"]:
        lines.append(f"{m['framework']:<11} {m['device_name'][:32]:<32} {m['precision']:<10} "
                     f"{m['threads'] or '-':>7} {m['gflops']:>9,.1f}  "
                     f"({m['gflops_low']:,.1f}-{m['gflops_high']:,.1f})")
    lines += ["", f"{'all-reduce':<16} {'nodes':>5} {'ranks':>5} {'MiB':>6} {'ms':>8} "
                  f"{'algbw GB/s':>10} {'busbw GB/s':>10}  (slowest-fastest repeat)"]
    for a in record["all_reduce"]:
        lines.append(f"{a['library']:<16} {a['nodes']:>5} {a['world_size']:>5} "
                     f"{a['bytes'] / 2**20:>6.2f} {a['seconds'] * 1e3:>8.2f} "
                     f"{a['algbw'] / 1e9:>10.3f} {a['busbw'] / 1e9:>10.3f}  "
                     f"({a['busbw_low'] / 1e9:.3f}-{a['busbw_high'] / 1e9:.3f})")
    lines += [f"not measured: {n['what']}: {n['why'].splitlines()[0]}"
              for n in record["not_measured"]]
    return "\n".join(lines)


@main.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_models(as_json):
    """Every model: parameters and FLOPs per sample, from the spec and from each framework."""
    found = []
    for name in models.MODELS:
        found.append({"model": name, "source": "spec (common)",
                      "params": models.parameter_count(name),
                      "flops_per_sample": models.flops_per_sample(name)})
        for framework, path in FRAMEWORK_MODELS.items():
            module, function = path.split(":")
            with framework_messages() as messages:
                try:
                    described = getattr(importlib.import_module(module), function)(name)
                except ImportError as e:
                    found.append({"model": name, "source": framework, "params": None,
                                  "flops_per_sample": None, "error": f"not installed ({e.name})"})
                    continue
            found.append({"model": name, "source": described["framework"],
                          "params": described["params"],
                          "flops_per_sample": described["flops_per_sample"]})
            if verbose() and messages():
                click.echo(messages(), err=True)
    if as_json:
        click.echo(json.dumps(found, indent=1))
        return
    width = max(map(len, models.MODELS))
    click.echo(f"{'model':<{width}} {'images':<7} {'source':<20} {'parameters':>12} "
               f"{'FLOPs/sample':>14}")
    for f in found:
        numbers = (f"{f['params']:>12,} {f['flops_per_sample']:>14,}" if f["params"] is not None
                   else f["error"])
        click.echo(f"{f['model']:<{width}} {models.MODELS[f['model']].dataset:<7} "
                   f"{f['source']:<20} {numbers}")
    say("FLOPs = 2 x multiply-accumulates of the forward pass (conv and dense layers).")


@main.command()
@click.option("--model", required=True, help="The model: " + ", ".join(models.MODELS))
@click.option("--batch", required=True, type=int, help="Samples per step on the one device.")
@click.option("--backend", callback=str_list, help="Frameworks by their single-device backend: "
              "pt-single, tf-single; default: both, where installed.")
@click.option("--layer", "units", callback=str_list,
              help="Time only these units, e.g. conv1,block3 (default: every one); the whole "
                   "step is always timed.")
@click.option("--steps", type=int, default=20, show_default=True,
              help="Timed rounds (each runs every pass once).")
@click.option("--warmup", type=int, default=3, show_default=True,
              help="Rounds run first and dropped (tracing, allocation, algorithm search).")
@click.option("--device", type=click.Choice(("auto", "cpu", "cuda")), default="auto",
              show_default=True, help="auto: cuda when nvidia-smi lists a GPU, else cpu.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the weights, the synthetic batch and the upstream gradients.")
@click.option("--out", type=click.Path(file_okay=False),
              help="Folder of profile.json, profile.txt and profile.png "
                   "[default: reports/out/profile-MODEL-bBATCH].")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON record instead of tables.")
def profile(model, batch, backend, units, steps, warmup, device, seed, out, as_json):
    """Time each layer (unit: conv1, bn1, block1 ...) of a model forward and backward on one
    device in each framework, beside the whole training step: median and 95% interval per
    pass, the unit's share of the step, and its achieved GFLOP/s (seed 001's measurement)."""
    from common.machine import nvidia_gpus
    from common.profile import PROFILE_BACKENDS, check_request, run_profile
    from reports.profile import table_text, write
    backends = backend or [b for b in PROFILE_BACKENDS if not get_backend(b).missing()]
    timed = check_request(model, batch, backends, units or [], steps, warmup)
    if not backends:
        raise UserError("neither PyTorch nor TensorFlow is installed: run `make setup`")
    if device == "auto":
        device = "cuda" if nvidia_gpus() else "cpu"
    echo = (lambda text: say(text, err=True)) if as_json else say
    record = run_profile(model, batch, backends, timed, steps, warmup, device, seed,
                         make_launcher({"launcher": "local", **dict.fromkeys(SLURM_SETTINGS)}),
                         echo)
    written = write(record, Path(out or Path("reports/out") / f"profile-{model}-b{batch}"))
    click.echo(json.dumps(record, indent=1) if as_json else table_text(record))
    say(f"profile: {', '.join(map(str, written))}", err=as_json)
    if not record["frameworks"]:
        sys.exit(EXIT_CELLS_FAILED)


@contextlib.contextmanager
def framework_messages():
    """Keep what frameworks write to the process's standard error (TensorFlow's C++ log, absl)
    off the terminal while they load; `messages()` gives it back (printed with --verbose)."""
    sys.stderr.flush()
    saved, kept = os.dup(2), tempfile.TemporaryFile()
    os.dup2(kept.fileno(), 2)
    try:
        yield lambda: (kept.seek(0), kept.read().decode(errors="replace").strip())[1]
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@main.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_backends(as_json):
    """Every backend: available here or not, and why."""
    found = []
    for name in BACKENDS:
        backend = get_backend(name)
        reason = backend.missing()
        found.append({"backend": name, "framework": backend.framework, "available": not reason,
                      "reason": reason, "uses": None if reason else backend.describe(),
                      "spans_nodes": backend.spans_nodes})
    if as_json:
        click.echo(json.dumps(found, indent=1))
        return
    for f in found:
        click.echo(f"{f['backend']:<15} {f['framework']:<11} "
                   + (f"NOT AVAILABLE: {f['reason']}" if f["reason"] else "available " + f["uses"]))


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
@click.argument("target", required=False, type=click.Path(dir_okay=False))
@click.option("--mlflow", "mlflow_uri", is_flag=False, flag_value="", default=None,
              metavar="[URI]",
              help="Log every row as an MLflow run, to URI (default: a local store, ./mlruns).")
def export(results_file, target, mlflow_uri):
    """Write a results file as a flat .csv or .parquet table, or to MLflow (--mlflow)."""
    if not target and mlflow_uri is None:
        raise UserError("give a TARGET file (.csv or .parquet), or --mlflow [URI]")
    rows, problems = results.read_rows(results_file)
    for problem in problems:
        click.secho(problem, fg="yellow", err=True)
    if target:
        click.echo(f"{len(rows)} rows -> {results.export(rows, target)}")
    if mlflow_uri is not None:
        from reports import tracking
        uri, logged, there = tracking.export(rows, mlflow_uri or tracking.default_uri())
        click.echo(f"{logged} rows -> MLflow runs in {uri} (experiment '{tracking.EXPERIMENT}')"
                   + (f"; {there} already there" if there else ""))


@main.command()
@click.argument("results_files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False),
              help="Folder to write into; default reports/out/<name of the first results file>.")
@click.option("--format", "formats", default="html,md,png,svg,csv", show_default=True,
              help="What to write, comma-separated: html, md, png, svg, csv.")
@click.option("--where",
              help="Keep only the rows matching a filter: columns compared with values, e.g. "
                   "\"model == 'small' and devices > 1\".")
@click.option("--include-contended", is_flag=True,
              help="Use runs marked contended in the numbers and verdicts (left out by default).")
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False),
              help="A results file to compare these with (a section like `xbench compare`).")
@click.option("--lab", is_flag=True,
              help="Add the course lab's answers in its layout (questions 1, 4, 5, 6, Tables 1-3, "
                   "the case study's accuracy): for a lab grid's rows.")
def report(results_files, out, formats, where, include_contended, baseline, lab):
    """Figures, tables and one HTML page from results files (default: the newest in results/)."""
    import reports
    from reports.load import newest_results
    from reports.tables import shorten
    paths = [Path(p) for p in results_files] or [newest_results(DEFAULT_RESULTS_DIR)]
    out = Path(out or Path("reports/out") / paths[0].stem)
    notices, summary, written = reports.build_report(paths, out, reports.parse_formats(formats),
                                                     where, include_contended,
                                                     baseline and Path(baseline), lab)
    for line in notices:
        click.secho(line, fg="yellow", err=True)
    click.echo("\n".join(shorten(summary)))
    click.echo(f"report: {written.get('html', out)}")


@main.command()
@click.argument("base", type=click.Path(exists=True, dir_okay=False))
@click.argument("new", type=click.Path(exists=True, dir_okay=False))
@click.option("--fail-above", type=click.FloatRange(min=0), metavar="PCT",
              help=f"Exit {EXIT_SLOWER} if a cell is significantly slower in NEW by more than PCT "
                   f"percent (for CI).")
@click.option("--exclude-contended", is_flag=True,
              help="Leave out runs marked contended (compared, and marked, by default).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def compare(base, new, fail_above, exclude_contended, as_json):
    """The cells of two results files side by side: NEW / BASE epoch-2 rate with its 95%
    interval, faster / slower / no change at that confidence, and what differs in their
    environments (versions, device, threads). Exit 0, or EXIT_SLOWER with --fail-above."""
    from reports.compare import as_json as compare_json
    from reports.compare import compare as compare_files
    from reports.compare import slower_than, text_table
    from reports.tables import markdown
    cells, notes = compare_files([Path(base)], [Path(new)], not exclude_contended)
    if as_json:
        click.echo(compare_json(cells, notes))
    else:
        for note in notes:
            click.secho(note, fg="yellow", err=True)
        click.echo(markdown(text_table(cells)) if len(cells) else "no cell is in both files")
    if fail_above is not None:
        slower = slower_than(cells, fail_above)
        if len(slower):
            click.secho(f"{len(slower)} cell(s) significantly slower by more than {fail_above}%: "
                        f"{', '.join(slower['cell_key'])}", fg="red", err=True)
            sys.exit(EXIT_SLOWER)


def run():
    """Entry point: user errors print one message and exit 2, never a traceback. NO_COLOR (any
    value) turns colour off, as https://no-color.org asks."""
    color = False if os.environ.get("NO_COLOR") else None
    try:
        main(standalone_mode=False, color=color)
    except UserError as e:
        click.secho(f"error: {e}", fg="red", err=True, color=color)
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
