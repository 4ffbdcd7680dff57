"""The house's shape: imports run one way (cli -> reports -> common <- backends), common/ has no
import cycle, everything is imported under the one installed namespace `xbench`, a plain wheel
installs and runs in a fresh environment, and the source keeps its houses of a size, one name per
thing: no file over 400 lines, no function over 60, no class name defined twice."""
import ast
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGES = {"cli": "xbench.cli", "common": "xbench.common", "pt_backend": "xbench.pt_backend",
            "tf_backend": "xbench.tf_backend", "jax_backend": "xbench.jax_backend",
            "keras_models": "xbench.keras_models", "reports": "xbench.reports"}
# What each package may import of the others besides itself (experiments: the grid files).
# Keras (keras_models) is the framework two backends' packages share: TensorFlow's and keras-jax.
ALLOWED = {"common": {"experiments"}, "pt_backend": {"common"},
           "tf_backend": {"common", "keras_models"}, "jax_backend": {"common", "keras_models"},
           "keras_models": {"common"}, "reports": {"common"}, "cli": {"common", "reports"}}
# A module named as text (the registry, `python -m ...`) under an old top-level name.
OLD_NAME = re.compile(
    r"""["'](?:common|reports|pt_backend|tf_backend|jax_backend|keras_models)\.[a-z_]+""")


