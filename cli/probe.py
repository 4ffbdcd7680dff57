"""`xbench probe`: this machine's limits, the report's denominators."""
import sys
from pathlib import Path

import click

from xbench.cli.console import DEFAULT_RESULTS_DIR, EXIT_CELLS_FAILED, int_list, say, str_list
from xbench.cli.options import setting_options
from xbench.common.errors import UserError
from xbench.common.grids.settings import DEVICE_KINDS, RAY, SETTINGS, SLURM, check_axis
from xbench.common.machine import nvidia_gpus
from xbench.common.results import store as results
from xbench.common.results.probes import append_probe, probe_path
from xbench.common.running.launch import make_launcher
from xbench.common.running.probe import ALL_REDUCE_BACKENDS, MATMUL_BACKENDS, run_probe
from xbench.reports.rendering.probe import probe_text


@click.command()
@click.option("--backend", callback=str_list,
              help=f"Which probes: the frameworks' matmuls ({', '.join(MATMUL_BACKENDS)}) "
                   f"and the collectives of {', '.join(ALL_REDUCE_BACKENDS)}; default: every "
                   f"one installed here.")
@click.option("--devices", callback=int_list, default="2,4", show_default=True,
              help="Processes per node of the all-reduce probes (the grid's device counts).")
@click.option("--nodes", callback=int_list, default="1", show_default=True,
              help="Node counts of the all-reduce probes (beyond 1: --launcher slurm or ray).")
@click.option("--device", type=click.Choice(DEVICE_KINDS), default="auto",
              show_default=True, help="auto: cuda when nvidia-smi lists a GPU, else cpu.")
@setting_options([SETTINGS["launcher"], *SLURM, *RAY])
@click.option("--results-dir", type=click.Path(file_okay=False), default=str(DEFAULT_RESULTS_DIR),
              show_default=True, help="Folder of the results files the probe is kept beside.")
def probe(backend, devices, nodes, device, results_dir, **where):
    """Measure this machine's limits, the report's denominators: dense matmul GFLOP/s with each
    framework's kernels, and all-reduce bus bandwidth of each collective library at the byte
    sizes of the models' gradients (nccl-tests' algbw and busbw). Appends one record to
    RESULTS_DIR/probe.jsonl; the report uses the newest one of the rows' environment. The
    launcher, Slurm and Ray options are `xbench grid`'s."""
    chosen = backend or [*MATMUL_BACKENDS, *ALL_REDUCE_BACKENDS]
    unknown = [b for b in chosen if b not in (*MATMUL_BACKENDS, *ALL_REDUCE_BACKENDS)]
    if unknown:
        raise UserError(f"no probe for {', '.join(unknown)}; choose from "
                        f"{', '.join([*MATMUL_BACKENDS, *ALL_REDUCE_BACKENDS])}")
    devices = check_axis("devices", devices)
    nodes = check_axis("nodes", nodes)
    where = {key: SETTINGS[key].check_value(value) for key, value in where.items()
             if value is not None}
    if where.get("launcher", "local") == "local" and max(nodes) > 1:
        raise UserError("--nodes beyond 1 needs --launcher slurm or ray")
    if device == "auto":
        device = "cuda" if nvidia_gpus() else "cpu"
    path = results.check_results_path(Path(results_dir) / "probe.jsonl")
    launcher = make_launcher(where)
    click.get_current_context().call_on_close(launcher.close)
    record = run_probe(chosen, devices, nodes, device, launcher, say)
    if not record["matmul"] and not record["all_reduce"]:
        reasons = "; ".join(f"{n['what']}: {n['why'].splitlines()[0]}"
                            for n in record["not_measured"])
        click.secho(f"the probe measured nothing, so nothing was appended: {reasons}", fg="red",
                    err=True)
        sys.exit(EXIT_CELLS_FAILED)
    append_probe(probe_path(path), record)
    click.echo(probe_text(record))
    click.echo(f"probe: {probe_path(path)}")
