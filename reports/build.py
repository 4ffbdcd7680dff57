"""`xbench report`: results files -> figures, tables, summary.md, cells.csv and one HTML page.

Reads only the results files (through common.results.store) and needs no ML framework: pandas, numpy
and matplotlib. `build_report` is the whole pipeline; the command line only parses options and
prints.
"""
from datetime import datetime, timezone
from pathlib import Path

from xbench.common.errors import UserError
from xbench.common.measuring.attribution import MEANING
from xbench.common.results.store import csv_safe
from xbench.reports import analysis, figures, goodput, page, predict, tables
from xbench.reports.compare import compare
from xbench.reports.compare import text_table as compare_table
from xbench.reports.lab import TEXT as LAB_TEXT
from xbench.reports.lab import lab_tables
from xbench.reports.load import load, load_probes
from xbench.reports.stats import CI_METHOD
from xbench.reports.verdicts import verdicts

COMPARE_TEXT = ("Each cell's epoch-2 rate in these results over its rate in the baseline, with "
                "Fieller's 95% interval: faster or slower only where the interval excludes 1. "
                "Contended runs are compared too and marked.")

LIMITS_TEXT = (
    "How far each cell is from what this machine can do, by `xbench probe` (a probe file beside "
    "the results, of the rows' environment). Model FLOP utilisation (MFU) = a training step's "
    "FLOPs per sample (the forward's, and the backward's two products per layer but the first "
    "layer's input gradient, which is never computed) × epoch-2 rate / the peak FLOP/s of the "
    "cell's devices: the framework's own matmul rate at the precision of the model's dominant "
    "layers (the row's math: fp32, or TF32 on a GPU that allowed it), per GPU times the GPUs, "
    "or on a CPU the rate with all the threads the cell's processes have on a node (a CPU "
    "device is its share of the cores); on a GPU also against its data sheet's dense peak at "
    "that precision. Above 100% of either it is SUSPECT and not a result. "
    "The interval is the rate's; the probe's own spread is in the probe file. For an "
    "all-reducing cell on N > 1 devices: its achieved bus bandwidth (nccl-tests' busbw = "
    "bytes reduced / moving time × 2(N−1)/N, from the collectives' counted time: see Where a "
    "step's time goes) against the probe's busbw of the same library at the gradients' size on "
    "as many processes; one above the probe's is marked SUSPECT and is not a result.")
ATTRIBUTION_TEXT = (
    "The parts: " + "; ".join(f"{part}, {meaning}" for part, meaning in MEANING.items()) + ". "
    "Each in ms per step (the mean over the cell's ranks and repeats, with the "
    "95% interval over repeats) and as a share of the step. They add up to the step windows by "
    "construction; what the windows do not cover of the epoch (its iterator's set-up, the final "
    "synchronisation) is the residual, and a cell whose residual is above 5% of its epoch says "
    "so. How each part is known is in the rows (attribution.how). Cells with an injected fault "
    "(inject) show where it landed, and stay out of every verdict.")
PREDICT_TEXT = (
    "What `xbench predict` would have said of each N-device cell from its backend's 1-device "
    "cell of the same setup and batch: compute from that cell's attributed parts (the "
    "per-sample ones in proportion to the per-device batch; on a CPU slower by the cores a rank "
    "lost, to a power calibrated per backend), the collectives' bytes through the link (a ring's "
    "passes, the backend's buckets), less what the backward pass hides of them (the share "
    "calibrated per backend), and the wait for the slowest rank from the 1-device cell's spread. "
    "The link is "
    "the probe's bandwidth of the library, the fastest bandwidth calibration cells moved at, or a capped "
    "link's cap. Every cell is predicted from a calibration on the cells of every other "
    "configuration (its seeds and capped-link twins held out with it), so its error is held "
    "out. How the model works: docs/numbers.md, \"Predicted\".")
PREDICTED = ("Predicted against measured", [PREDICT_TEXT], ["predicted"], ["predicted"])
WHAT_IF_DEVICES, WHAT_IF_NODES = [1, 2, 4, 8], [1, 8, 64]
WHAT_IF_TEXT = (
    "What the same model predicts for each backend's 1-device cells on 1, 2, 4 and 8 devices per "
    "node and 1, 8 and 64 nodes over the link given (`xbench report --link`), each device as fast "
    "as the measured one: predicted, never measured, and never mixed into the tables above "
    "(`xbench predict` for other counts).")
