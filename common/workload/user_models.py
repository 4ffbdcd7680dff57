"""A model a user brings: `--model path/to/file.py` (or `--model package.module`).

The file defines `pytorch()` and/or `keras()`; each returns a dict:

    {"model": the framework's model, its output the logits over the last axis,
     "inputs": (the shape of one sample's input, "float32" or "int64"),
     "classes": the logits' last axis,
     "targets": the shape of one sample's integer targets: () for a class, (T,) for a sequence}

and it may define `data()`, returning {"train": (inputs, targets), "test": (inputs, targets)} as
numpy arrays (`--data model`). xbench trains it with cross-entropy on its logits and Adam, as its
own models. Each backend of a framework the file serves runs it; the others' cells are
`unsupported`, with the reason.

Framework-free: what xbench needs to know of the model (parameters, FLOPs, tensor shapes, what it
takes) is found by building it once per framework in a child process
(`xbench.pt_backend.user_model`, `xbench.tf_backend.user_model`) within a time limit, before any
cell runs, and kept in a file named by the model file's digest, where the runner and every worker
read it. A model is named by its file and that digest (`/path/vit.py@1a2b3c4d5e6f`): a changed file
is a new cell.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

from xbench.common.errors import UserError

DIGEST_CHARACTERS = 12
DESCRIBE_SECONDS = 300  # one framework's construction of the model, in its child process
# Each framework's describer: `python -m MODULE FILE` prints the model's facts as JSON; exit 2
# with one line on stderr where the file is wrong, NOT_SERVED where it has no such function.
DESCRIBERS = {"torch": ("xbench.pt_backend.user_model", "pytorch"),
              "tensorflow": ("xbench.tf_backend.user_model", "keras")}
NOT_SERVED = 3
SYNTHETIC_TRAIN, SYNTHETIC_TEST = 8192, 1024  # random samples of a file without data()
FACTS_VERSION = 1  # of the facts kept beside the digest: a new xbench counts again


@dataclass(frozen=True)
class UserModel:
    """What xbench knows of a model file, found by building it in each framework it serves."""
    path: str
    digest: str
    input_dtype: str                  # "float32" or "int64"
    target_shape: tuple[int, ...]
    classes: int
    data: dict[str, int] | None       # {"train": n, "test": n} of data(), where it has one
    frameworks: dict[str, dict] = field(default_factory=dict)  # what each framework counted
    not_served: dict[str, str] = field(default_factory=dict)   # framework -> why not

    @property
    def reference(self) -> str:
        return f"{self.path}@{self.digest}"

    def counted(self, framework: str | None = None) -> dict:
        """`framework`'s counts (parameters, FLOPs, tensor shapes ...), or the first framework's
        that serves the file (PyTorch's before TensorFlow's)."""
        if framework in self.frameworks:
            return self.frameworks[framework]
        return next(iter(self.frameworks.values()))


def looks_like_file_or_module(name: str) -> bool:
    """Whether a --model value names a file or module rather than one of xbench's models."""
    return name.endswith(".py") or "/" in name or "@" in name or "." in name


def reference(name: str) -> str:
    """`path@digest` of the model file `name` names (a path to a .py file, a module, or an
    earlier reference, whose digest is taken afresh): a clear error where there is none."""
    given = name.rsplit("@", 1)[0] if "@" in name else name
    if given.endswith(".py") or "/" in given:
        path = Path(given).expanduser().resolve()
        if not path.is_file():
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
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:DIGEST_CHARACTERS]
    return f"{path}@{digest}"


def split(reference: str) -> tuple[Path, str]:
    path, digest = reference.rsplit("@", 1)
    return Path(path), digest


def import_file(reference: str) -> ModuleType:
    """The user's file as a module (its digest checked: the file a cell names is the file it
    runs)."""
    path, digest = split(reference)
    found = hashlib.sha256(path.read_bytes()).hexdigest()[:DIGEST_CHARACTERS]
    if found != digest:
        raise UserError(f"{path} changed since the grid was made (digest {found}, the cell's "
                        f"{digest}): run the grid again")
    return module_of(path)


def module_of(path: Path) -> ModuleType:
    """The file at `path`, imported as a module of its own (a UserError, one line, where
    importing it fails)."""
    spec = importlib.util.spec_from_file_location(f"xbench_user_model_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise UserError(f"{path.name} has a syntax error at line {e.lineno}: {e.msg}") from None
    except Exception as e:  # whatever the user's file raises, said in one line
        raise UserError(f"{path.name}: importing it raised {type(e).__name__}: {e}") from None
    return module


def call(module: ModuleType, function: str, path: Path):
    """`function()` of the user's file, whatever it raises said in one line."""
    try:
        return getattr(module, function)()
    except Exception as e:  # the user's code
        raise UserError(f"{path.name}: {function}() raised {type(e).__name__}: {e}") from None


def run_describer(describe_model) -> None:
    """A describer's main: `describe_model(module, path)` -> its facts as JSON on stdout; exit 2
    with the UserError's line, NOT_SERVED where the file has no function for this framework."""
    path = Path(sys.argv[1])
    try:
        print(json.dumps(describe_model(module_of(path), path)))
    except UserError as e:
        print(e, file=sys.stderr)
        sys.exit(NOT_SERVED if isinstance(e, NotServed) else 2)


class NotServed(UserError):
    """The file has no function for this framework."""


def cache_folder() -> Path:
    return Path(os.environ.get("XBENCH_CACHE", Path.home() / ".cache" / "xbench")) / "models"


@cache
def facts(reference: str) -> UserModel:
    """What xbench knows of the model file: read from its digest's file, or found by building it
    in each framework (a UserError, one line, where the file is wrong)."""
    path, digest = split(reference)
    kept = cache_folder() / f"{digest}-v{FACTS_VERSION}.json"
    if kept.is_file():
        return from_json(json.loads(kept.read_text()))
    found = describe(path, digest)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f"{kept.name}.{os.getpid()}.part")
    partial.write_text(json.dumps(to_json(found)))
    partial.replace(kept)
    return found


