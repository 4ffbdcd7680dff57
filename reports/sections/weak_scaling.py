"""The course lab (with --lab): the answers of HPML Lab 4, "Distributed Deep Learning", from a lab
grid's rows, in its own layout. Every number comes from reports.numbers.analysis; this module only
lays them out as the lab's questions and Tables 1-3 ask.
"""
import math

import pandas as pd

from xbench.common.backends.traits import TRAITS, in_words
from xbench.reports.judging import goodput
from xbench.reports.judging.verdict import Interval
from xbench.reports.numbers import analysis
from xbench.reports.rendering.tables import (
    MIB,
    Column,
    Numbers,
    bounds,
    estimate,
    estimate_text,
    field,
    num,
    numbers,
    ratio_text,
    table,
    with_interval,
)
from xbench.reports.sections.data import Options
from xbench.reports.sections.section import Section, Table

TIME_DEFINITION = (
    "Times are epoch 2's (epoch 1 warms up), over the usable repeats, with the 95% interval of "
    "the mean. xbench's epoch time includes the input pipeline, as the lab's question 2 asks; "
    "the lab's question 1 excludes data loading, so question 1 also gives the time the training "
    "loop waited for its batches (measured each epoch: `epochs[].input_seconds`) and the epoch "
    "time without it. Tables 2 and 3 come from the step attribution (see Where a step's time "
    "goes): compute = input, forward, backward, optimizer and host overhead (and what no step "
    "window covers), comm = waiting for the slowest rank and exposed communication, so the two "
    "add up to Table 1's time; the bandwidth is the collectives' counted moving time's "
    "(nccl-tests' busbw, the ring algorithm of the lab's [2]).")
TEXT = [
    "The lab's questions answered from the rows: question 1 (one device, the batch grown by a "
    "batch sweep until the first that does not fit in memory), Tables 1-3 (weak scaling: the "
    "per-device batch is held fixed), question 4 (the last epoch's training loss and accuracy, "
    "with and without the remedies of Goyal et al.: the learning rate scaled with the batch, and "
    "warmed up), question 5 (what DistributedSampler does without set_epoch, measured), question "
    "6 (what crosses the wire besides gradients) and the case study's question (does accuracy "
    "change with the device count).", TIME_DEFINITION]


def question_1(cells):
    """One device: epoch time per batch, its input wait, the time without it, and where a batch
    sweep's first batch that did not fit is."""
    ones = cells[cells["devices"] == 1]
    ones = ones.sort_values(["series", "training", "batch"])

    def outcome(cell):
        if cell["n"] > 0:
            return "fit"
        return "did not fit (oom)" if "oom" in cell["statuses"] else cell["statuses"]
    return numbers(ones, [
        ("backend", lambda c: c["series"]), ("training", lambda c: c["training"]),
        ("batch", lambda c: c["batch"]), ("outcome", outcome),
        Column("epoch time (s), 95% CI",
               lambda c: estimate(c["epoch2_seconds"], c["epoch2_seconds_ci"]), estimate_text()),
        field("waiting for input (s)", "epoch2_input_seconds"),
        Column("without input (s)", lambda c: c["epoch2_seconds"] - c["epoch2_input_seconds"],
               num)])


def table_1(scaling, cells):
    """Per backend and device count, for each per-device batch: time and speedup."""
    ones = analysis.measured(cells)
    ones = ones[(ones["devices"] == 1) & (ones["batch_mode"] == "per_device")]
    rows = [*[(c, "1") for _, c in ones.iterrows()],
            *[(s, ratio_text(s["speedup_ratio"])) for _, s in scaling.iterrows()
              if s["devices"] > 1 and s["batch_mode"] == "per_device"]]
    return pivot([{"backend": c["series"], "training": c["training"], "devices": c["devices"],
                   "batch": c["per_device_batch"], "Time (s)": seconds(c, "epoch2_seconds"),
                   "Speedup": speedup} for c, speedup in rows], ["Time (s)", "Speedup"])


def table_2(attributed):
    """Per backend and N > 1 devices, for each per-device batch: the epoch's compute and
    communication seconds from the step attribution, with their intervals; they add up to
    Table 1's time."""
    many = attributed[attributed["devices"] > 1] if len(attributed) else attributed
    return pivot([{"backend": c["series"], "training": c["training"], "devices": c["devices"],
                   "batch": c["per_device_batch"],
                   "Compute (s)": with_interval(c["compute_epoch_seconds"], c["compute_epoch_ci"]),
                   "Comm (s)": with_interval(c["comm_epoch_seconds"], c["comm_epoch_ci"])}
                  for _, c in many.iterrows()], ["Compute (s)", "Comm (s)"])