NO_PROBE = ("no probe of this machine beside the results: run `xbench probe` (its record goes to "
            "probe.jsonl in the results' folder) and make the report again")

FORMATS = ("html", "md", "png", "svg", "csv")
SECTIONS = [
    ("Figure 5: rates as in the blog", [
        "The blog's Figure 5a-e for every backend in the results. Rate = training samples in the "
        "epoch / wall-clock epoch time; epoch 2 is the steady state, epoch 1 carries one-time "
        "costs."], ["fig5a_rate_vs_devices", "fig5b_rate_vs_batch", "fig5c_epoch2_time_by_multiple",
                    "fig5d_epoch1_vs_epoch2", "fig5e_rate_vs_multiple"], []),
    ("Scaling", [
        "Speedup = R(N)/R(1) of the epoch-2 rate (samples / mean epoch time) against the same "
        "backend's own 1-device cell of the same setup (its 1-device run goes through the same "
        "parallel machinery), with Fieller's 95% interval; efficiency = speedup / N. An "
        "efficiency above 100% is marked SUSPECT, not reported as a result. Strong scaling: the "
        "global batch is fixed (batch_mode global); weak scaling: the per-device batch is fixed "
        "(batch_mode per_device)."], ["scaling"], ["scaling"]),
    ("What the parallel machinery costs at one device", [
        "Each backend's 1-device rate over its framework's single-device reference with no "
        "parallel wrapper (pt-single, tf-single), in the same setup: below 1× the wrapper costs "
        "time even when there is nothing to parallelise."], [], ["wrapper"]),
    ("Where a step's time goes", [analysis.COMMUNICATION, ATTRIBUTION_TEXT],
     ["step_parts"], ["attribution", "communication"]),
    ("Against the limit", [LIMITS_TEXT], [], ["limits"]),
    PREDICTED,
    ("Precision", [
        "Mixed precision (bf16, fp16) trades accuracy for speed: each setup run at more than one "
        "precision, with its rate, MFU against the probe's matmul peak at the precision it ran in "
        "(bf16 and fp16 cells against the lower type's peak, the others against what their "
        "framework allowed float32: fp32, or TF32 on a GPU) and its test accuracy."],
     [], ["precision"]),
    ("Time to accuracy", [
        goodput.TIME_TEXT,
        "The second table names, per backend, the batch and device count with the shortest "
        "time to the target beside the one with the highest throughput, and whether the "
        "shortest is surely the shortest: where it is and the two differ, the extra samples "
        "the faster configuration needs cost more than its speed gains."], ["time_to_accuracy"], ["time_to_target", "goodput"]),
    ("Accuracy", [
        "Mean training loss and accuracy per epoch, and test accuracy after training, against "
        "devices and batch size (no learning-rate scaling).",
        "A model with BatchNorm is evaluated with one replica's running statistics, so what a "
        "backend does with them across replicas changes the test accuracy: the second table says "
        "it per cell, with how far the replicas' statistics ended apart (the largest difference "
        "of any statistic from replica 0's, relative to replica 0's largest; 0: every replica "
        "holds rank 0's)."], ["accuracy"], ["accuracy", "batchnorm"]),
    ("Memory", [
        "Peak memory per device where recorded: allocated memory per GPU, or peak resident "
        "memory per process on CPU. DataParallel gathers on device 0, which shows here.",
        "Model state: the trainable parameters and the optimizer's state a device holds between "
        "steps, counted on its tensors at the end of the run; what sharding (pt-fsdp) divides "
        "over the devices, and what every other backend keeps whole on each device. On a CPU "
        "the peak also holds the framework and its libraries (FSDP's own add about 46 MiB) and "
        "the collectives' buffers, so a small model's sharded state need not lower it there.",
        "The second table lays each backend's memory side by side against the device count."],
     ["memory"], ["memory", "memory_devices"]),
    ("Start-up and first-epoch overhead", [
        "Start-up: from launching the cell's process(es) to the first batch. First-epoch "
        "overhead: epoch-1 time minus epoch-2 time."], ["overhead"], ["overhead"]),
    ("Cells", [CI_METHOD + ". Contended runs are left out of every number unless the report "
               "was made with --include-contended; the runs column counts them."], [],
     ["cells", "not_ok"]),
    ("Environment", [
        "What ran where, from the rows. Rows from different machines or software versions are "
        "separate environments and are never averaged together."], [], ["environment"]),
]


