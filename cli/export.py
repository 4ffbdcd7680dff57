"""`xbench export`: a results file as a flat table, or as MLflow runs."""
import click

from xbench.common.errors import UserError
from xbench.common.results import store as results
from xbench.common.results.outputs import not_read


@click.command("export")
@click.argument("results_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("target", required=False, type=click.Path(dir_okay=False))
@click.option("--mlflow", "mlflow_uri", is_flag=False, flag_value="", default=None,
              metavar="[URI]",
              help="Log every row as an MLflow run, to URI (default: a local store, ./mlruns).")
def export(results_file, target, mlflow_uri):
    """Write a results file as a flat .csv or .parquet table, or to MLflow (--mlflow)."""
    if not target and mlflow_uri is None:
        raise UserError("give a TARGET file (.csv or .parquet), or --mlflow [URI]")
    if target:
        not_read([results.check_export_target(target)], {results_file: "the results file"},
                 "TARGET")
    if mlflow_uri is not None:
        from xbench.reports.rendering import tracking  # mlflow-skinny is optional
        mlflow_uri = tracking.check_store(mlflow_uri or tracking.default_uri())
    rows, problems = results.read_rows(results_file)
    for problem in problems:
        click.secho(problem, fg="yellow", err=True)
    if target:
        click.echo(f"{len(rows)} rows -> {results.export(rows, target)}")
    if mlflow_uri is not None:
        uri, logged, there = tracking.export(rows, mlflow_uri)
        click.echo(f"{logged} rows -> MLflow runs in {uri} (experiment '{tracking.EXPERIMENT}')"
                   + (f"; {there} already there" if there else ""))
