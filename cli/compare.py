"""`xbench compare`: the cells of two results files side by side (asv compare's job)."""
import sys
from pathlib import Path

import click

from xbench.cli.console import EXIT_SLOWER


@click.command()
@click.argument("base", type=click.Path(exists=True, dir_okay=False))
@click.argument("new", type=click.Path(exists=True, dir_okay=False))
@click.option("--fail-above", type=click.FloatRange(min=0), metavar="PCT",
              help=f"Exit {EXIT_SLOWER} if a cell is significantly slower in NEW by more than PCT "
                   f"percent (for CI).")
@click.option("--exclude-contended", is_flag=True,
              help="Leave out runs marked contended (compared, and marked, by default).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def compare(base, new, fail_above, exclude_contended, as_json):
    """The cells of two results files side by side: NEW / BASE epoch-2 rate with its 95%
    interval, faster / slower / no change at that confidence, and what differs in their
    environments (versions, device, threads). Exit 0, or EXIT_SLOWER with --fail-above."""
    from xbench.reports.compare import as_json as compare_json  # pandas and scipy: loaded here
    from xbench.reports.compare import compare as compare_files
    from xbench.reports.compare import slower_than, text_table
    from xbench.reports.tables import markdown
    cells, notes = compare_files([Path(base)], [Path(new)], not exclude_contended)
    if as_json:
        click.echo(compare_json(cells, notes))
    else:
        for note in notes:
            click.secho(note, fg="yellow", err=True)
        click.echo(markdown(text_table(cells)) if len(cells) else "no cell is in both files")
    if fail_above is not None:
        slower = slower_than(cells, fail_above)
        if len(slower):
            click.secho(f"{len(slower)} cell(s) significantly slower by more than {fail_above}%: "
                        f"{', '.join(slower['cell_key'])}", fg="red", err=True)
            sys.exit(EXIT_SLOWER)
