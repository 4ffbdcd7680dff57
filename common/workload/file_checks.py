"""What a model file's functions must return, checked alike by each framework's describer
(`python -m DESCRIBER FILE`, which its traits name: pt_backend.user_model, tf_backend.user_model,
jax_backend.user_model) and by a worker reading the file's data() (common.workload.data): the
flow a describer shares (`run_describer`), the framework's part (building and counting the
model) passed in."""
import hashlib
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from xbench.common.children import answer
from xbench.common.errors import UserError
from xbench.common.workload.model_file import call, module_of


def run_describer(function: str, seed: Callable[[], None],
                  count: Callable[[object, dict, Path], dict], runtime: str = "") -> None:
    """A describer's main: the file `sys.argv[1]`'s `function()` ("pytorch", "keras") checked,
    called after `seed()`, its model counted by `count(model, what it takes, path)`, and its
    data() checked. Its answer (common.running.child_answer, a channel the file's own prints
    cannot reach): {"facts": ...}, {"refused": one line} where the file is wrong, or
    {"not_served": why} where it has no `function`. `runtime`: where given (Keras' JAX backend,
    whose describer runs the keras() TensorFlow's took first), a file that fails here is not
    served on that runtime, said in one line, rather than stopping the grid."""
    path = Path(sys.argv[1])
    try:
        outcome = {"facts": describe(module_of(path), path, function, seed, count)}
    except NotServed as e:
        outcome = {"not_served": str(e)}
    except UserError as e:
        outcome = {"refused": str(e)}
    except BaseException as e:  # the user's model failed in a way no check foresaw
        outcome = {"refused": f"{path.name}: building or running its model raised "
                              f"{type(e).__name__}: {e}"}
    if "refused" in outcome and runtime:
        outcome = {"not_served": f"{outcome['refused'].splitlines()[0]} (on {runtime})"}
    answer(outcome)


def describe(module: ModuleType, path: Path, function: str, seed: Callable[[], None],
             count: Callable[[object, dict, Path], dict]) -> dict:
    """What the file's `function()` takes, what `count` counted of its model, and the sizes of
    its data()'s arrays (None without one)."""
    if not callable(getattr(module, function, None)):
        raise NotServed(f"{path.name} defines no {function}()")
    seed()
    spec = call(module, function, path)
    takes = what_it_takes(spec, function)
    counted = count(spec["model"], takes, path)
    sizes = data_check(seeded_data(module, path), takes, path.name) \
        if callable(getattr(module, "data", None)) else None
    return {**takes, "data": sizes, **counted}


def seeded_data(module: ModuleType, path: Path):
    """The file's data(), called as every process that calls it does (the describers, each
    rank): numpy's global generator and Python's `random` seeded at DATA_SEED first, so a
    data() that draws from them returns the same arrays each time, whatever ran before."""
    random.seed(DATA_SEED)
    np.random.seed(DATA_SEED)
    return call(module, "data", path)


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
        # complex values are refused: float32 would keep their real part and drop the rest
        wanted = (np.integer,) if takes["input_dtype"] == "int64" else (np.integer, np.floating)
        if not any(np.issubdtype(inputs.dtype, kind) for kind in wanted):
            raise UserError(f"{name}: data()['{part}']'s inputs are {inputs.dtype}; the model "
                            f"takes {takes['input_dtype']}")
        if (not np.issubdtype(targets.dtype, np.integer) or targets.min() < 0
                or targets.max() >= takes["classes"]):
            raise UserError(f"{name}: data()['{part}']'s targets must be whole numbers from 0 to "
                            f"{takes['classes'] - 1} (its classes)")
        sizes[part] = len(inputs)
        trained = as_trained(inputs, targets, takes["input_dtype"])
        if not np.isfinite(trained[0]).all():
            raise UserError(f"{name}: data()['{part}']'s inputs hold values that are not finite "
                            f"as {takes['input_dtype']} (NaN, inf, or beyond float32's 3.4e38): "
                            f"every loss of a batch holding one would be too")
        for array in trained:
            digest.update(array.tobytes())
    return {**sizes, "digest": digest.hexdigest()}


def as_trained(inputs: np.ndarray, targets: np.ndarray, input_dtype: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """data()'s arrays in the types the model takes: inputs float32 (or int64), targets int64."""
    return (np.ascontiguousarray(inputs, dtype=input_dtype),
            np.ascontiguousarray(targets, dtype=np.int64))


DATA_SEED = 0  # data()'s arrays are one set for every cell and rank, whatever the cell's seed


class NotServed(UserError):
    """The file has no function for this framework."""


def _is_shape(value) -> bool:
    return (isinstance(value, (tuple, list))
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value))
