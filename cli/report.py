"""`xbench report`: figures, tables and one HTML page from results files."""
from pathlib import Path

import click

from xbench.cli.console import DEFAULT_RESULTS_DIR, left_out_contended
from xbench.common.results.outputs import not_read, writable_folder


@click.command()
@click.argument("results_files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False),
              help="Folder to write into; default reports/out/<name of the first results file>.")
@click.option("--format", "formats", default="html,md,png,svg,csv", show_default=True,
              help="What to write, comma-separated: html, md, png, svg, csv.")
@click.option("--where",
              help="Keep only the rows matching a filter: columns compared with values, e.g. "
                   "\"model == 'small' and devices > 1\".")
@click.option("--include-contended", is_flag=True,
              help="Use runs marked contended in the numbers and verdicts (left out by default).")
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False),
              help="A results file to compare these with (a section like `xbench compare`).")
@click.option("--lab", is_flag=True,
              help="Add the course lab's answers in its layout (questions 1, 4, 5, 6, Tables 1-3, "
                   "the case study's accuracy): for a lab grid's rows.")
@click.option("--link", help="Add a section of predictions to 512 devices over this link between "
                             "the devices of a node (named, or RATE[,LATENCY]: see "
                             "xbench predict).")
@click.option("--node-link", help="With --link: the link between nodes (default: --link).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as strict JSON on stdout, and nothing else there (the "
                   "verdicts with their intervals and outcomes, the warnings, every table's "
                   "values, every figure's data; null for a missing number), e.g. `xbench "
                   "report --json r.jsonl | jq`; also written to report.json in --out.")
def report(results_files, out, formats, where, include_contended, baseline, lab, link, node_link,
           as_json):
    """Figures, tables and one HTML page from results files (default: the newest in results/);
    with --json, the report as data on stdout."""
    from xbench.reports.numbers.rows import load, newest_results
    from xbench.reports.page.build import (  # pandas, scipy, matplotlib
        build_report,
        files_written,
        parse_formats,
    )
    from xbench.reports.rendering.tables import shorten
    from xbench.reports.step_model.predict import given_links
    paths = [Path(p) for p in results_files] or [newest_results(DEFAULT_RESULTS_DIR)]
    links, chosen = given_links(link, node_link), parse_formats(formats)
    out = writable_folder(out or Path("reports/out") / paths[0].stem, "the report")
    not_read(files_written(out, chosen, as_json),
             {**{path: "a results file" for path in paths},
              baseline: "the --baseline results file"}, "--out", "folder")
    notices, summary, written = build_report(paths, out, chosen, where,
                                             include_contended, baseline and Path(baseline), lab,
                                             *links, as_json=as_json)
    for line in notices:
        click.secho(line, fg="yellow", err=True)
    if as_json:  # stdout is the JSON alone, for a pipe; the summary goes to stderr
        click.echo(written["json"].read_text(encoding="utf-8"), nl=False)
    click.echo("\n".join(shorten(summary)), err=as_json)
    click.echo(f"report: {written.get('html', out)}", err=as_json)
    left_out_contended(load(paths, where, include_contended)[0])