def imports(path: Path, top_level_only: bool) -> list[str]:
    """The modules a file imports (with `top_level_only`, not those inside functions)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # and what `if TYPE_CHECKING:` blocks import at the top
        nodes = [*nodes, *(n for block in tree.body if isinstance(block, ast.If)
                           for n in block.body)]
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return found


def source_files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


# common/'s rooms, lowest first: each may import the rooms before it (and common's own modules,
# errors and machine); a room's type annotations may name any room (under TYPE_CHECKING).
ROOMS = ["workload", "backends", "grids", "measuring", "results", "running"]


def room_of(name: str) -> str | None:
    """The room of common/ that `xbench.common.ROOM[.x]` names (None: common's own modules)."""
    parts = name.split(".")
    return parts[2] if parts[:2] == ["xbench", "common"] and len(parts) > 2 \
        and parts[2] in ROOMS else None


def runtime_imports(path: Path) -> list[str]:
    """The modules a file imports when it runs (not those only a type checker sees)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in tree.body if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_common_rooms_import_only_downwards(room):
    """A room of common/ imports only the rooms below it, and says so in its docstring."""
    folder = REPO / "common" / room
    allowed = set(ROOMS[:ROOMS.index(room)])
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    assert doc and "May import:" in doc, f"common/{room}/__init__.py says nothing of its imports"
    for path in sorted(folder.rglob("*.py")):  # a room's packages (backends/traits) too
        for name in runtime_imports(path):
            other = room_of(name)
            assert other in (None, room, *allowed), f"{path.relative_to(REPO)} imports {name}"
    for path in sorted((REPO / "common").glob("*.py")):  # errors, machine: below every room
        assert not any(room_of(n) for n in runtime_imports(path)), path.name


# reports/'s wings, in the order data flows through them: each may import the wings before it.
WINGS = ["numbers", "step_model", "judging", "rendering", "sections", "page"]


def test_the_reports_wings_import_one_way():
    """A module of a wing of reports/ imports only its own wing and those before it (inside
    functions too), and every module of reports/ but its docstring lives in a wing."""
    wings = {path.name for path in (REPO / "reports").iterdir() if path.is_dir()
             and (path / "__init__.py").exists()}
    assert wings == set(WINGS), f"reports/ has the wings {sorted(wings)}, not {WINGS}"
    loose = [p.name for p in (REPO / "reports").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules of reports/ outside a wing: {loose}"
    for wing in WINGS:
        allowed = set(WINGS[:WINGS.index(wing) + 1])
        for path in source_files(f"reports/{wing}"):
            for name in imports(path, top_level_only=False):
                parts = name.split(".")
                if parts[:2] == ["xbench", "reports"] and len(parts) > 2:
                    assert parts[2] in allowed, f"reports/{wing}/{path.name} imports {name}"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package):
    """common/ never imports reports/ or the command line; a backend imports only common/;
    reports/ reads through common/ only."""
    for path in source_files(package):
        for name in imports(path, top_level_only=False):
            parts = name.split(".")
            if parts[0] == "xbench" and len(parts) > 1:
                assert parts[1] in ALLOWED[package] | {package}, f"{path.name} imports {name}"


def test_every_import_names_the_installed_namespace():
    """No `import common` (it would resolve to another project's `common`): every import and
    every module run with -m or named in the registry is under `xbench.`."""
    for package in PACKAGES:
        for path in source_files(package):
            for name in imports(path, top_level_only=False):
                assert name.split(".")[0] not in PACKAGES, f"{path.name} imports {name}"
            assert not OLD_NAME.search(path.read_text()), f"{path.name} names a module " \
                                                          f"without xbench."


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_has_an_import_cycle(package):
    """The modules of a package import each other (anywhere: at the top, under TYPE_CHECKING, or
    inside a function) without a circle, so that no import is put off only to dodge one: a
    Launcher protocol and Cell in a module of their own broke common/'s, jax_backend/mesh.py
    JAX's (base.py's methods imported train, networks and the probe, which imported its
    constants back)."""
    prefix = f"{PACKAGES[package]}."

    def module(path: Path) -> str:  # a package by its own name, as it is imported
        return ".".join(path.relative_to(REPO / package).with_suffix("").parts).removesuffix(
            ".__init__")
    modules = {module(path) for path in source_files(package)}
    graph = {module(path): {name.removeprefix(prefix) for name in
                            imports(path, top_level_only=False) if name.startswith(prefix)}
             & modules - {module(path)} for path in source_files(package)}
    done, path = set(), []

    def visit(module):
        assert module not in path, f"import cycle: {' -> '.join([*path, module])}"
        if module in done:
            return
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            visit(imported)
        path.pop()
        done.add(module)
    for module in sorted(graph):
        visit(module)


def test_outside_the_repository_only_the_namespace_imports(tmp_path):
    code = ("import importlib.util, xbench.common, xbench.reports, xbench.cli.main\n"
            "print([importlib.util.find_spec(m) is None for m in "
            "('common', 'reports', 'pt_backend', 'tf_backend', 'jax_backend')])")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[True, True, True, True, True]"
    failed = subprocess.run([sys.executable, "-c", "import common"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert (failed.returncode == 1
            and "ModuleNotFoundError: No module named 'common'" in failed.stderr)


def test_a_plain_wheel_installs_and_runs_in_a_fresh_environment(tmp_path):
    """`pip wheel .` (not the editable install): in a new venv with only the wheel and its
    dependencies, `xbench --version`, `xbench backends` (no framework there: each backend says
    what it lacks) and a preset's dry run (the grid files ship as package data) work."""
    source, wheels = tmp_path / "source", tmp_path / "wheels"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:  # a copy, so that setuptools' build folder is not left in the checkout
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(wheels), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheel, = wheels.glob("xbench-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    # --no-compile: pip would byte-compile every file of the dependencies (pandas', scipy's,
    # matplotlib's), 40-44 s of the install here against 17-19 s without; what runs below
    # compiles what it imports as any Python does
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile",
                                str(wheel)],
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr
    xbench = tmp_path / "venv" / "bin" / "xbench"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for args, expected in ((["--version"], "xbench, version 0.1.0"),
                           (["backends"], "needs torch: torch not installed; install PyTorch"),
                           (["grid", "--preset", "smoke", "--dry-run", "--results", "r.jsonl"],
                            "25 cells: 0 done already, 25 unsupported here")):
        run = subprocess.run([str(xbench), *args], cwd=outside, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        assert expected in run.stdout, run.stdout


def test_the_code_passes_its_linter():
    """ruff with pyproject.toml's rules (unused or undefined names, sorted imports)."""
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_report_reads_a_backend_only_through_its_traits():
    """reports/ imports no backend's module, nor the classes its processes run: what it needs of
    a backend is in the rows or in the framework-free traits table and its protocols."""
    for path in source_files("reports"):
        for name in imports(path, top_level_only=False):
            if name.startswith("xbench.common.backends."):
                assert name.split(".")[3] in ("traits", "protocol"), f"{path.name} imports {name}"


def literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal in a file but its docstrings (prose that explains)."""
    tree = ast.parse(path.read_text())
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, documented) and node.body
                  and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_the_report_names_no_backend_and_no_protocol_word():
    """What the report, predict and the attribution know of a backend they read from its traits'
    fields or its rows, never from its name or its protocol's words: a string literal under
    reports/ that names a backend or a reduction is a branch or a text the table should give."""
    from xbench.common.backends.protocol import BY_REDUCTION, NO_REDUCTION
    from xbench.common.backends.traits import TRAITS
    words = [*TRAITS, *(w for w in BY_REDUCTION if w != NO_REDUCTION), "all-gather"]
    found = [f"{path.relative_to(REPO)}:{line}: {word!r} in {text[:60]!r}"
             for path in source_files("reports") for line, text in literals(path)
             for word in words if word in text]
    assert not found, "\n".join(found)


# The source the house rules hold for (tests are not in it): every folder of Python code the
# project ships or runs.
SOURCE = ["cli", "common", "reports", "pt_backend", "tf_backend", "jax_backend", "keras_models",
          "examples", "scripts", "benchmarks"]
MOST_FILE_LINES = 400
MOST_FUNCTION_LINES = 60


def parsed_source() -> list[tuple[str, ast.Module, int]]:
    """(path from the repository's root, syntax tree, lines) of every source file."""
    found = []
    for folder in SOURCE:
        for path in source_files(folder):
            text = path.read_text()
            found.append((str(path.relative_to(REPO)), ast.parse(text), len(text.splitlines())))
    return found


def test_no_source_file_is_over_400_lines():
    """A file that outgrows 400 lines holds more than one concept: split it at a seam."""
    long = [f"{path}: {lines} lines" for path, _, lines in parsed_source()
            if lines > MOST_FILE_LINES]
    assert not long, f"over {MOST_FILE_LINES} lines: " + "; ".join(long)


def test_no_function_is_over_60_lines():
    """A function's lines from its `def` to its last (a nested function counts in its own and in
    its enclosing function's)."""
    long = [f"{path}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
            for path, tree, _ in parsed_source() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MOST_FUNCTION_LINES]
    assert not long, f"over {MOST_FUNCTION_LINES} lines: " + "; ".join(long)


def test_no_class_name_is_defined_twice():
    """One name per thing: a framework's class names its framework (TorchTiedLogits,
    KerasTiedLogits), the framework-free spec's keeps the plain name (common.workload.models)."""
    places: dict[str, list[str]] = {}
    for path, tree, _ in parsed_source():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                places.setdefault(node.name, []).append(f"{path}:{node.lineno}")
    twice = [f"{name} ({', '.join(where)})" for name, where in places.items() if len(where) > 1]
    assert not twice, "class names defined more than once: " + "; ".join(twice)
