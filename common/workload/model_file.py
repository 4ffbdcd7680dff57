"""A model a user brings: `--model path/to/file.py` (or `--model package.module`).

The file defines `pytorch()` and/or `keras()`; each returns a dict:

    {"model": the framework's model, its output the logits over the last axis,
     "inputs": (the shape of one sample's input, "float32" or "int64"),
     "classes": the logits' last axis,
     "targets": the shape of one sample's integer targets: () for a class, (T,) for a sequence}

and it may define `data()`, returning {"train": (inputs, targets), "test": (inputs, targets)} as
numpy arrays (`--data model`). xbench trains it with cross-entropy on its logits, as its own
models. Each backend of a framework the file serves runs it; the others' cells are
`unsupported`, with the reason.

What xbench knows of such a model (`ModelFile`, one of the two kinds of model,
common.workload.model: what it takes, and per framework its parameters, tensor shapes and FLOPs)
is found before any cell runs by building it once per framework in a child process
(common.backends.model_files), kept in a file named by the model file's digest, and read from
there (or from what a worker's job carries) each time a model is resolved
(common.workload.resolve). A model is named by its file and that digest
(`/path/vit.py@1a2b3c4d5e6f`): a changed file is a new cell, and a new name.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from xbench.common import cache
from xbench.common.errors import UserError
from xbench.common.json_shapes import BOOL, TEXT, WHOLE, Each, Maybe, Range, shape_problem
from xbench.common.workload.layouts import image_shape
from xbench.common.workload.model import IMAGES, OTHER, TOKENS
from xbench.common.workload.models import INPUT_SHAPES, NUM_CLASSES

DIGEST_CHARACTERS = 12
DIGEST = re.compile(rf"@[0-9a-f]{{{DIGEST_CHARACTERS}}}$")
SHORT_DIGEST = 8  # characters of the digest a table shows
SYNTHETIC_TRAIN, SYNTHETIC_TEST = 8192, 1024  # random samples of a file without data()
FACTS_VERSION = 3  # of what the describers count: a new version counts again
INPUT_DTYPES = ("float32", "int64")
# What a describer answers (common.workload.file_checks.describe) and what is kept of a model
# file (ModelFile's fields), as common.json_shapes checks them: both are read from files.
COUNT, SIZE = Range(WHOLE, 1), Range(WHOLE, 0)
SAMPLES = {"input_dtype": TEXT, "target_shape": [COUNT], "classes": Range(WHOLE, 2),
           "data": Maybe({"train": COUNT, "test": COUNT, "digest": TEXT})}
COUNTED = {"input_shape": [COUNT], "params": COUNT, "tensor_shapes": [[COUNT]],
           "flops_per_sample": SIZE, "activations_per_sample": Maybe(SIZE), "batchnorm": BOOL,
           "counted_by": TEXT}
DESCRIBED = {**SAMPLES, **COUNTED}
KEPT = {**SAMPLES, "path": TEXT, "digest": TEXT, "built": Each(COUNTED),
        "not_served": Each(TEXT)}


class NotDescribed(UserError):
    """No framework has built the model file yet (common.backends.model_files builds it)."""


@dataclass(frozen=True)
class ModelFile:
    """What xbench knows of a model file, found by building it in each framework it serves."""
    path: str
    digest: str
    input_dtype: str                  # "float32" or "int64"
    target_shape: tuple[int, ...]
    classes: int
    data: dict | None                 # data()'s {"train": n, "test": n, "digest": sha256}
    built: dict[str, dict] = field(default_factory=dict)       # framework -> what it counted
    not_served: dict[str, str] = field(default_factory=dict)   # framework -> why not

    dataset = "model"  # the samples it takes are its own: data(), or random ones of its shape

    @classmethod
    def read(cls, name: str, facts: dict | None = None) -> ModelFile:
        """The model file `name` (`path@digest`) names: `facts` where a job carries them, else
        what was kept when it was built; NotDescribed where it has not been."""
        path, digest = split(name)
        if facts is None:
            kept = kept_path(digest)
            if not kept.is_file():
                raise NotDescribed(f"{path.name}: xbench has not built this model yet; "
                                   f"`xbench grid` builds it before any cell runs")
            try:
                facts = json.loads(kept.read_text())
            except (OSError, ValueError):
                facts = None
            problem = facts_problem(facts, KEPT, "kept")
            if problem:  # written whole, so damaged by hand or by the disk: built again
                raise NotDescribed(f"{path.name}: what xbench kept of it in {kept} is damaged "
                                   f"({problem}); `xbench grid` builds it again")
        return cls(**{**facts, "path": str(path), "digest": digest,
                      "target_shape": tuple(facts["target_shape"])})

    @property
    def name(self) -> str:
        return f"{self.path}@{self.digest}"

    def by(self, framework: str | None = None) -> dict:
        """What `framework` counted of the model (its input shape, parameters, tensor shapes,
        FLOPs ...), or the first framework's that built it (PyTorch's before TensorFlow's)."""
        if framework in self.built:
            return self.built[framework]
        return next(iter(self.built.values()))

    @property
    def input_kind(self) -> str:
        if self.input_dtype == "int64":
            return TOKENS
        return IMAGES if len(self.input_shape()) == 3 else OTHER

    @property
    def predicts_sequence(self) -> bool:
        return bool(self.target_shape)

    def input_shape(self, framework: str | None = None) -> tuple[int, ...]:
        return tuple(self.by(framework)["input_shape"])

    def parameters(self, framework: str | None = None) -> int:
        return self.by(framework)["params"]

    def flops_per_sample(self, framework: str | None = None) -> int:
        """What `framework` counted of a forward pass on its built model."""
        return self.by(framework)["flops_per_sample"]

    def has_batchnorm(self, framework: str | None = None) -> bool:
        return self.by(framework)["batchnorm"]

    def tensor_shapes(self, framework: str | None = None) -> list[tuple[int, ...]]:
        return [tuple(shape) for shape in self.by(framework)["tensor_shapes"]]

    def gradient_bytes(self, framework: str | None = None, bytes_per_value: int = 4) -> int:
        return self.parameters(framework) * bytes_per_value

    def output_values(self) -> int:
        return math.prod(self.target_shape) * self.classes

    def activations_per_sample(self) -> int:
        """The values PyTorch's autograd saved for the backward pass (0 where only Keras builds
        it: not counted)."""
        return self.by("torch").get("activations_per_sample") or 0

    def why_not_served(self, framework: str, own_models_only: str = "") -> str | None:
        if own_models_only:
            return own_models_only
        if framework in self.built:
            return None
        return (f"{self.not_served.get(framework, 'not built')}: {framework}'s backends have no "
                f"model to train")

    def check_data(self, data: str, layouts: Mapping[str, str]) -> None:
        """A clear error where it cannot take `data`: its own data() where it has one, random
        samples of its shapes, or MNIST or CIFAR-10 where it takes their images (in each
        framework's layout, `layouts`: channels first in PyTorch, last in Keras) into 10
        classes."""
        name = Path(self.path).name
        instead = "--data model (its data()) or synthetic" if self.data else "--data synthetic"
        if data == "model" and self.data is None:
            raise UserError(f"--data model: {name} defines no data(); use --data synthetic, or a "
                            f"dataset its inputs fit")
        if data in INPUT_SHAPES:
            for framework, built in self.built.items():
                wanted = image_shape(layouts[framework], *INPUT_SHAPES[data])
                if (tuple(built["input_shape"]) != wanted or self.input_dtype != "float32"
                        or self.classes != NUM_CLASSES or self.target_shape):
                    raise UserError(
                        f"--data {data} (the grid's data; mnist unless given): {name}'s "
                        f"{framework} model takes {tuple(built['input_shape'])} "
                        f"{self.input_dtype} into {self.classes} classes; {data} is {wanted} "
                        f"float32 images of {NUM_CLASSES} classes: use {instead}")
        elif data == "shakespeare":
            raise UserError(f"--data shakespeare is for xbench's gpt models; {name} takes its own "
                            f"data() (--data model), random samples (synthetic), mnist or cifar10")

    def network(self, from_spec: Callable, from_file: Callable[[ModelFile], object]) -> object:
        """A framework's network of it: `from_file(self)` (the file's function builds it)."""
        return from_file(self)

    def build(self, function: str):
        """The model `function()` ("pytorch", "keras") of the file returns, the file checked to
        be the one the cell names."""
        return call(import_file(self.name), function, Path(self.path))["model"]

    def carried(self) -> dict | None:
        return dataclasses.asdict(self)

    def files(self) -> tuple[str, ...]:
        return (self.path,)

    def row_record(self) -> dict:
        return {"model_file": {
            "path": self.path, "digest": self.digest, "frameworks": sorted(self.built),
            "counted_by": {f: built["counted_by"] for f, built in self.built.items()},
            "one_trajectory": "not claimed: each framework builds the file's model with its own "
                              "initial weights (Keras on TensorFlow and on JAX draw different "
                              "ones from one seed), so its rows of different frameworks are not "
                              "the same training unless the file sets its weights itself"}}

    def keep(self) -> ModelFile:
        """Written to its digest's file (whole or not at all), where `read` finds it; a clear
        error where that folder cannot be written."""
        cache.keep(kept_path(self.digest), dataclasses.asdict(self), Path(self.path).name)
        return self


