"""Build a user's model file once in each framework, before any cell runs
(common.workload.model_file): each framework's describer (its traits name it) in a child process,
within a time limit, says what it takes and what it counted; a wrong file is one line."""
from __future__ import annotations

import importlib.util
import math
import signal
import sys
from pathlib import Path

from xbench.common.backends.frameworks import FRAMEWORKS, Framework
from xbench.common.cache import cache_written
from xbench.common.children import ask
from xbench.common.errors import UserError
from xbench.common.workload.model import Model
from xbench.common.workload.model_file import (
    DESCRIBED,
    ModelFile,
    NotDescribed,
    facts_problem,
    kept_path,
    split,
)
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
    with cache_written(path.name):  # before any describer: what it found could not be kept
        kept_path(digest).parent.mkdir(parents=True, exist_ok=True)
    built, not_served, takes, absent = {}, {}, None, []
    for framework in FRAMEWORKS:
        if importlib.util.find_spec(framework.module) is None:
            not_served[framework.name] = f"{framework.name} is not installed here"
            absent.append(framework.name)
            continue
        said = describer_answer(framework, path)
        if "not_served" in said:
            not_served[framework.name] = said["not_served"]
            continue
        found = said["facts"]
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


def describer_answer(framework: Framework, path: Path) -> dict:
    """What `framework`'s describer, a process of its own, answered of the file at `path`:
    {"facts": what it found} or {"not_served": why}. Whatever else happens (the file's code
    ends the process, prints, leaves a process running, takes too long) is one line naming the
    file."""
    building = f"{path.name}: building its {framework.model_function}() model"
    ended = ask([sys.executable, "-m", framework.describer, str(path)], DESCRIBE_SECONDS)
    said = ended.answer if isinstance(ended.answer, dict) else {}
    if ended.returncode is None:
        raise UserError(f"{building} took more than {DESCRIBE_SECONDS} s")
    if isinstance(said.get("refused"), str):
        raise UserError(one_line(said["refused"]))
    if isinstance(said.get("not_served"), str):
        return {"not_served": one_line(said["not_served"])}
    how = (f"was killed by signal {-ended.returncode} ({signal.strsignal(-ended.returncode)})"
           if ended.returncode < 0 else f"ended with exit code {ended.returncode}")
    if "facts" not in said or ended.returncode != 0:
        last = f"; its last words: {one_line(ended.last_words)}" if ended.last_words else ""
        raise UserError(f"{building} in {framework.title}, its process "
                        + (f"{how} after it answered (an atexit hook or a thread of the file?)"
                           if "facts" in said else f"{how} without an answer{last}"))
    problem = facts_problem(said["facts"], DESCRIBED, "facts")
    if problem:
        raise UserError(f"{building} in {framework.title}: its describer answered what xbench "
                        f"cannot read ({problem})")
    return said


def one_line(text: str) -> str:
    """A message of the user's code in one line (an exception's text may have several)."""
    return " ".join(text.split())
