"""`xbench models` and `xbench backends`: what this installation has."""
import contextlib
import functools
import hashlib
import importlib
import json
import os
import sys
from collections import Counter
from importlib import metadata

import click

from xbench.cli.console import framework_messages, json_text, quiet, say, verbose
from xbench.common import cache, terminal
from xbench.common.backends import model_files
from xbench.common.backends.frameworks import FRAMEWORKS, Framework
from xbench.common.backends.registry import BACKENDS
from xbench.common.backends.start import Start
from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.grids.cell import Cell
from xbench.common.grids.settings import SETTINGS
from xbench.common.json_shapes import NUMBER, TEXT, WHOLE
from xbench.common.running.estimate import gpus_here
from xbench.common.workload import models
from xbench.common.workload.data import DATA_KINDS
from xbench.common.workload.layers import LAYER_NAMES, Block
from xbench.common.workload.model_file import ModelFile, short_name
from xbench.common.workload.resolve import own_model, resolve_model

COUNTED = {"framework": TEXT, "params": WHOLE, "flops_per_sample": NUMBER}
FLOPS = ("FLOPs = 2 x multiply-accumulates of the forward pass of one sample (an image, or a "
         "window of the context's tokens): conv and dense layers, a transformer's products; "
         "JAX's are XLA's cost analysis of the compiled forward pass, which counts every op.")


def shape(spec: models.SpecModel) -> dict:
    """What a model takes and gives, and its layers: its input, its output per sample, the
    top-level layers by kind, and for a language model its context, vocabulary and blocks."""
    found = {"input_shape": list(spec.input_shape()), "output_values": spec.output_values(),
             "layers": dict(Counter(LAYER_NAMES[type(layer)] for layer in spec.layers))}
    if spec.predicts_sequence:
        first = spec.layers[0]
        block = next(layer for layer in spec.layers if isinstance(layer, Block))
        found.update(context=first.context, vocabulary=first.vocab, width=block.width,
                     heads=block.heads)
        found["text"] = (f"{first.context}-token context over {first.vocab} characters -> the "
                         f"next of each; {found['layers']['block']} blocks x {block.heads} heads, "
                         f"width {block.width}")
    else:
        found["text"] = (f"{'x'.join(map(str, spec.input_shape()))} image -> "
                         f"{spec.output_values()} classes; "
                         + ", ".join(f"{kind} {n}" for kind, n in found["layers"].items()))
    return found


@contextlib.contextmanager
def progress_on_terminal(total: int, shown: bool):
    """A progress bar on the terminal's standard error (rich), where `shown` and it is a
    terminal: `measuring(what)` before each of the `total` measurements says what it measures
    (the ones before it done); nothing otherwise. Drawn on a copy of the terminal's descriptor:
    the frameworks' own messages are kept off it meanwhile."""
    if not (shown and sys.stderr.isatty()):
        yield lambda what: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    with os.fdopen(os.dup(sys.stderr.fileno()), "w") as stream, Progress(
            TextColumn("measuring the models"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.description}"), console=Console(file=stream), transient=True) as bar:
        task, started = bar.add_task("", total=total), []
        yield lambda what: (bar.update(task, completed=len(started), description=what),
                            started.append(what))


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--model", "model_file", metavar="FILE",
              help="Only this model file (or module): what the grid would know of it, built "
                   "once in each framework here (kept: the next time reads it).")
def list_models(as_json, model_file):
    """Every model: what it takes and gives (input shape, classes, or a language model's
    context), parameters and FLOPs per sample, from the spec and from each framework; with
    --model FILE, a model file of your own as the grid describes it."""
    if model_file:
        with framework_messages() as messages:
            found = file_described(model_file)
        show(found, as_json, messages(), file_lines(found))
        return
    found = []
    steps = len(models.MODELS) * len(FRAMEWORKS)
    with progress_on_terminal(steps, not (as_json or quiet())) as measuring, \
            framework_messages() as messages:  # TensorFlow's and Keras' log lines as they load
        for name, spec in models.MODELS.items():
            found.append({"model": name, "source": "spec (common)", "data": spec.dataset,
                          **shape(spec), "params": spec.parameters(),
                          "flops_per_sample": spec.flops_per_sample()})
            for framework in FRAMEWORKS:
                measuring(f"{framework.models_built_by}: {name}")
                found.append(described(name, framework))
    shapes = [[f["model"], f["data"], f["text"]] for f in found if "text" in f]
    numbers = [[f["model"], f["source"], *((f"{f['params']:,}", f"{f['flops_per_sample']:,}")
                                           if f["params"] is not None else (f["error"], "-"))]
               for f in found]
    show(found, as_json, messages(), [
        terminal.table(["model", "data", "takes and gives; layers"], shapes), "",
        terminal.table(["model", "source", "parameters", "FLOPs/sample"], numbers)])
    if not as_json:
        say(terminal.wrap(FLOPS))


