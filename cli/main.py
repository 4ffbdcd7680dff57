"""The `xbench` group, its global options, and the entry point that turns errors into exit codes."""
import os
import sys
import warnings

import click

from xbench.cli.catalog import list_backends, list_models
from xbench.cli.compare import compare
from xbench.cli.console import own_version
from xbench.cli.data import data_group
from xbench.cli.export import export
from xbench.cli.grid import grid
from xbench.cli.predict import predict
from xbench.cli.probe import probe
from xbench.cli.profile import profile
from xbench.cli.report import report
from xbench.cli.trace import trace_cell
from xbench.common.backends.frameworks import FRAMEWORKS
from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.running.runner import stop_on_signals
from xbench.common.terminal import printable


def group_help() -> str:
    """The group's help, from the traits table: its frameworks, and the wrappers that span
    several of them (Horovod's)."""
    titles = lambda names: " and ".join(dict.fromkeys(names))  # noqa: E731
    over: dict[str, list[str]] = {}
    for traits in TRAITS.values():
        if traits.spans_devices:
            over.setdefault(traits.wrapper, []).append(traits.framework.title)
    shared = "".join(f", and {wrapper} over {titles(found)}" for wrapper, found in over.items()
                     if len(set(found)) > 1)
    return (f"xbench: data-parallel training benchmarks across "
            f"{', '.join(f.title for f in FRAMEWORKS[:-1])} and {FRAMEWORKS[-1].title}{shared} "
            f"({len(TRAITS)} backends: `xbench backends`).\n\n"
            "Shell completion (click's): eval \"$(_XBENCH_COMPLETE=bash_source xbench)\" in "
            "~/.bashrc (zsh_source, fish_source for other shells).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, help=group_help())
@click.version_option(own_version(), prog_name="xbench")
@click.option("-q", "--quiet", is_flag=True, help="Print only results, warnings and errors.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print what runs: each cell's log file, frameworks' own messages.")
@click.pass_context
def main(ctx, quiet, verbose):
    """The global options, for every command."""
    if quiet and verbose:
        raise UserError("-q/--quiet and -v/--verbose contradict each other; give one")
    if not verbose:  # the libraries' warnings (numpy, matplotlib, pandas) are not xbench's word
        warnings.simplefilter("ignore")
    ctx.ensure_object(dict).update(quiet=quiet, verbose=verbose, command=ctx.invoked_subcommand)


for command in (grid, probe, list_models, profile, list_backends, data_group, export, report,
                compare, predict, trace_cell):
    main.add_command(command)


def run():
    """Entry point: user errors print one message and exit 2, never a traceback, what they
    quote of the input made printable (common.terminal.printable); Ctrl-C and SIGTERM, whenever
    they come, stop what runs (its processes ended) and exit 130. NO_COLOR (any value) turns
    colour off, as https://no-color.org asks."""
    color = False if os.environ.get("NO_COLOR") else None
    state = {}
    try:
        with stop_on_signals():
            main(standalone_mode=False, color=color, obj=state)
    except UserError as e:
        click.secho(printable(f"error: {e}"), fg="red", err=True, color=color)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):  # Ctrl-C, or SIGTERM
        resumes = state.get("command") == "grid"
        click.echo("interrupted: what was running was stopped and nothing half-written was kept"
                   + ("; run the same command again to resume" if resumes else ""), err=True)
        sys.exit(130)
    except click.ClickException as e:  # click's usage errors too: one line, not four
        where = e.ctx.command_path if isinstance(e, click.UsageError) and e.ctx else "xbench"
        click.secho(printable(f"error: {e.format_message()} (see '{where} --help')"), fg="red",
                    err=True, color=color)
        sys.exit(2)


if __name__ == "__main__":
    run()
