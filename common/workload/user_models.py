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

What xbench knows of such a model (`UserModel`: what it takes, and per framework its parameters,
tensor shapes and FLOPs) is found before any cell runs by building it once per framework in a
child process (common.backends.model_files), and then read here: from this process's memory, or
from the file named by the model file's digest. A model is named by its file and that digest
(`/path/vit.py@1a2b3c4d5e6f`): a changed file is a new cell.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from xbench.common.errors import UserError

DIGEST_CHARACTERS = 12
DIGEST = re.compile(rf"@[0-9a-f]{{{DIGEST_CHARACTERS}}}$")
SYNTHETIC_TRAIN, SYNTHETIC_TEST = 8192, 1024  # random samples of a file without data()
FACTS_VERSION = 2  # of what the describers count: a new version counts again
_KNOWN: dict[str, UserModel] = {}  # reference -> what this process knows of it


@dataclass(frozen=True)
class UserModel:
    """What xbench knows of a model file, found by building it in each framework it serves."""
    path: str
    digest: str
    input_dtype: str                  # "float32" or "int64"
    target_shape: tuple[int, ...]
    classes: int
    data: dict | None                 # data()'s {"train": n, "test": n, "digest": sha256}
    built: dict[str, dict] = field(default_factory=dict)       # framework -> what it counted
    not_served: dict[str, str] = field(default_factory=dict)   # framework -> why not

    def by(self, framework: str | None = None) -> dict:
        """What `framework` counted of the model (its input shape, parameters, tensor shapes,
        FLOPs ...), or the first framework's that built it (PyTorch's before TensorFlow's)."""
        if framework in self.built:
            return self.built[framework]
        return next(iter(self.built.values()))


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


# --- what xbench knows of a model file -------------------------------------------------------


def facts(reference: str) -> UserModel:
    """What xbench knows of the model file: in this process's memory (a worker's came with its
    job), else in its digest's file. Described before any cell runs
    (common.backends.model_files)."""
    if reference in _KNOWN:
        return _KNOWN[reference]
    path, digest = split(reference)
    kept = kept_path(digest)
    if not kept.is_file():
        raise UserError(f"{path.name}: xbench has not built this model yet; `xbench grid` "
                        f"builds it before any cell runs")
    return remember(from_json({**json.loads(kept.read_text()), "path": str(path)}))


def remember(model: UserModel) -> UserModel:
    _KNOWN[f"{model.path}@{model.digest}"] = model
    return model


def keep(model: UserModel) -> UserModel:
    """Remembered here and written to its digest's file (whole or not at all)."""
    kept = kept_path(model.digest)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f"{kept.name}.{os.getpid()}.part")
    partial.write_text(json.dumps(to_json(model)))
    partial.replace(kept)
    return remember(model)


def kept_path(digest: str) -> Path:
    """Where a model file's facts are kept: $XBENCH_CACHE/models, else ~/.cache/xbench/models."""
    root = Path(os.environ.get("XBENCH_CACHE", Path.home() / ".cache" / "xbench"))
    return root.resolve() / "models" / f"{digest}-v{FACTS_VERSION}.json"


def to_json(model: UserModel) -> dict:
    return dataclasses.asdict(model)


def from_json(values: dict) -> UserModel:
    return UserModel(**{**values, "target_shape": tuple(values["target_shape"])})


# --- what the describers check alike --------------------------------------------------------


def what_it_takes(spec, function: str) -> dict:
    """What a pytorch() or keras() dict says of the samples, checked: a UserError naming what
    is wrong."""
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


def data_check(arrays, takes: dict, name: str) -> dict:
    """data()'s arrays against what the model takes (`what_it_takes`): {"train": n, "test": n,
    "digest": of the arrays, so that every rank can check it trains on what was checked}."""
    if not isinstance(arrays, dict) or set(arrays) != {"train", "test"}:
        raise UserError(f"{name}: data() returned {type(arrays).__name__}, not "
                        f"{{'train': (inputs, targets), 'test': (inputs, targets)}}")
    sizes, digest = {}, hashlib.sha256()
    for part in ("train", "test"):
        pair = arrays[part]
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2
                and all(isinstance(a, np.ndarray) for a in pair)):
            raise UserError(f"{name}: data()['{part}'] is not a pair of numpy arrays (inputs, "
                            f"targets)")
        inputs, targets = pair
        if (inputs.shape[1:] != tuple(takes["input_shape"])
                or targets.shape[1:] != tuple(takes["target_shape"])
                or len(inputs) != len(targets) or not len(inputs)):
            raise UserError(f"{name}: data()['{part}'] holds inputs {inputs.shape} and targets "
                            f"{targets.shape}; the model takes samples of "
                            f"{tuple(takes['input_shape'])} and targets of "
                            f"{tuple(takes['target_shape'])}, as many of each")
        wanted = np.integer if takes["input_dtype"] == "int64" else np.number
        if not np.issubdtype(inputs.dtype, wanted) or np.issubdtype(inputs.dtype, np.bool_):
            raise UserError(f"{name}: data()['{part}']'s inputs are {inputs.dtype}; the model "
                            f"takes {takes['input_dtype']}")
        if (not np.issubdtype(targets.dtype, np.integer) or targets.min() < 0
                or targets.max() >= takes["classes"]):
            raise UserError(f"{name}: data()['{part}']'s targets must be whole numbers from 0 to "
                            f"{takes['classes'] - 1} (its classes)")
        sizes[part] = len(inputs)
        for array in as_trained(inputs, targets, takes["input_dtype"]):
            digest.update(array.tobytes())
    return {**sizes, "digest": digest.hexdigest()}


def as_trained(inputs: np.ndarray, targets: np.ndarray, input_dtype: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """data()'s arrays in the types the model takes: inputs float32 (or int64), targets int64."""
    return (np.ascontiguousarray(inputs, dtype=input_dtype),
            np.ascontiguousarray(targets, dtype=np.int64))


def run_describer(describe_model) -> None:
    """A describer's main (`python -m DESCRIBER FILE`): `describe_model(module, path)`'s facts as
    JSON on stdout; exit 2 with one line where the file is wrong, NOT_SERVED where it has no
    function for this framework."""
    path = Path(sys.argv[1])
    try:
        print(json.dumps(describe_model(module_of(path), path)))
    except NotServed as e:
        print(e, file=sys.stderr)
        sys.exit(NOT_SERVED)
    except UserError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    except BaseException as e:  # the user's model failed in a way no check foresaw
        print(f"{path.name}: building or running its model raised {type(e).__name__}: {e}",
              file=sys.stderr)
        sys.exit(2)


NOT_SERVED = 3


class NotServed(UserError):
    """The file has no function for this framework."""


def _is_shape(value) -> bool:
    return (isinstance(value, (tuple, list))
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value))