def file_described(given: str) -> list[dict]:
    """What the grid knows of the model file `given` names (common.backends.model_files: the
    describers' kept answer, or their answer now, kept): per framework that builds it, its
    parameters, FLOPs per sample, input and the backends that train it; per framework that
    does not, why. One of xbench's own models is refused: `xbench models` lists it."""
    if own_model(given):
        raise UserError(f"{given} is one of xbench's own models: `xbench models` lists it "
                        f"(--model takes a model file or module)")
    model = model_files.described(given)
    takes = {"model": model.name, "input_dtype": model.input_dtype,
             "target_shape": list(model.target_shape), "classes": model.classes,
             "data": [data for data in DATA_KINDS if fits(model, data)]}
    return [{**takes, "framework": framework.name, "title": framework.title,
             "source": built["counted_by"],
             "params": built["params"], "flops_per_sample": built["flops_per_sample"],
             "input_shape": built["input_shape"],
             "backends": [t.name for t in TRAITS.values() if t.framework is framework
                          and not model.why_not_served(framework.name, t.own_models_only)]}
            if (built := model.built.get(framework.name)) else
            {**takes, "framework": framework.name, "title": framework.title,
             "source": framework.models_built_by, "params": None, "flops_per_sample": None,
             "input_shape": None, "backends": [],
             "error": model.not_served.get(framework.name, "not built")}
            for framework in FRAMEWORKS]


def fits(model: ModelFile, data: str) -> bool:
    """Whether a grid of `model` takes --data `data` (its own data(), random samples of its
    shapes, or a dataset whose samples it takes)."""
    try:
        model.check_data(data, model_files.IMAGE_LAYOUTS)
    except UserError:
        return False
    return True


def file_lines(found: list[dict]) -> list[str]:
    """A model file's lines: what it takes and gives and the data a grid of it takes, then per
    framework its counts and the backends that train it, or why none does, and who counted."""
    first = found[0]
    target = ("a class" if not first["target_shape"]
              else f"a class at each of {'x'.join(map(str, first['target_shape']))} places")
    numbers = [[f["title"], *(
        (f"{f['params']:,}", f"{f['flops_per_sample']:,}",
         "x".join(map(str, f["input_shape"])), ", ".join(f["backends"]) or "none")
        if f["params"] is not None else ("-", "-", "-", f"none: {f['error']}"))]
        for f in found]
    columns = terminal.width()
    return [*terminal.wrap_words(
        f"{short_name(first['model'])}: {first['input_dtype']} input -> {target} of "
        f"{first['classes']}; --data {', '.join(first['data'])}", columns, "  "), "",
        terminal.table(["framework", "parameters", "FLOPs/sample", "input", "backends"],
                       numbers), "",
        *[line for f in found if f["params"] is not None for line in terminal.wrap_words(
            f"{f['title']}'s numbers: counted by {f['source']}", columns, "  ")],
        terminal.wrap(FLOPS)]


def described(name: str, framework: Framework) -> dict:
    """A framework's own count of model `name` (or why there is none: not installed), kept
    (common.cache) for as long as the framework's version and xbench's code that builds the
    model are the same: counting builds every model in every framework, half a minute here."""
    module, function = framework.models_counter.split(":")
    built_by, needed = framework.models_built_by, framework.models_versions
    installed = installed_modules()
    missing = [m for m in needed if m not in installed]
    if missing:
        return not_installed(name, built_by, missing[0])
    versions = [f"{m}={metadata.version(installed[m][0])}" for m in needed]
    key = hashlib.sha256(" ".join([  # Keras counts on the backend KERAS_BACKEND names
        name, *versions, os.environ.get("KERAS_BACKEND", ""),
        cache.source_digest("xbench.common", module.rsplit(".", 1)[0])]).encode()).hexdigest()[:16]
    kept = cache.cache_path("counted", f"{built_by}-{name}-{key}.json")
    counted, _ = cache.read_kept(kept, COUNTED)
    if counted is None:
        try:
            counted = getattr(importlib.import_module(module), function)(name)
        except ImportError as e:
            return not_installed(name, built_by, e.name)
        with contextlib.suppress(OSError):  # not kept: counted again next time
            cache.write_whole(kept, json.dumps(counted).encode())
    return {"model": name, "source": counted["framework"], "params": counted["params"],
            "flops_per_sample": counted["flops_per_sample"]}


@functools.cache
def installed_modules() -> dict[str, list[str]]:
    """Top-level modules -> their distributions (a scan of every installed one, so once)."""
    return metadata.packages_distributions()


def not_installed(name: str, framework: str, missing: str) -> dict:
    return {"model": name, "source": framework, "params": None, "flops_per_sample": None,
            "error": f"not installed ({missing})"}


