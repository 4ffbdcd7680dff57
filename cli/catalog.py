"""`xbench models` and `xbench backends`: what this installation has."""
import importlib

import click

from xbench.cli.console import framework_messages, json_text, say, verbose
from xbench.common.backends.registry import BACKENDS
from xbench.common.backends.start import Start
from xbench.common.workload import models

FRAMEWORK_MODELS = {"PyTorch": "xbench.pt_backend.models:describe",
                    "Keras": "xbench.keras_models.models:describe",
                    "JAX": "xbench.jax_backend.models:describe"}


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_models(as_json):
    """Every model: parameters and FLOPs per sample, from the spec and from each framework."""
    found = []
    with framework_messages() as messages:  # TensorFlow's and Keras' log lines as they load
        for name in models.MODELS:
            found.append({"model": name, "source": "spec (common)",
                          "params": models.MODELS[name].parameters(),
                          "flops_per_sample": models.MODELS[name].flops_per_sample()})
            for framework, path in FRAMEWORK_MODELS.items():
                module, function = path.split(":")
                try:
                    described = getattr(importlib.import_module(module), function)(name)
                except ImportError as e:
                    found.append({"model": name, "source": framework, "params": None,
                                  "flops_per_sample": None, "error": f"not installed ({e.name})"})
                    continue
                found.append({"model": name, "source": described["framework"],
                              "params": described["params"],
                              "flops_per_sample": described["flops_per_sample"]})
    width = max(map(len, models.MODELS))
    data = max(len(spec.dataset) for spec in models.MODELS.values())
    source = max(len(f["source"]) for f in found)
    lines = [f"{'model':<{width}} {'data':<{data}} {'source':<{source}} {'parameters':>12} "
             f"{'FLOPs/sample':>16}"]
    for f in found:
        numbers = (f"{f['params']:>12,} {f['flops_per_sample']:>16,}" if f["params"] is not None
                   else f["error"])
        lines.append(f"{f['model']:<{width}} {models.MODELS[f['model']].dataset:<{data}} "
                     f"{f['source']:<{source}} {numbers}")
    show(found, as_json, messages(), lines)
    if not as_json:
        say("FLOPs = 2 x multiply-accumulates of the forward pass of one sample (an image, or a "
            "window of the context's tokens): conv and dense layers, a transformer's products; "
            "JAX's are XLA's cost analysis of the compiled forward pass, which counts every op.")


@click.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_backends(as_json):
    """Every backend: available here or not, and why."""
    found = []
    with framework_messages() as messages:  # finding Horovod's extensions imports TensorFlow
        for name in BACKENDS:
            backend = Start.of(name)
            reason = backend.missing()
            found.append({"backend": name, "framework": backend.framework,
                          "available": not reason, "reason": reason,
                          "uses": None if reason else backend.describe(),
                          "spans_nodes": backend.traits.spans_nodes})
    width = max(map(len, BACKENDS))
    show(found, as_json, messages(), [
        f"{f['backend']:<{width}} {f['framework']:<11} "
        + (f"NOT AVAILABLE: {f['reason']}" if f["reason"] else "available " + f["uses"])
        for f in found])


def show(found: list[dict], as_json: bool, messages: str, lines: list[str]) -> None:
    """What the frameworks said while loading (with -v), then JSON or the table's lines."""
    if verbose() and messages:
        click.echo(messages, err=True)
    click.echo(json_text(found) if as_json else "\n".join(lines))
