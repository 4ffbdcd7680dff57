"""What every command shares: printing under -q/-v, list options, exit codes, the version."""
import contextlib
import importlib.metadata
import json
import math
import numbers
import os
import shlex
import sys
import tempfile
import tomllib
from pathlib import Path

import click

from xbench.common import terminal
from xbench.common.workload.model_file import short_name

DEFAULT_RESULTS_DIR = Path("results")
# A grid exits 0 when every cell ended ok, oom or unsupported (each a result); this code when a
# cell failed or timed out; 2 on bad input (nothing ran); 130 when interrupted.
EXIT_CELLS_FAILED = 3
EXIT_SLOWER = 4  # xbench compare --fail-above: a significant slowdown beyond the threshold
EXIT_NOTHING_COMPARED = 5  # xbench compare --fail-above: no cell had usable runs in both files


class FiniteRange(click.FloatRange):
    """A number within a range that is a number: click's FloatRange lets NaN through, since
    every comparison with it is false."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


def items(param, value: str) -> list[str]:
    """The comma-separated values of an option, stripped; a clear error for an empty one
    ('1,,4', 'last,'): a list that silently drops one is not the list that was typed."""
    found = [v.strip() for v in value.split(",")]
    if "" in found:
        raise click.BadParameter(f"{value!r} has an empty value; give values separated by "
                                 f"single commas (A,B,...)", param=param)
    return found


def int_list(ctx, param, value):
    """'1,2,4' -> [1, 2, 4] (a clear error for anything else)."""
    if value is None:
        return None
    found = items(param, value)
    try:
        return [int(v) for v in found]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of whole "
                                 "numbers") from None


def float_list(ctx, param, value):
    """'1,2.5' -> [1.0, 2.5] (a clear error for anything else)."""
    if value is None:
        return None
    found = items(param, value)
    try:
        return [float(v) for v in found]
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a comma-separated list of numbers") from None


def str_list(ctx, param, value):
    """'a,b' -> ['a', 'b'] (a clear error for an empty value)."""
    return None if value is None else items(param, value)


def json_text(value, indent: int | None = 1) -> str:
    """`value` as strict JSON, what every --json prints: a number that is not one (NaN, an
    infinity) is null, numpy's scalars and arrays plain numbers and lists, anything else not
    JSON its text."""
    def plain(v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if hasattr(v, "tolist"):  # numpy's scalars and arrays: Python's numbers and lists
            return plain(v.tolist())
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real):
            return float(v) if math.isfinite(v) else None
        return str(v)
    return json.dumps(plain(value), indent=indent, allow_nan=False)


# `--format` of the commands that print tables (predict, compare): text for a terminal, or Markdown
TABLE_FORMATS = ("text", "md")
table_format = click.option(
    "--format", "form", type=click.Choice(TABLE_FORMATS), default="text", show_default=True,
    help="text: aligned tables within the terminal's width (COLUMNS); md: Markdown tables, to "
         "paste into a page.")


def table_text(frame, form: str) -> str:
    """A table of text (reports.rendering.tables' `table`) as `--format` says: aligned for the
    terminal (a model file by its file name and digest's start) or as Markdown."""
    if form == "md":
        from xbench.reports.rendering.tables import markdown  # pandas: loaded here
        return markdown(frame)
    if frame.empty:
        return "(none)"
    shown = frame.assign(model=frame["model"].map(short_name)) if "model" in frame else frame
    return terminal.table([terminal.printable(str(c)) for c in frame.columns],
                          shown.astype(str).map(terminal.printable).values.tolist())


def prose(text: str, form: str) -> str:
    """Sentences around the tables: wrapped between words for the terminal (printable); as they
    are in Markdown (a renderer wraps them: what a file gave them is `quoted`)."""
    return text if form == "md" else terminal.wrap(terminal.printable(text))


def quoted(text: str, form: str) -> str:
    """A file's text in a sentence (a published record's title and sources): printable for the
    terminal, inert Markdown (reports.rendering.tables.markdown_text) with --format md."""
    if form == "md":
        from xbench.reports.rendering.tables import markdown_text  # pandas: loaded here
        return markdown_text(text)
    return terminal.printable(text)


def own_version() -> str:
    """xbench's version: installed, or from pyproject.toml when run from a checkout (make
    gpu-check runs it uninstalled)."""
    try:
        return importlib.metadata.version("xbench")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"] + " (uninstalled)"


def say(text="", err=False, **style):
    """Print unless --quiet (errors and warnings, err=True, always print)."""
    ctx = click.get_current_context(silent=True)
    if err or not (ctx and ctx.find_root().obj and ctx.find_root().obj["quiet"]):
        click.secho(text, err=err, **style)


def left_out_contended(frame) -> None:
    """Where rows marked contended were left out of what a command printed, say how many and
    the exact command that would keep them (the one typed, with --include-contended)."""
    left = int(((frame["status"] == "ok") & frame["contended"] & ~frame["usable"]).sum())
    if left:
        command = shlex.join(["xbench", *sys.argv[1:], "--include-contended"])
        click.secho(f"{left} run(s) marked contended (other processes took more of their cores "
                    f"than their contention limit) were left out; to use them: {command}",
                    fg="yellow", err=True)


def verbose() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().obj and ctx.find_root().obj["verbose"])


def quiet() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().obj and ctx.find_root().obj["quiet"])


@contextlib.contextmanager
def framework_messages():
    """Keep what frameworks write to the process's standard error (TensorFlow's C++ log, absl)
    off the terminal while they load; `messages()` gives it back (printed with --verbose)."""
    sys.stderr.flush()
    saved, kept = os.dup(2), tempfile.TemporaryFile()
    os.dup2(kept.fileno(), 2)
    try:
        yield lambda: (kept.seek(0), kept.read().decode(errors="replace").strip())[1]
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