def describe(path: Path, digest: str) -> UserModel:
    """Build the model in each framework's child process and put together what they found."""
    counted, not_served, taken = {}, {}, None
    for framework, (module, function) in DESCRIBERS.items():
        try:
            done = subprocess.run([sys.executable, "-m", module, str(path)], capture_output=True,
                                  text=True, timeout=DESCRIBE_SECONDS)
        except subprocess.TimeoutExpired:
            raise UserError(f"{path.name}: building its {function}() model took more than "
                            f"{DESCRIBE_SECONDS} s") from None
        said = done.stderr.strip().splitlines()
        if done.returncode == NOT_SERVED:
            not_served[framework] = said[-1] if said else f"{path.name} defines no {function}()"
            continue
        if done.returncode != 0:
            raise UserError(said[-1] if said else f"{path.name}: {function}() failed "
                            f"(exit {done.returncode})")
        found = json.loads(done.stdout.strip().splitlines()[-1])
        shape = {k: found.pop(k) for k in ("input_dtype", "target_shape", "classes", "data")}
        shape["values"] = math.prod(found["input_shape"])  # Keras' images are channels last
        if taken is not None and shape != taken:
            raise UserError(f"{path.name}: pytorch() and keras() describe different samples "
                            f"({taken} and {shape}); both must take the same inputs and targets")
        taken, counted[framework] = shape, found
    if not counted:
        raise UserError(f"{path.name} defines neither pytorch() nor keras() (each returns the "
                        f"model and what it takes: see docs/your-model.md)")
    return UserModel(path=str(path), digest=digest, frameworks=counted, not_served=not_served,
                     input_dtype=taken["input_dtype"], target_shape=tuple(taken["target_shape"]),
                     classes=taken["classes"], data=taken["data"])


def to_json(model: UserModel) -> dict:
    return dataclasses.asdict(model)


def from_json(values: dict) -> UserModel:
    return UserModel(**{**values, "target_shape": tuple(values["target_shape"])})


def sample_check(spec: dict, function: str) -> dict:
    """What a pytorch() or keras() dict says of the samples, checked (framework-free, so both
    describers check alike): a UserError naming what is wrong."""
    if not isinstance(spec, dict):
        raise UserError(f"{function}() returned {type(spec).__name__}, not a dict with model, "
                        f"inputs, classes and targets")
    missing = [k for k in ("model", "inputs", "classes") if k not in spec]
    if missing:
        raise UserError(f"{function}() returned no {', '.join(missing)} (it returns model, "
                        f"inputs, classes and targets)")
    inputs = spec["inputs"]
    if (not isinstance(inputs, (tuple, list)) or len(inputs) != 2
            or not _is_shape(inputs[0]) or inputs[1] not in ("float32", "int64")):
        raise UserError(f"{function}()'s inputs is {inputs!r}, not (shape of one sample, "
                        f"'float32' or 'int64')")
    targets = spec.get("targets", ())
    if not _is_shape(targets):
        raise UserError(f"{function}()'s targets is {targets!r}, not the shape of one sample's "
                        f"targets (() for a class)")
    classes = spec["classes"]
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise UserError(f"{function}()'s classes is {classes!r}, not a whole number of 2 or more")
    return {"input_shape": list(inputs[0]), "input_dtype": inputs[1],
            "target_shape": list(targets), "classes": classes}


def data_check(arrays, shape: dict, name: str) -> dict[str, int]:
    """data()'s arrays against what the model takes: {"train": n, "test": n}, or a UserError.
    `arrays`: numpy arrays (this module imports no framework; numpy is not one)."""
    import numpy as np
    if not isinstance(arrays, dict) or set(arrays) != {"train", "test"}:
        raise UserError(f"{name}: data() returned {type(arrays).__name__}, not "
                        f"{{'train': (inputs, targets), 'test': (inputs, targets)}}")
    sizes = {}
    for part, pair in arrays.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2
                and all(isinstance(a, np.ndarray) for a in pair)):
            raise UserError(f"{name}: data()['{part}'] is not a pair of numpy arrays (inputs, "
                            f"targets)")
        inputs, targets = pair
        if (inputs.shape[1:] != tuple(shape["input_shape"])
                or targets.shape[1:] != tuple(shape["target_shape"])
                or len(inputs) != len(targets) or not len(inputs)):
            raise UserError(f"{name}: data()['{part}'] holds inputs {inputs.shape} and targets "
                            f"{targets.shape}; the model takes samples of "
                            f"{tuple(shape['input_shape'])} and targets of "
                            f"{tuple(shape['target_shape'])}, as many of each")
        if not np.issubdtype(targets.dtype, np.integer) or targets.min() < 0 \
                or targets.max() >= shape["classes"]:
            raise UserError(f"{name}: data()['{part}']'s targets must be whole numbers from 0 to "
                            f"{shape['classes'] - 1} (its classes)")
        sizes[part] = len(inputs)
    return sizes


def _is_shape(value) -> bool:
    return (isinstance(value, (tuple, list))
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value))