def looks_like_file_or_module(name: str) -> bool:
    """Whether a --model value names a file or module rather than one of xbench's models."""
    return name.endswith(".py") or "/" in name or "." in name or bool(DIGEST.search(name))


def reference(name: str) -> str:
    """`path@digest` of the model file `name` names (a path to a .py file, a module, or an
    earlier reference, whose digest is taken afresh): a clear error where there is none."""
    given = DIGEST.sub("", name)
    if given.endswith(".py") or "/" in given:
        path = Path(given).expanduser().resolve()
        if path.suffix != ".py" or not path.is_file():
            raise UserError(f"no model file {given}: --model takes one of xbench's models, a "
                            f"path to a .py file defining pytorch() and/or keras(), or a module")
    else:
        try:
            found = importlib.util.find_spec(given)
        except (ImportError, ValueError) as e:
            found, why = None, f" ({e})"
        else:
            why = ""
        if found is None or not found.origin or not found.origin.endswith(".py"):
            raise UserError(f"no module {given} to import{why}: --model takes one of xbench's "
                            f"models, a path to a .py file, or an importable module")
        path = Path(found.origin).resolve()
    return f"{path}@{file_digest(path)}"


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:DIGEST_CHARACTERS]


def short_name(name: str) -> str:
    """A model as a terminal's table shows it: a model file's `path@digest` as its file name and
    the digest's start (vit.py@1a2b3c4d), so that a long path does not widen every line; xbench's
    own models as they are."""
    if not DIGEST.search(name):
        return name
    path, digest = split(name)
    return f"{path.name}@{digest[:SHORT_DIGEST]}"


