"""`xbench predict`: how the results' models would scale, from their 1-device cells and a link,
and how far the model was from every N-device cell that was measured."""
from pathlib import Path

import click

from xbench.cli.console import (
    DEFAULT_RESULTS_DIR,
    int_list,
    json_text,
    left_out_contended,
    prose,
    quoted,
    table_format,
    table_text,
)
from xbench.common.errors import UserError
from xbench.common.grids.settings import SETTINGS

MOST = SETTINGS["devices"].maximum  # devices per node, and nodes, a grid allows
MOST_BATCH = SETTINGS["batches"].maximum


def counts_option(ctx, param, value):
    """A comma list of counts from 1 (a UserError, exit 2, otherwise)."""
    found = int_list(ctx, param, value)
    if not found or min(found) < 1 or max(found) > MOST:
        raise UserError(f"--{param.name} {value!r}: give counts from 1 to {MOST:,} (a grid's "
                        f"own limit), e.g. 1,2,4,8")
    return sorted(set(found))


def bucket_sizes_option(ctx, param, value):
    """A comma list of bucket sizes above 0 in MiB (a UserError, exit 2, otherwise), each as
    the grid makes it a cell (6 significant digits, whole bytes): sizes one cell would share are
    one size."""
    if value is None:
        return None
    try:
        found = [float(v) for v in value.split(",")]
    except ValueError:
        found = []
    if not found or not all(0 < v < float("inf") for v in found):
        raise UserError(f"--bucket-mb {value!r}: give bucket sizes in MiB above 0, e.g. 1,25,100")
    return sorted({SETTINGS["bucket_mb"].check_value(v) for v in found})  # as a grid's cells


@click.command()
@click.argument("results_files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--link", help="Between the devices of a node: a named link (nvlink4, nvlink3, "
                             "pcie4-x16, pcie3-x16, ib-ndr, ib-hdr, eth-100g, eth-25g: "
                             "reports/links.toml, with their sources) or RATE[,LATENCY] such as "
                             "25gbit,5us. Without it, only the check against the measured cells.")
@click.option("--node-link", help="Between nodes (default: --link), named or RATE[,LATENCY].")
@click.option("--devices", default="1,2,4,8", show_default=True, callback=counts_option,
              help="Devices per node to predict.")
@click.option("--nodes", default="1", show_default=True, callback=counts_option,
              help="Nodes to predict, e.g. 1,8,64.")
@click.option("--bucket-mb", callback=bucket_sizes_option, metavar="A,B,...",
              help="Predict at each of these bucket sizes (MiB) where the backend's library "
                   "takes one, and mark the best for each link and count (with --link).")
@click.option("--per-device-batch", type=click.IntRange(min=1, max=MOST_BATCH),
              help="Weak scaling: every device keeps this batch, the global batch grows with "
                   "the devices (default: each measured cell's own batch and batch mode).")
@click.option("--device", help="The device to predict for (a GPU model with a data sheet here: "
                               "'H100 SXM', 'A100 SXM', ...): its compute from the results' "
                               "1-device cells measured on it, --device-rate or --utilisation. "
                               "Default: the measured device's own, named in every row.")
@click.option("--device-rate", type=float, metavar="SAMPLES_PER_S",
              help="With --device: the samples a second one device computes at the measured "
                   "cell's per-device batch (or --per-device-batch).")
@click.option("--utilisation", type=float, metavar="SHARE",
              help="With --device: the share of its data-sheet peak it computes at, e.g. 0.4: "
                   "the model's training FLOPs at that rate (labelled assumed).")
@click.option("--device-precision", type=click.Choice(["fp32", "tf32", "bf16", "fp16"]),
              help="With --utilisation: the data sheet's column (default: the cell's "
                   "precision, fp32 for its framework's default).")
@click.option("--where", help="Keep only the rows matching a filter, as `xbench report --where`.")
@click.option("--published", is_flag=False, flag_value="", default=None, metavar="[FILE]",
              help="Also put published scaling results through the model, beside their "
                   "published efficiency: FILE's records (TOML, as "
                   "reports/step_model/published.toml), or reports/step_model/published.toml's "
                   "(NVIDIA's, Horovod's, TensorFlow's, Goyal et al.'s and torchtitan's, with "
                   "their sources): each with none of its collectives hidden, all hidden, as its "
                   "timeline predicts, and the terms it used.")
@click.option("--include-contended", is_flag=True,
              help="Calibrate on runs marked contended too (left out by default).")