def parse_formats(text):
    """'html,md' -> ['html', 'md'] (a UserError for anything else)."""
    chosen = [f.strip().lower() for f in (text or ",".join(FORMATS)).split(",") if f.strip()]
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise UserError(f"--format takes a comma list of {', '.join(FORMATS)}; "
                        f"got {text!r}")
    return chosen


def build_report(paths, out, formats=FORMATS, where=None, include_contended=False,
                 baseline=None, lab=False, link=None, node_link=None):
    """Write the report of the results files `paths` into `out`.

    Returns (notices, summary lines, {kind: path written}); notices say what is wrong or must be
    known (damaged lines, mixed environments, synthetic data), and never stop the report.
    """
    paths = [Path(p) for p in paths]
    frame, problems = load(paths, where, include_contended)
    cells = analysis.cell_table(frame)
    scaling = analysis.scaling(cells)
    attributed = analysis.attribution(cells)
    probes, probe_problems = load_probes(paths, frame)
    limits = analysis.against_limits(cells, attributed, probes)
    failures = analysis.failures(frame)
    notices = tables.notices(frame, cells, problems + probe_problems, where)
    verdict_lines = verdicts(cells, frame, include_contended, attributed, limits)
    targets = goodput.target_table(frame)
    check = predict.checked(cells, attributed, probes)
    summary = tables.summary(frame, verdict_lines, failures, [p.name for p in paths])
    if not targets.empty:
        summary += ["Time to target (median [interval]):",
                    *["  " + line for line in goodput.goodput_lines(targets)]]
    table_set = report_tables(frame, cells, scaling, attributed, failures)
    table_set["limits"] = ("MFU and all-reduce bandwidth against this machine's measured peaks",
                           tables.limits_table(limits) if probes else limits.iloc[0:0],
                           NO_PROBE if not probes else figures.NO_ROWS)
    table_set["precision"] = ("Each precision beside the others of its setup",
                              tables.precision_table(cells, limits),
                              "it needs one setup run at two precisions or more (--precision "
                              "fp32,bf16)")
    table_set["predicted"] = (f"Predicted against measured: {predict.check_summary(check)}",
                              tables.check_table(check), figures.NO_PREDICTION)
    table_set["time_to_target"] = ("Time to the target accuracy, per configuration over its "
                                   "seeds", goodput.target_text_table(targets), figures.NO_TARGET)
    table_set["goodput"] = ("The shortest time to the target beside the highest throughput",
                            goodput.goodput_table(targets), figures.NO_TARGET)
    sections = SECTIONS
    if lab:
        table_set.update(lab_tables(cells, scaling, attributed, limits, targets))
        sections = [("The course lab", LAB_TEXT, [], [n for n in table_set if n.startswith("lab_")]),
                    *sections]
    if link:
        scaled = predict.what_if(cells, attributed, probes, WHAT_IF_DEVICES, WHAT_IF_NODES, link,
                                 node_link or link)
        table_set["what_if"] = (f"Predicted, not measured: {link.name} between devices, "
                                f"{(node_link or link).name} between nodes",
                                tables.what_if_table(scaled), "no attributed 1-device cell of a "
                                "backend that spans devices")
        sections = [*sections[:sections.index(PREDICTED)], PREDICTED,
                    ("Predicted on other hardware", [WHAT_IF_TEXT, predict.band_text(check)], [],
                     ["what_if"]), *sections[sections.index(PREDICTED) + 1:]]
    if baseline:
        compared, notes = compare([baseline], paths)
        table_set["compare"] = (f"Every cell also in {baseline.name}: NEW / BASE epoch-2 rate",
                                compare_table(compared), "no cell is in both files")
        sections = [(f"Compared with {baseline.name}", [COMPARE_TEXT, *notes], [], ["compare"]),
                    *sections]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    drawn, missing = (figures.build(cells, scaling, attributed, targets, check)
                      if {"html", "png", "svg"} & set(formats) else ([], {}))
    pngs = {name: (title, caption, figures.render(figure, "png"))
            for name, title, caption, figure in drawn if {"html", "png"} & set(formats)}
    for name, _, _, figure in drawn:
        if "png" in formats:
            written[f"{name}.png"] = out / f"{name}.png"
            written[f"{name}.png"].write_bytes(pngs[name][2])
        if "svg" in formats:
            written[f"{name}.svg"] = out / f"{name}.svg"
            written[f"{name}.svg"].write_bytes(figures.render(figure, "svg"))
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    meta = [f"Results: {', '.join(map(str, paths))}" + (f"; rows where {where}" if where else ""),
            f"Generated {generated} by xbench report."]
    if "html" in formats:
        written["html"] = out / "index.html"
        written["html"].write_text(page.html("xbench report", meta, verdict_lines, notices,
                                             sections, pngs, missing, table_set),
                                   encoding="utf-8")
    if "md" in formats:
        written["md"] = out / "summary.md"
        figure_links = pngs if "png" in formats else {}
        written["md"].write_text(markdown_page(meta, notices, verdict_lines, figure_links,
                                               missing, table_set, sections), encoding="utf-8")
    if "csv" in formats:
        written["csv"] = out / "cells.csv"
        csv_safe(tables.cells_csv(cells, limits, attributed)).to_csv(written["csv"],
                                                                     index=False)
    return notices, summary, written


