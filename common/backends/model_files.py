"""Build a user's model file once in each framework, before any cell runs
(common.workload.model_file): each framework's describer (its traits name it) in a child process,
within a time limit, says what it takes and what it counted; a wrong file is one line."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

from xbench.common.backends.frameworks import FRAMEWORKS
from xbench.common.errors import UserError
from xbench.common.workload.file_checks import NOT_SERVED
from xbench.common.workload.model import Model
from xbench.common.workload.model_file import ModelFile, NotDescribed, split
from xbench.common.workload.resolve import model_name, resolve_model

DESCRIBE_SECONDS = 300  # one framework's construction of the model, in its child process
# How each framework's loop lays out an image sample, what a model file's images must match.
IMAGE_LAYOUTS = {framework.name: framework.image_layout for framework in FRAMEWORKS}


def described(given: str) -> Model:
    """The model a --model value names; a model file's facts kept from before, or found now by
    building it in each framework that is installed here."""
    name = model_name(given)
    try:
        return resolve_model(name)
    except NotDescribed:
        return build(name)


def check_fits(data: str, name: str) -> None:
    """A clear error where the model `name` cannot take the samples of `data` (a model file's
    images as each framework lays them out)."""
    resolve_model(name).check_data(data, IMAGE_LAYOUTS)


def build(reference: str) -> ModelFile:
    """The model file `reference` names, built in each framework installed here, and kept."""
    path, digest = split(reference)
    built, not_served, takes, absent = {}, {}, None, []
    for framework in FRAMEWORKS:
        function = framework.model_function
        if importlib.util.find_spec(framework.module) is None:
            not_served[framework.name] = f"{framework.name} is not installed here"
            absent.append(framework.name)
            continue
        try:
            done = subprocess.run([sys.executable, "-m", framework.describer, str(path)],
                                  capture_output=True, text=True, timeout=DESCRIBE_SECONDS)
        except subprocess.TimeoutExpired:
            raise UserError(f"{path.name}: building its {function}() model took more than "
                            f"{DESCRIBE_SECONDS} s") from None
        said = done.stderr.strip().splitlines()
        if done.returncode == NOT_SERVED:
            not_served[framework.name] = said[-1]
            continue
        printed = done.stdout.strip().splitlines()
        if done.returncode != 0 or not printed:
            raise UserError(said[-1] if said else f"{path.name}: building its {function}() "
                            f"model ended with exit code {done.returncode} and said nothing")
        found = json.loads(printed[-1])
        sample = {key: found.pop(key) for key in ("input_dtype", "target_shape", "classes",
                                                  "data")}
        # the same samples, each framework's image layout aside (Keras' channels last)
        sample["values"] = math.prod(found["input_shape"])
        if takes is not None and sample != takes:
            raise UserError(f"{path.name}: pytorch() and keras() take different samples "
                            f"({takes} and {sample}); both must take the same inputs and "
                            f"targets")
        takes, built[framework.name] = sample, found
    if not built and not absent:
        raise UserError(f"{path.name} defines neither pytorch() nor keras() (each returns the "
                        f"model and what it takes: see docs/your-model.md)")
    if not built:
        raise UserError(f"{path.name}: no framework here can build it "
                        f"({'; '.join(not_served.values())})")
    return ModelFile(
        path=str(path), digest=digest, input_dtype=takes["input_dtype"],
        target_shape=tuple(takes["target_shape"]), classes=takes["classes"], data=takes["data"],
        built=built, not_served=not_served).keep()