def split(reference: str) -> tuple[Path, str]:
    path, digest = reference.rsplit("@", 1)
    return Path(path), digest


def import_file(reference: str) -> ModuleType:
    """The user's file as a module, its digest checked: the file a cell names is the file it
    runs."""
    path, digest = split(reference)
    if file_digest(path) != digest:
        raise UserError(f"{path} changed since the grid was made (digest {file_digest(path)}, "
                        f"the cell's {digest}): run the grid again")
    return module_of(path)


def module_of(path: Path) -> ModuleType:
    """The file at `path`, imported as a module of its own, its folder first on the import path
    (so its own imports of files beside it work in every process); whatever importing it raises
    is a UserError of one line."""
    name = f"xbench_model_file_{path.stem}_{file_digest(path)}"
    if name in sys.modules:
        return sys.modules[name]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # what dataclasses and pickling look a module up in
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[name]
        raise UserError(f"{path.name} has a syntax error at line {e.lineno}: {e.msg}") from None
    except BaseException as e:  # whatever the user's file raises (sys.exit too), in one line
        del sys.modules[name]
        raise UserError(f"{path.name}: importing it raised {type(e).__name__}: {e}") from None
    return module


def call(module: ModuleType, function: str, path: Path):
    """`function()` of the user's file, whatever it raises said in one line."""
    try:
        return getattr(module, function)()
    except BaseException as e:  # the user's code (sys.exit too)
        raise UserError(f"{path.name}: {function}() raised {type(e).__name__}: {e}") from None



def kept_path(digest: str) -> Path:
    """Where a model file's facts are kept (common.cache)."""
    return cache.cache_path("models", f"{digest}-v{FACTS_VERSION}.json")


def facts_problem(facts, shape: dict, what: str) -> str | None:
    """What is wrong with a describer's answer (`shape` DESCRIBED) or what was kept of a model
    file (KEPT), or None: both come from files, and a wrong one must not pass for facts."""
    problem = shape_problem(facts, shape, what)
    if problem:
        return problem
    if facts["input_dtype"] not in INPUT_DTYPES:
        return f"'{what}.input_dtype' is {facts['input_dtype']!r}, not one of {INPUT_DTYPES}"
    if shape is KEPT and (set(facts) != {f.name for f in dataclasses.fields(ModelFile)}
                          or not facts["built"]):
        return f"'{what}' is not what xbench keeps of a model file"
    return None