def report_tables(frame, cells, scaling, attributed, failures):
    """{name: (title, table of text, why it would be empty)}: every table the HTML page and
    summary.md show."""
    return {
        "cells": ("Every cell: rates, times and test accuracy over its usable repeats",
                  tables.cells_table(cells), figures.NO_ROWS),
        "not_ok": ("Runs that did not finish ok", tables.failures_table(failures),
                   "every run finished ok"),
        "scaling": ("Speedup and efficiency of every N-device cell", tables.scaling_table(scaling),
                    "it needs usable cells on 1 and on more devices of one backend and setup "
                    "(the smoke grid has 1 and 2 devices)"),
        "wrapper": ("Rate at one device against no parallel wrapper",
                    tables.wrapper_table(analysis.wrapper_cost(cells)),
                    "it needs pt-single or tf-single beside the other backends at one device "
                    "(every preset has them)"),
        "attribution": ("The parts of a step, per cell", tables.attribution_table(attributed),
                        figures.NO_ATTRIBUTION),
        "communication": ("Waiting, communication and bandwidth of every N-device cell",
                          tables.communication_table(attributed),
                          "it needs attributed cells on N > 1 devices (the smoke grid has 2)"),
        "accuracy": ("Loss and accuracy per epoch, test accuracy, per cell",
                     tables.accuracy_table(cells), figures.NO_ROWS),
        "batchnorm": ("BatchNorm's running statistics across replicas, per cell",
                      tables.batchnorm_table(cells), "no model in these results has BatchNorm"),
        "memory": ("Peak memory of each device, per cell", tables.memory_table(cells),
                   "no usable run recorded its memory"),
        "memory_devices": ("Memory against devices, per backend",
                           tables.memory_against_devices_table(cells),
                           "no usable run recorded its memory"),
        "overhead": ("Start-up seconds and epoch-1 extra seconds, per cell",
                     tables.overhead_table(cells), figures.NO_ROWS),
        "environment": ("What ran where", tables.environment_table(analysis.environments(frame)),
                        "there are no rows"),
    }


def markdown_page(meta, notices, verdict_lines, figure_links, missing, table_set,
                  sections=SECTIONS):
    """summary.md: the notices and verdicts, then each section's text, figures (where written as
    PNG, or why one is not drawn) and tables. Everything from the results is escaped
    (tables.markdown_text)."""
    text = tables.markdown_text
    parts = ["# xbench report", *map(text, meta), *[f"> **{text(n)}**" for n in notices],
             "## What the results say",
             "\n".join(f"- {text(line.strip())}" if line.startswith("  ") else f"\n**{text(line)}**"
                       for line in verdict_lines)]
    for heading, paragraphs, figure_names, table_names in sections:
        parts += [f"## {text(heading)}", *map(text, paragraphs)]
        for name in figure_names:
            if name in figure_links:
                title, caption, _ = figure_links[name]
                parts.append(f"![{title}]({name}.png)\n\n{text(caption)}")
            elif name in missing:
                title, reason = missing[name]
                parts.append(f"_{text(title)}: not drawn: {text(reason)}._")
        for name in table_names:
            title, table, empty = table_set[name]
            parts += [f"### {text(title)}",
                      tables.markdown(table) if len(table) else f"_(empty: {text(empty)})_"]
    return "\n\n".join(parts) + "\n"