def attempts() -> list[tuple[str, dict]]:
    """What `xbench backends` asks of every backend, each as a small cell's settings: more than
    one device or node, then every choice of the settings a backend may lack (those of gradients
    that cross, a capped link among them, on 2 devices)."""
    def others(name: str) -> list[str]:
        return [c for c in SETTINGS[name].choices if c != SETTINGS[name].cell_default]
    return [("more than 1 device", {"devices": 2}), ("several nodes", {"nodes": 2}),
            ("bucket_mb", {"devices": 2, "bucket_mb": 1.0}),
            ("inject link", {"devices": 2, "inject": "link=400mbit"}),
            *[(f"accumulate_sync {mode}", {"devices": 2, "accumulate": 2, "accumulate_sync": mode})
              for mode in SETTINGS["accumulate_sync"].choices],
            *[(f"compression {c}", {"devices": 2, "compression": c})
              for c in others("compression")],
            *[(f"compile {c}", {"compile": c}) for c in others("compile")],
            *[(f"precision {p}", {"precision": p}) for p in others("precision")]]


def cannot(backend: Start, kind: str) -> list[dict]:
    """What `backend` cannot do on `kind` ("cpu", "cuda"), as the run would refuse it: each
    attempt's refusal (`why`), and whether GPUs could do it; a refusal that more than 1 device
    already implies is left out, and so is everything of several ranks for a backend of one
    device."""
    small = resolve_model("small")

    def refusal(settings: dict, on: str) -> str | None:
        cell = Cell(grid="backends", backend=backend.name, model="small", multiple=1, batch=128,
                    **{"devices": 1, **settings})
        return backend.cannot_launch(cell, small) or backend.unsupported_on(cell, on)
    (first, several), *others = attempts()
    alone = refusal(several, "cuda")  # a single-device reference: several ranks on no device
    found = [{"what": first, "why": refusal(several, kind),
              "on_gpus": kind != "cuda" and not alone}] if refusal(several, kind) else []
    for what, settings in others:
        why = refusal(settings, kind)
        ranks = settings.get("devices", 1) * settings.get("nodes", 1)
        if why is None or (alone and ranks > 1) or why == refusal(several, kind):
            continue
        found.append({"what": what, "why": why,
                      "on_gpus": kind != "cuda" and refusal(settings, "cuda") is None})
    own = backend.traits.own_models_only
    return found + ([{"what": "model files", "why": own, "on_gpus": False}] if own else [])


@click.command("backends")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_backends(as_json):
    """Every backend: what it is, what it needs and whether that is installed here, and what it
    cannot do here (with -v or --json, why), all from its traits."""
    kind = "cuda" if gpus_here() else "cpu"
    found = []
    with framework_messages() as messages:  # finding Horovod's extensions imports TensorFlow
        for name in BACKENDS:
            backend = Start.of(name)
            reason = backend.missing()
            found.append({"backend": name, "framework": backend.framework,
                          "available": not reason, "reason": reason,
                          "uses": None if reason else backend.describe(),
                          "spans_nodes": backend.traits.spans_nodes, "what": backend.what(),
                          "wrapper": backend.traits.wrapper, "needs": backend.needs(),
                          "install_hint": (backend.traits.install_hint
                                           or backend.traits.framework.install_hint),
                          "device_kind": kind, "cannot": cannot(backend, kind)})
    show(found, as_json, messages(), backend_lines(found, kind))


def backend_lines(found: list[dict], kind: str) -> list[str]:
    """Each backend's lines within the terminal's width: what it is, what it needs, what it
    cannot do here; what no backend can do here said once, at the end."""
    everyone = set.intersection(*({c["what"] for c in f["cannot"]} for f in found))
    width = max(len(f["backend"]) for f in found) + 2
    columns = terminal.width()
    lines = []
    for f in found:
        limits = [c for c in f["cannot"] if c["what"] not in everyone]
        texts = [f["what"], f["needs"], f"cannot here: {grouped(limits) or 'nothing xbench asks'}",
                 *([f"- {c['why']}" for c in limits] if verbose() else [])]
        for number, text in enumerate(texts):
            head = f["backend"].ljust(width) if number == 0 else " " * width
            lines += terminal.wrap_words(head + text, columns, " " * (width + 2))
    common = [c for c in found[0]["cannot"] if c["what"] in everyone]
    if common:
        lines += terminal.wrap_words(
            f"No backend can do here ({kind.upper()}): "
            + "; ".join(c["why"] for c in common), columns, "  ")
    if not verbose():
        lines += terminal.wrap_words("Why each cannot: xbench -v backends, or --json.", columns)
    return lines


def grouped(limits: list[dict]) -> str:
    """'more than 1 device (GPUs only), compression fp16/bf16': the limits in a line, the
    values of one setting together."""
    said: dict[str, list[str]] = {}
    for limit in limits:
        words, where = limit["what"].split(), " (GPUs only)" if limit["on_gpus"] else ""
        setting, value = (words[0], words[1] + where) if len(words) == 2 else (
            limit["what"] + where, "")
        said.setdefault(setting, []).append(value)
    return ", ".join(" ".join(filter(None, [setting, "/".join(filter(None, values))]))
                     for setting, values in said.items())


def show(found: list[dict], as_json: bool, messages: str, lines: list[str]) -> None:
    """What the frameworks said while loading (with -v), then JSON or the table's lines."""
    if verbose() and messages:
        click.echo(messages, err=True)
    click.echo(json_text(found) if as_json else "\n".join(lines))