def table_3(attributed, limits):
    """Per backend and N > 1 devices, for each per-device batch: the bus bandwidth its counted
    communication achieved, and its share of the probe's (SUSPECT above it). DataParallel's
    reduction to one device, whose time no library counts, gets its traffic as the lab assumes
    it: the gradients once per device."""
    many = attributed[attributed["devices"] > 1] if len(attributed) else attributed
    records = []
    for _, c in many.iterrows():
        probed = limits[(limits["env"] == c["env"]) & (limits["cell_key"] == c["cell_key"])]
        share = probed["bandwidth_share"].iloc[0] if len(probed) else math.nan
        if analysis.protocol(c).through_one_device:
            bandwidth = (f"not counted; traffic {num(c['devices'] * c['bytes'] / MIB)} MiB/step "
                         f"(the gradients once per device)")
        else:
            bandwidth = with_interval(c["busbw"] * 1e-9, c["busbw_ci"] * 1e-9)
        records.append({"backend": c["series"], "training": c["training"],
                        "devices": c["devices"], "batch": c["per_device_batch"],
                        "Bandwidth (GB/s)": f"SUSPECT (above the probe's): {bandwidth}"
                        if share > 1 else bandwidth,
                        "of probe's": "—" if math.isnan(share) or share > 1 else f"{share:.0%}"})
    return pivot(records, ["Bandwidth (GB/s)", "of probe's"])


def question_4(cells):
    """The last epoch's training loss and accuracy of every cell, with each training setting
    (the remedies are lr scaling and warm-up), at the largest device count and at batch 128 on
    one device (the lab's baseline)."""
    ok = analysis.measured(cells)
    if ok.empty:
        return table(ok, [])
    chosen = ok[(ok["devices"] == ok["devices"].max())
                | ((ok["devices"] == 1) & (ok["per_device_batch"] == 128))]
    return numbers(chosen.sort_values(["series", "devices", "per_device_batch", "training"]), [
        ("backend", lambda c: c["series"]), ("devices", lambda c: c["devices"]),
        ("per-device batch", lambda c: c["per_device_batch"]),
        ("training", lambda c: c["training"]), ("epoch", lambda c: int(c["epochs_given"])),
        Column("training loss, 95% CI", lambda c: estimate(c["last_loss"], c["last_loss_ci"]),
               estimate_text()),
        Column("training accuracy, 95% CI",
               lambda c: estimate(c["last_accuracy"], c["last_accuracy_ci"]), estimate_text(4)),
        ("n", lambda c: c["n"])])


def question_5(cells):
    """Per pt-ddp and hvd-torch cell on N > 1 devices, with set_epoch and without: how many
    different orders torch's own DistributedSampler dealt over the epochs (given the same
    set_epoch calls), beside how many the cell trained (the global batches' digests)."""
    ok = analysis.measured(cells)
    ok = ok[(ok["devices"] > 1) & ok["sampler_digests"].map(bool)
            & ok["global_digests"].map(bool)]

    def distinct(digests):
        return f"{len(set(digests[0]))} of {len(digests[0])}"
    return table(ok.sort_values(["series", "devices", analysis.BATCH, "training"]), [
        ("backend", lambda c: c["series"]), ("devices", lambda c: c["devices"]),
        ("batch", lambda c: f"{analysis.batch_kind(c['batch_mode'])} {c['batch']}"),
        ("training", lambda c: c["training"]),
        ("set_epoch each epoch", lambda c: "yes" if c["set_epoch"] else "no"),
        ("orders torch's DistributedSampler dealt (epochs)", lambda c: distinct(
            c["sampler_digests"])),
        ("orders trained", lambda c: distinct(c["global_digests"])),
        ("what it means", lambda c: "each epoch shuffles anew" if len(set(c["sampler_digests"][0]))
         > 1 else "every epoch deals the same order: the sampler seeds its shuffle with the "
                  "epoch, which stays 0 without set_epoch")])


