"""A model's name into the model (common.workload.model): the one place that tells xbench's own
models from a user's model file. Nothing is remembered between calls: each resolution reads
what it needs afresh (a spec from the table, a model file's facts from what a job carries or
from where they were kept), so a changed file, which is a new name, is never answered from
before."""
from xbench.common.errors import known_name
from xbench.common.workload.model import Model
from xbench.common.workload.model_file import (
    DIGEST,
    ModelFile,
    looks_like_file_or_module,
    reference,
)
from xbench.common.workload.models import MODELS, SpecModel


def model_name(given: str) -> str:
    """The name cells give the model a --model value names: one of xbench's models, or a model
    file's `path@digest` where it names a file or module (common.backends.model_files builds
    it), else a clear error with a near miss."""
    if given not in MODELS and looks_like_file_or_module(given):
        return reference(given)
    return known_name(given, MODELS, "model")


def resolve_model(name: str, facts: dict | None = None) -> Model:
    """The model `name` names (a cell's: `model_name`'s, or a --model value): one of MODELS, or
    a model file, its facts those a job carries (`facts`: its `carried()`) or else those kept
    when it was built (NotDescribed where it has not been)."""
    if name in MODELS:
        return MODELS[name]
    return ModelFile.read(name if DIGEST.search(name) else model_name(name), facts)


def own_model(name: str) -> SpecModel | None:
    """xbench's own model `name` names (a cell's or a row's), or None where it names a model
    file: what needs a spec's layers (xbench profile's units, a report's training FLOPs) asks
    this, and reads a model file's rows for what they recorded instead."""
    return MODELS.get(name)
