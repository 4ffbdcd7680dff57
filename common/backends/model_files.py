"""Build a user's model file once in each framework, before any cell runs
(common.workload.user_models): each framework's describer (its traits name it) in a child process,
within a time limit, says what it takes and what it counted; a wrong file is one line."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

from xbench.common.backends.traits import FRAMEWORKS
from xbench.common.errors import UserError
from xbench.common.workload import user_models
from xbench.common.workload.user_models import NOT_SERVED, UserModel

DESCRIBE_SECONDS = 300  # one framework's construction of the model, in its child process


def described(reference: str) -> UserModel:
    """What xbench knows of the model file `reference` names: kept from before, or found now by
    building it in each framework that is installed here."""
    try:
        return user_models.facts(reference)
    except UserError:
        pass
    path, digest = user_models.split(reference)
    built, not_served, takes, absent = {}, {}, None, []
    for framework in FRAMEWORKS:
        function = framework.model_function
        if function is None:
            not_served[framework.name] = (f"{framework.name}'s backends train only xbench's own "
                                          f"models")
            continue
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
    return user_models.keep(UserModel(
        path=str(path), digest=digest, input_dtype=takes["input_dtype"],
        target_shape=tuple(takes["target_shape"]), classes=takes["classes"], data=takes["data"],
        built=built, not_served=not_served))


def model_file_of(model: str) -> dict | None:
    """A job's record of its model file (what the worker remembers instead of building it
    again), or None for xbench's own models."""
    if not user_models.looks_like_file_or_module(model):
        return None
    return user_models.to_json(user_models.facts(model))

