"""`xbench profile`: each layer of a model timed forward and backward in both frameworks."""
import sys
from pathlib import Path

import click

from xbench.cli.console import EXIT_CELLS_FAILED, json_text, say, str_list
from xbench.common.backends.start import Start
from xbench.common.backends.traits import profiled
from xbench.common.errors import UserError
from xbench.common.grids.settings import DEVICE_KINDS
from xbench.common.machine import nvidia_gpus
from xbench.common.results.outputs import writable_folder
from xbench.common.running.local import LocalLauncher
from xbench.common.terminal import wrap
from xbench.common.workload.models import MODELS


@click.command()
@click.option("--model", required=True, help="The model: " + ", ".join(MODELS))
@click.option("--batch", required=True, type=int, help="Samples per step on the one device.")
@click.option("--backend", callback=str_list, help="Frameworks by their single-device backend: "
              f"{', '.join(profiled())}; default: each, where installed.")
@click.option("--layer", "units", callback=str_list,
              help="Time only these units, e.g. conv1,block3 (default: every one); the whole "
                   "step is always timed.")
@click.option("--steps", type=int, default=20, show_default=True,
              help="Timed rounds (each runs every pass once).")
@click.option("--warmup", type=int, default=3, show_default=True,
              help="Rounds run first and dropped (tracing, allocation, algorithm search).")
@click.option("--device", type=click.Choice(DEVICE_KINDS), default="auto",
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
    pass, the unit's share of the step, and its achieved GFLOP/s (per-layer timing, as a study of
    CPU offloading measures it)."""
    from xbench.common.running.profile import PROFILE_BACKENDS, check_request, run_profile  # scipy
    from xbench.reports.rendering.profile import table_text, write  # matplotlib
    backends = backend or [b for b in PROFILE_BACKENDS if not Start.of(b).missing()]
    timed = check_request(model, batch, backends, units or [], steps, warmup, seed)
    if not backends:
        raise UserError("neither PyTorch nor TensorFlow is installed: run `make setup`")
    out = writable_folder(out or Path("reports/out") / f"profile-{model}-b{batch}", "the profile")
    if device == "auto":
        device = "cuda" if nvidia_gpus() else "cpu"
    echo = (lambda text: say(text, err=True)) if as_json else say
    record = run_profile(model, batch, backends, timed, steps, warmup, device, seed,
                         LocalLauncher(), echo)
    written = write(record, out)
    click.echo(json_text(record) if as_json else table_text(record))
    say(wrap(f"profile: {', '.join(map(str, written))}"), err=as_json)
    if not record["frameworks"]:
        sys.exit(EXIT_CELLS_FAILED)
