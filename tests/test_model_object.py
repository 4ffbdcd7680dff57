"""A model as one object (common.workload.model): both kinds answer the whole interface, the
question "xbench's spec or a user's file?" is asked only in the model's own modules, and a name
is resolved afresh each time (no process-global cache: a changed answer is the new answer).
In-process, no framework: a model file's facts are written by hand where its describers would
keep them."""
import ast
import dataclasses
import inspect
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from xbench.common.workload import model as interface
from xbench.common.workload.model import IMAGES, TOKENS, Model
from xbench.common.workload.model_file import ModelFile, NotDescribed, file_digest, reference
from xbench.common.workload.models import MODELS, SpecModel
from xbench.common.workload.resolve import resolve_model

# The modules that may tell the two kinds apart: the model's own.
MODEL_MODULES = {"common/workload/model.py", "common/workload/models.py",
                 "common/workload/model_file.py", "common/workload/resolve.py",
                 "common/workload/file_checks.py"}
SOURCE = ("cli", "common", "reports", "pt_backend", "tf_backend", "jax_backend", "keras_models")
# What asking "is it a file?" looked like before: a name's test against the specs' table, the
# file-or-module guess, the process's cache, a look at the kind.
OLD_NAMES = {"looks_like_file_or_module", "user_model", "user_models", "UserModel", "_KNOWN",
             "DIGEST"}
KINDS = {"ModelFile", "SpecModel"}


def sources():
    for folder in SOURCE:
        for path in sorted((REPO / folder).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if relative not in MODEL_MODULES:
                yield relative, ast.parse(path.read_text(), relative)


def kind_questions(tree) -> list[str]:
    """Where a module asks which kind a model is, each as 'line: what'."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare)
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                and any(isinstance(c, ast.Name) and c.id == "MODELS" for c in node.comparators)):
            found.append(f"{node.lineno}: ... in MODELS")
        elif isinstance(node, ast.Name) and node.id in OLD_NAMES:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in OLD_NAMES:
            found.append(f"{node.lineno}: import {node.name}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "isinstance" and len(node.args) == 2
              and {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & KINDS):
            found.append(f"{node.lineno}: isinstance(..., a kind of model)")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "endswith" and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value == ".py"):
            found.append(f"{node.lineno}: .endswith('.py')")
    return found


def test_only_the_model_modules_ask_whether_a_model_is_a_file():
    asked = {path: found for path, tree in sources() if (found := kind_questions(tree))}
    assert asked == {}


def test_the_check_sees_the_old_idioms():
    """The check above finds each way the question used to be asked."""
    old = ast.parse("if name not in MODELS and user_models.looks_like_file_or_module(name):\n"
                    "    user = user_model(name)\n"
                    "isinstance(model, ModelFile)\n"
                    "name.endswith('.py')\n")
    assert len(kind_questions(old)) == 5


def members(kind) -> set[str]:
    return {name for name in dir(kind) if not name.startswith("_")}


@pytest.mark.parametrize("kind", [SpecModel, ModelFile])
def test_both_kinds_answer_the_whole_interface(kind):
    wanted = {name for name, _ in inspect.getmembers(Model) if not name.startswith("_")}
    wanted |= set(Model.__annotations__)
    fields = {f.name for f in dataclasses.fields(kind)}
    assert wanted - members(kind) - fields == set()


def facts(params: int, shape=(1, 28, 28)) -> dict:
    """What the describers would have kept of a one-framework model file."""
    counted = {"input_shape": list(shape), "params": params, "tensor_shapes": [[params]],
               "flops_per_sample": 2 * params, "activations_per_sample": 10, "batchnorm": False,
               "counted_by": "by hand"}
    return {"input_dtype": "float32", "target_shape": [], "classes": 10, "data": None,
            "built": {"torch": counted}, "not_served": {"tensorflow": "defines no keras()"}}


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XBENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "mine.py"
    path.write_text("def pytorch(): ...\n")
    return path


def keep(path: Path, params: int) -> str:
    """The file's facts kept where `xbench grid` keeps them; its name."""
    name = reference(str(path))
    ModelFile.read(name, facts(params)).keep()
    return name


def test_a_model_file_answers_from_what_its_framework_counted(model_file):
    model = resolve_model(keep(model_file, 100))
    assert (model.parameters(), model.flops_per_sample("torch"), model.gradient_bytes()) \
        == (100, 200, 400)
    assert model.input_kind == IMAGES and model.input_shape() == (1, 28, 28)
    assert model.why_not_served("torch") is None
    assert model.why_not_served("tensorflow") == ("defines no keras(): tensorflow's backends "
                                                  "have no model to train")
    assert model.why_not_served("jax").startswith("not built: ")
    assert model.why_not_served("torch", "Flax only") == "Flax only"  # a backend of its own
    assert model.name == f"{model_file.resolve()}@{file_digest(model_file)}"


def test_a_spec_model_is_served_everywhere_and_counts_from_its_layers():
    small, gpt = resolve_model("small"), resolve_model("gpt-tiny")
    assert small is MODELS["small"] and small.input_kind == IMAGES and gpt.input_kind == TOKENS
    assert small.parameters("tensorflow") == small.parameters("torch") == 402_442
    assert all(small.why_not_served(f) is None for f in ("torch", "tensorflow", "jax"))
    assert small.why_not_served("jax", "Flax only") is None


def test_resolving_twice_reads_afresh(model_file):
    """No cache between two resolutions: facts kept anew are the next answer, and a changed
    file is a new name whose own facts are read, the old name keeping its own."""
    name = keep(model_file, 100)
    assert resolve_model(name).parameters() == 100
    keep(model_file, 150)  # the same file described again (a new FACTS_VERSION, say)
    assert resolve_model(name).parameters() == 150
    model_file.write_text("def pytorch(): ...  # changed\n")
    with pytest.raises(NotDescribed):
        resolve_model(reference(str(model_file)))
    changed = keep(model_file, 7)
    assert changed != name
    assert resolve_model(changed).parameters() == 7 and resolve_model(name).parameters() == 150


def test_what_a_job_carries_is_what_its_worker_resolves(model_file):
    """A worker resolves the model from its job's facts, not from what this process saw."""
    name = keep(model_file, 100)
    carried = resolve_model(name).carried()
    keep(model_file, 150)
    assert resolve_model(name, carried).parameters() == 100
    assert resolve_model(name).parameters() == 150
    assert resolve_model("small").carried() is None


def test_no_module_of_the_model_keeps_models_between_calls(model_file):
    resolve_model(keep(model_file, 100))
    for module in [m for n, m in sys.modules.items() if n.startswith("xbench.common.workload")]:
        for value in vars(module).values():
            if isinstance(value, dict):
                assert not any(isinstance(v, ModelFile) for v in value.values()), module
    assert interface.__name__ == "xbench.common.workload.model"