def question_6(cells):
    """What each backend sends between its devices in one step, item by item."""
    ok = analysis.measured(cells)
    ok = ok[ok["devices"] > 1].drop_duplicates(["series", "devices"])
    items = [{"backend": c["series"], "devices": c["devices"], **item}
             for _, c in ok.iterrows() for item in c["traffic"]]
    return Numbers(pd.DataFrame(
        [[i["backend"], i["devices"], i["what"], i["bytes"] / MIB, i["how"], i["basis"]]
         for i in items],
        columns=["backend", "devices", "what", "MiB per step", "counted or computed", "how"],
        dtype=object), {"MiB per step": num})


def case_study(cells):
    """Test accuracy on N devices minus on 1, per backend and batch, with Welch's interval."""
    changes = analysis.accuracy_change(cells)
    return numbers(changes, [
        ("backend", lambda c: c["series"]), ("training", lambda c: c["training"]),
        ("batch", lambda c: f"{analysis.batch_kind(c['batch_mode'])} {c['batch']}"),
        ("devices", lambda c: c["devices"]),
        field("test accuracy", "test_accuracy", lambda v: num(v, 4)),
        field("on 1 device", "test_accuracy_ref", lambda v: num(v, 4)),
        Column("difference, 95% CI", lambda c: Interval(*c["difference"]),
               lambda v: f"{v.value:+.4f} {bounds(v.low, v.high)}")])


def seconds(cell, field):
    """'1.23 [1.10, 1.36]', or the mean alone without an interval (one repeat)."""
    return with_interval(cell[field], cell[f"{field}_ci"])


def pivot(records, values):
    """The lab's layout: one line per backend, training and device count; per batch, the
    `values` columns side by side."""
    if not records:
        return pd.DataFrame(columns=["backend", "training", "devices"])
    frame = pd.DataFrame(records)
    wide = frame.pivot_table(index=["backend", "training", "devices"], columns="batch",
                             values=values, aggfunc="first")
    batches = sorted(frame["batch"].unique())
    out = wide.reset_index()[["backend", "training", "devices"]]
    out.columns = ["backend", "training", "devices"]
    for batch in batches:
        for value in values:
            out[f"batch {batch}/device: {value}"] = [
                v if isinstance(v, str) else "—" for v in wide[(value, batch)]]
    out["devices"] = out["devices"].map(lambda d: f"{d}-device")
    return out.astype(str)


def asked(options: Options) -> bool:
    return options.lab


ATTRIBUTED = "it needs N-device cells whose rows attribute their steps"
# the backends whose ranks draw with a DistributedSampler (question 5 is theirs)
SAMPLERS = [t.name for t in TRAITS.values() if t.distributed_sampler]

SECTION = Section(
    name="lab",
    title="The course lab",
    paragraphs=TEXT,
    tables=(
        Table("lab_q1", "Question 1: one epoch per batch on one device",
              lambda data: question_1(data.cells),
              "no 1-device cells: run the lab preset (its batch sweep)"),
        Table("lab_table1", "Table 1: time and speedup per batch per device",
              lambda data: table_1(data.scaling, data.cells),
              "it needs per_device batches on 1 and more devices (the lab preset)"),
        Table("lab_table2", "Table 2: compute and communication per epoch (they add up to "
              "Table 1's time)", lambda data: table_2(data.attributed), ATTRIBUTED),
        Table("lab_table3", "Table 3: communication bandwidth utilisation",
              lambda data: table_3(data.attributed, data.limits), ATTRIBUTED),
        Table("lab_q4", "Question 4: the last epoch's training loss and accuracy, with and "
              "without the remedies", lambda data: question_4(data.cells), "no usable cells"),
        Table("lab_q4_target", "Question 4 to a target: time to the target accuracy without "
              "and with each remedy", lambda data: goodput.remedies_table(data.targets),
              "it needs cells with a target accuracy (--target-accuracy) under each remedy "
              "(--lr-scaling none,linear --warmup-epochs 0,1)"),
        Table("lab_q5", "Question 5: sample orders with and without set_epoch",
              lambda data: question_5(data.cells),
              f"it needs {in_words(SAMPLERS, 'or')} cells on N > 1 devices (--no-set-epoch for "
              f"the contrast)"),
        Table("lab_q6", "Question 6: what crosses the wire in one step",
              lambda data: question_6(data.cells), "it needs cells on N > 1 devices"),
        Table("lab_case", "Case study: test accuracy on N devices against 1",
              lambda data: case_study(data.cells),
              "it needs cells on 1 and N devices of one backend"),
    ),
    shown=asked)
