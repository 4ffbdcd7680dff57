"""`xbench compare`: the cells of two results files side by side (asv compare's job)."""
import math
import sys
from pathlib import Path

import click

from xbench.cli.console import (
    EXIT_NOTHING_COMPARED,
    EXIT_SLOWER,
    json_text,
    table_format,
    table_text,
)
from xbench.common.errors import UserError


def percent(ctx, param, value):
    """A threshold that can fail: a finite per cent from 0 to below 100."""
    if value is not None and not (math.isfinite(value) and 0 <= value < 100):
        raise UserError(f"--fail-above {value:g} is not a slowdown a cell can have: give a per "
                        f"cent from 0 to below 100")
    return value


@click.command()
@click.argument("base", type=click.Path(exists=True, dir_okay=False))
@click.argument("new", type=click.Path(exists=True, dir_okay=False))
@click.option("--fail-above", type=float, callback=percent, metavar="PCT",
              help=f"Exit {EXIT_SLOWER} if a cell's 95% interval shows NEW slower by more than "
                   f"PCT percent (its upper bound below 1 - PCT/100), {EXIT_NOTHING_COMPARED} if "
                   f"no cell has usable runs in both files (for CI).")
@click.option("--exclude-contended", is_flag=True,
              help="Leave out runs marked contended (compared, and marked, by default).")
@table_format
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def compare(base, new, fail_above, exclude_contended, form, as_json):
    """The cells of two results files side by side: NEW / BASE epoch-2 rate with its 95%
    interval, faster / slower / inconclusive at that confidence, and what differs in their
    environments (versions, device, threads) and the contention limits their runs were judged
    by. Exit 0; exit 2 where the files share no cell at all; with --fail-above, a gate that
    compared nothing (no cell with usable runs in both files) fails too."""
    from xbench.reports.rendering.compare import (
        as_json as compare_json,  # pandas and scipy: loaded here
    )
    from xbench.reports.rendering.compare import compare as compare_files
    from xbench.reports.rendering.compare import slower_than, text_table
    cells, notes = compare_files([Path(base)], [Path(new)], not exclude_contended,
                                 refuse_unshared=True)
    if as_json:
        click.echo(json_text(compare_json(cells, notes)))
    else:
        for note in notes:
            click.secho(note, fg="yellow", err=True)
        click.echo(table_text(text_table(cells), form) if len(cells)
                   else "no cell has usable runs in both files")
    if fail_above is not None and not len(cells):
        click.secho(f"nothing was compared: no cell has usable runs (ok, not injected"
                    f"{', not contended' if exclude_contended else ''}) in both {base} and {new}; "
                    f"a gate that compared nothing does not pass", fg="red", err=True)
        sys.exit(EXIT_NOTHING_COMPARED)
    if fail_above is not None:
        slower = slower_than(cells, fail_above)
        if len(slower):
            click.secho(f"{len(slower)} cell(s) significantly slower by more than {fail_above}% "
                        f"(the 95% interval's upper bound below {1 - fail_above / 100:.2f}x): "
                        f"{', '.join(slower['cell_key'])}", fg="red", err=True)
            sys.exit(EXIT_SLOWER)