@table_format
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def predict(results_files, link, node_link, devices, nodes, bucket_mb, per_device_batch, device,
            device_rate, utilisation, device_precision, where, published, include_contended,
            form, as_json):
    """Predict the step time, rate and efficiency on more devices and nodes from the results'
    1-device cells (their step attribution) and a link, and check the model against every
    N-device cell in the results: each predicted from the other cells' calibration (default
    results: the newest in results/). Every predicted number is labelled predicted."""
    from xbench.common.results.store import results_files as results_files_in
    from xbench.reports.numbers import analysis  # pandas and scipy: loaded here
    from xbench.reports.numbers.rows import load, load_probes, newest_results
    from xbench.reports.step_model.predict import calibrating, checked, given_links
    from xbench.reports.step_model.published import (
        PUBLISHED_FILE,
        against_published,
        published_summary,
    )
    from xbench.reports.step_model.published import as_json as published_json
    from xbench.reports.step_model.target import Target, check_links
    from xbench.reports.step_model.what_if import what_if
    chosen, between = given_links(link, node_link)
    target = Target(device, device_rate, utilisation, device_precision).checked()
    record = None  # the published records first: a bad one stops before any results are read
    if published is not None:
        record = against_published(Path(published) if published else PUBLISHED_FILE)
        if not (results_files or chosen or results_files_in(DEFAULT_RESULTS_DIR)):
            # the published check alone: it needs nothing measured here
            if as_json:
                click.echo(json_text({"published": published_json(record),
                                      "published_scores": published_summary(record)}))
            else:
                show_published(record, form)
            return
    paths = [Path(p) for p in results_files] or [newest_results(DEFAULT_RESULTS_DIR)]
    frame, problems = load(paths, where, include_contended)
    for problem in problems:
        click.secho(problem, fg="yellow", err=True)
    click.get_current_context().call_on_close(lambda: left_out_contended(frame))  # said last
    cells = analysis.cell_table(frame)
    attributed = calibrating(cells)
    probes, _ = load_probes(paths, frame)
    check = checked(cells, attributed, probes)
    if chosen:
        ones = attributed[attributed["devices"] == 1]
        measured_names = [str(n) for n in cells.loc[cells["cell_key"].isin(ones["cell_key"]),
                                                    "device_name"].fillna("")]
        check_links([chosen, between], target, measured_names)
    scaled = (what_if(cells, attributed, probes, devices, nodes, chosen, between, bucket_mb,
                      target, per_device_batch) if chosen else None)
    if as_json:
        click.echo(json_text(as_data(check, scaled, record)))
        return
    if record is not None:
        show_published(record, form)
    show_check_and_what_if(check, scaled, chosen, between, target, form)


def as_data(check, scaled, record) -> dict:
    """`xbench predict --json`: the check of every measured cell with its summary and the
    held-out scores per group, the what-if, the published records and their scores."""
    from xbench.reports.step_model.predict import check_summary, error_groups, predicted
    from xbench.reports.step_model.published import as_json as published_json
    from xbench.reports.step_model.published import published_summary
    from xbench.reports.step_model.skill import held_out_scores
    return {"check": check.to_dict("records"), "summary": check_summary(check),
            "held_out": {name: held_out_scores(group)
                         for name, group in error_groups(predicted(check)).items() if len(group)},
            "predicted": None if scaled is None else scaled.to_dict("records"),
            "published": None if record is None else published_json(record),
            "published_scores": None if record is None else published_summary(record)}


def show_published(record, form) -> None:
    """The published records beside the model, their sources, and the check's scores."""
    from xbench.reports.rendering.predict_tables import published_table, scores_table
    from xbench.reports.step_model.published import goals_text, published_summary
    summary = published_summary(record)
    click.echo(prose("Against the published record (a check, not a fit; no waiting for the "
                     "slowest rank added):", form))
    click.echo(table_text(published_table(record), form))
    for _, row in record.iterrows():
        click.echo(prose(f"- {quoted(row['title'], form)}: {quoted(row['sources'], form)}",
                         form))
    click.echo(prose("\nScored against predictors that know nothing of the step (skill = 1 - "
                     "the model's median error / the best trivial predictor's; "
                     "discriminating: bounds at least 5 points apart):", form))
    click.echo(table_text(scores_table(summary["scores"]), form))
    for line in goals_text(summary):
        click.echo(prose(f"- {line}", form))
    click.echo()


def show_check_and_what_if(check, scaled, chosen, between, target, form) -> None:
    """The measured cells against the model, then the what-if, labelled predicted."""
    from xbench.reports.rendering.predict_tables import check_table, what_if_table
    from xbench.reports.step_model.predict import band_text, check_summary
    click.echo(prose(f"Measured N-device cells against the model: {check_summary(check)}", form))
    if len(check):
        click.echo(table_text(check_table(check), form))
    if scaled is None:
        return
    computed = (f"each device's compute {target.device}'s (the column compute says whence)"
                if target.device else "each device's compute the measured device's own")
    click.echo(prose(f"\nPredicted, not measured: {chosen.name} between devices, {between.name} "
                     f"between nodes; {computed}; {band_text(check)}", form))
    if scaled.empty:
        click.echo(prose("nothing to predict from: no attributed 1-device cell of a backend "
                         "that spans devices in these results", form))
        return
    click.echo(table_text(what_if_table(scaled), form))
