"""No file a command writes is one it reads: every command that takes --out, --results or an
output file checks it against what it reads before the work starts, by the file itself (a
relative path, a symbolic link and a hard link name the same file): one line naming both, exit
2, and what it reads as it was. Which commands write is read from the command line itself
(`written_by`), so that a new one cannot go without its case here."""
import shutil
from pathlib import Path

import click
import pytest

from tests.helpers import MNIST_DIR, REPO, refused, write_grid, xbench_here
from xbench.cli.main import main

RECORDED = REPO / "tests" / "data" / "repeats.jsonl"
DDP = "pt-ddp|small|x1|global-b128|d1|e2|seed0|mnist|cap512|auto"
# The parameters through which a command is told where to write, by name.
OUTPUT_NAMES = {"out", "results_path", "results_dir", "target", "folder"}
# The commands that write, and whether they read a file the user names (the others read none,
# so nothing they write can be one: `test_what_reads_no_file_names_only_where_it_writes`).
READS = {"grid": True, "report": True, "trace": True, "export": True, "probe": False,
         "profile": False, "data download": False}


def written_by() -> dict[str, list[str]]:
    """{command: the names of its parameters that say where it writes}, from the command line."""
    found = {}

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())
            return
        outputs = [p.name for p in command.params if p.name in OUTPUT_NAMES]
        if outputs:
            found[path] = outputs
    walk(main, "")
    return found


def test_every_command_that_writes_has_its_case_here():
    assert set(written_by()) == set(READS)


def test_what_reads_no_file_names_only_where_it_writes():
    """probe, profile and data download take no path but the one they write to."""
    for path, reads in READS.items():
        command = main
        for name in path.split():
            command = command.commands[name]
        paths = [p.name for p in command.params if isinstance(p.type, click.Path)]
        assert reads or paths == written_by()[path], (path, paths)


@pytest.fixture
def results(tmp_path) -> Path:
    """A results file of recorded rows, with a timeline to trace."""
    path = tmp_path / "r.jsonl"
    shutil.copy(RECORDED, path)
    return path


def same_file(kind: str, target: Path) -> Path:
    """`target` under another name: as given, by a path relative to its folder, a symbolic or a
    hard link."""
    if kind == "itself":
        return target
    if kind == "relative":
        return Path("..") / target.parent.name / target.name
    other = target.with_name(f"{kind}-{target.name}")
    (other.symlink_to if kind == "symlink" else other.hardlink_to)(target)
    return other


@pytest.mark.parametrize("kind", ["itself", "relative", "symlink", "hardlink"])
def test_a_trace_is_never_written_over_the_results_it_is_drawn_from(kind, results):
    """It once replaced all the rows of the file with the trace, and exited 0."""
    before = results.read_bytes()
    out = same_file(kind, results)
    done = xbench_here("trace", results, "--cell", DDP, "--out", out, cwd=results.parent)
    refused(done, f"--out: {out} is the results file")
    assert "which this command reads: writing there would damage it; give --out another file" \
        in done.stderr
    assert results.read_bytes() == before


def test_an_export_is_never_written_over_the_results_it_reads(tmp_path):
    results = tmp_path / "rows.csv"  # a results file may be called anything
    shutil.copy(RECORDED, results)
    refused(xbench_here("export", results, results), f"TARGET: {results} is the results file")
    assert results.read_bytes() == RECORDED.read_bytes()


@pytest.mark.parametrize("name, formats, option", [
    ("cells.csv", "csv", None), ("summary.md", "md", None), ("index.html", "html", None),
    ("scaling.png", "png", None), ("step_parts.svg", "svg", None),
    ("report.json", "md", "--json"), ("cells.csv", "csv", "--baseline")])
def test_a_report_is_never_written_over_a_results_file_it_reads(name, formats, option,
                                                                tmp_path):
    """A results file (or the --baseline) inside --out under a name the report writes in these
    formats; the same name in a format not asked for is no problem."""
    out = tmp_path / "out"
    out.mkdir()
    results = out / name
    shutil.copy(RECORDED, results)
    arguments = {None: [results], "--json": [results, "--json"],
                 "--baseline": [RECORDED, "--baseline", results]}[option]
    done = xbench_here("report", *arguments, "--out", out, "--format", formats)
    what = "the --baseline results file" if option == "--baseline" else "a results file"
    refused(done, f"--out: {results} is {what}")
    assert results.read_bytes() == RECORDED.read_bytes()
    other = "md" if formats != "md" else "csv"
    if option is None:
        assert xbench_here("report", results, "--out", out, "--format", other).returncode == 0


@pytest.mark.parametrize("what", ["the grid file", "a data file of the grid", "claims"])
def test_a_grid_never_writes_its_results_over_what_it_reads(what, tmp_path):
    """Its results (appended), or a file it writes beside them (its claims, a row the results
    could not take), over the grid file or its data: refused before any cell runs."""
    data = tmp_path / "mnist"
    shutil.copytree(MNIST_DIR, data)
    grid = write_grid(tmp_path)
    if what == "claims":  # the grid file is where the claims of these results would be
        grid = grid.rename(tmp_path / "r.jsonl.claims")
        results, read = tmp_path / "r.jsonl", grid
    else:
        read = grid if what == "the grid file" else data / "train-labels-idx1-ubyte.gz"
        results = read
    before = read.read_bytes()
    done = xbench_here("grid", grid, "--data-dir", data, "--results", results, "--dry-run")
    refused(done, f"--results: {read} is {'the grid file' if what == 'claims' else what}")
    assert read.read_bytes() == before


@pytest.mark.processes("the model file is described by each framework in a process of its own")
def test_a_grid_never_writes_its_results_over_its_model_file(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("def pytorch():\n    from torch import nn\n    return {'model': "
                     "nn.Linear(8, 3), 'inputs': ((8,), 'float32'), 'classes': 3}\n")
    before = model.read_bytes()
    done = xbench_here("grid", "--preset", "smoke", "--model", model, "--data", "synthetic",
                       "--backend", "pt-ddp", "--results", model, "--dry-run",
                       env={"XBENCH_CACHE": str(tmp_path / "cache")})
    refused(done, f"--results: {model} is the model file")
    assert model.read_bytes() == before
