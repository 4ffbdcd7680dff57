"""Where a step's time goes: the attributed parts of every cell's step, and what the collectives
of N-device cells waited for, moved and how fast."""
import numpy as np
import pandas as pd

from xbench.common.backends.protocol import ALL_REDUCE
from xbench.common.measuring.attribution import MEANING, PARTS
from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import (
    by_series,
    cell_labels,
    fixed_text,
    left_out,
    legend,
    mark,
    panels,
    wrapped,
)
from xbench.reports.rendering.tables import (
    CELL_VALUES,
    MIB,
    Column,
    Numbers,
    column,
    estimate,
    estimate_text,
    field,
    num,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Figure, Made, Section, Table

NO_ATTRIBUTION = ("no usable run records its step attribution (rows of xbench before schema 5 "
                  "do not): run the grid again")
PART_COLORS = dict(zip(PARTS, ["#8c564b", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#d62728", "#7f7f7f", "#e8e8e8"], strict=True))
COMMUNICATION = (
    "Every step of every rank is split into input, forward, backward, optimizer, waiting for "
    "the slowest rank, exposed communication, host overhead and what nothing covered "
    "(untraced) (common.measuring.attribution): the boundaries come from the host clock (CUDA "
    "events on a GPU), and each collective is timed from its launch to its completion by the "
    "library that runs it (DDP's communication hook and its future, Horovod's handles, "
    "TensorFlow's profiler trace). Communication = the time a collective was in flight; "
    "overlap share = the part of it during which the rank also computed / communication (HTA's "
    "and the PyTorch profiler's definition: on a CPU a collective in flight beside backward may "
    "only be waiting for a core, so it is not what is hidden); exposed communication = the "
    "step's wait for the collectives after every rank's compute was done; waiting = from this "
    "rank's compute done to the last rank's. Moving time = communication less waiting, per step "
    "(median; the rank that saw the most of it). Collectives alone = the step's bytes at the "
    "rate its collectives launched after backward moved at (sharing no core with it), where "
    "those carried at least a quarter of the bytes, else the moving time; hidden share = 1 − "
    "exposed communication / collectives alone: what of its collectives the step did not wait "
    f"for (0 for one bucket launched after backward). Bandwidth for backends that {ALL_REDUCE} "
    "(nccl-tests' convention: algbw = bytes reduced / time, busbw = algbw × 2(N−1)/N), from "
    "the collectives after backward where every run had enough of them, else from the moving "
    "time (busbw from says which), from the bytes the library reduced where counted, else the "
    "model's gradients as the cell's compression sends them; a reduction to one device "
    "(DataParallel, MirroredStrategy on a CPU) gets no ring bandwidth.")
ATTRIBUTION_TEXT = (
    "The parts: " + "; ".join(f"{part}, {meaning}" for part, meaning in MEANING.items()) + ". "
    "Each in ms per step (the mean over the cell's ranks and repeats, with the "
    "95% interval over repeats) and as a share of the step. They add up to the step windows by "
    "construction; what the windows do not cover of the epoch (its iterator's set-up, the final "
    "synchronisation) is the residual, and a cell whose residual is above 5% of its epoch says "
    "so, as does a cell whose untraced share of the step is above 10% (UNTRACED). How each "
    "part is known is in the rows (attribution.how). Cells with an injected fault "
    "(inject) show where it landed, and stay out of every verdict.")


def attribution_table(data: ReportData) -> Numbers:
    """Every attributed cell: each part of a step in ms with its interval and its share, the
    step, whether it added up, and the slowest rank."""
    def part(name) -> Column:
        return Column(f"{name} (ms)", lambda c: (milliseconds(c, f"{name}_step", f"{name}_step_ci"),
                                                 c[f"{name}_share"]),
                      lambda v: f"{estimate_text()(v[0])} ({v[1]:.0%})")

    def added(c):
        untraced = (f"; UNTRACED: {c['untraced_share']:.0%} of the step no mark or trace covers"
                    if c["untraced_share"] > analysis.UNTRACED_LIMIT else "")
        return (f"yes (residual {c['residual_share']:.1%}){untraced}" if c["adds_up"] else
                f"NO: {c['residual_share']:.1%} of the epoch is in no step{untraced}")
    return numbers(data.attributed, [
        *CELL_VALUES, ("training", column("training")), field("n", "n_attributed", str),
        *map(part, PARTS),
        Column("step (ms)", lambda c: sum(c[f"{name}_step"] for name in PARTS) * 1000, num),
        ("parts add up", added),
        Column("slowest rank", lambda c: None if pd.isna(c["slowest_rank"])
               else int(c["slowest_rank"]), lambda v: "—" if v is None else str(v))])


def milliseconds(cell, name: str, ci: str):
    """Seconds of `cell` as ms with their interval."""
    return estimate(cell[name] * 1000, cell[ci] * 1000)


# The communication table's times, each a mean a step on the steps that carry collectives.
BASIS = {"waiting for the slowest rank": "waiting_basis_seconds",
         "exposed communication": "exposed_basis_seconds",
         "collectives alone": "alone_seconds", "under compute": "under_compute_seconds",
         "in flight": "busy_basis_seconds", "waiting for a core": "core_wait_seconds"}


def communication_table(data: ReportData) -> Numbers:
    """The cells whose gradients cross between N > 1 devices, every number on one basis (the
    steps that carry collectives: reports.numbers.communication): what the step waits for, the
    collectives' time alone and of it under compute, how long they were in flight and why, and
    what they moved and how fast (words where a reduction to one device has no ring
    bandwidth)."""
    def ring(value):
        return lambda c: (value(c) if analysis.protocol(c).is_all_reduce
                          else f"— ({c['reduction']}: no ring bandwidth)")

    def ms(name):
        return field(f"{name} (ms/step)", BASIS[name], lambda v: "—" if pd.isna(v)
                     else num(v * 1000))
    attributed = data.attributed
    many = attributed[attributed["devices"] > 1] if len(attributed) else attributed
    return numbers(many, [
        *CELL_VALUES, ("training", column("training")), ("reduction", column("reduction")),
        field("steps carrying collectives", "basis_steps",
              lambda v: "—" if pd.isna(v) else f"{v:.0f}"),
        *map(ms, BASIS),
        field("hidden share (not waited for)", "hidden_share",
              lambda v: "—" if pd.isna(v) else f"{v:.0%}"),
        field("overlap share (in flight while computing, HTA's)", "overlap_share",
              lambda v: "—" if pd.isna(v) else f"{v:.0%}"),
        ("not known", lambda c: c["why_missing"] if isinstance(c["why_missing"], str) else "—"),
        Column("bytes reduced (MiB/step)", lambda c: (c["bytes"] / MIB, c["bytes_how"]),
               lambda v: f"{num(v[0])} ({v[1]})"),
        Column("algbw (GB/s)", ring(lambda c: c["algbw"] * 1e-9), num),
        Column("busbw (GB/s)", ring(lambda c: estimate(c["busbw"] * 1e-9, c["busbw_ci"] * 1e-9)),
               estimate_text()),
        ("busbw from", lambda c: c["busbw_from"] or "—")])


def step_parts(data: ReportData) -> Made:
    """Per model, stacked bars of the parts of one step of every backend and device count side
    by side: in ms (the mean over repeats), and beside them as shares of the step, so that one
    long step does not hide how the others' split; SUSPECT and contended cells ringed."""
    attributed = data.attributed
    if attributed.empty:
        return NO_ATTRIBUTION
    fixed = analysis.reference(attributed, [*analysis.held_fixed("model", "devices"), "training"])
    shown = analysis.at(attributed, fixed).merge(
        data.cells[["env", "cell_key", "contended_runs"]], on=["env", "cell_key"], how="left")
    models = sorted(shown["model"].unique())
    width = max(6.0, 0.45 * shown["model"].value_counts().max() + 1)
    figure, axes = panels(2 * len(models), width=width, columns=2)
    for row, model in enumerate(models):
        cells = pd.DataFrame([cell for _, _, series in by_series(shown[shown["model"] == model])
                              for _, cell in series.sort_values("devices").iterrows()])
        steps = np.array([sum(cell[f"{part}_step"] for part in PARTS) for _, cell in
                          cells.iterrows()]) * 1000
        labels = [f"{cell['series']}, {cell['devices']} dev" for _, cell in cells.iterrows()]
        for ax, kind, unit, scale in (
                (axes[2 * row], "in ms", "one step (ms, mean over repeats)", 1.0),
                (axes[2 * row + 1], "shares", "share of the step (%)",
                 np.divide(100, steps, out=np.zeros_like(steps), where=steps > 0))):
            bottom = np.zeros(len(cells))
            for part in PARTS:
                height = cells[f"{part}_step"].to_numpy(float) * 1000 * scale
                ax.bar(range(len(cells)), height, 0.7, bottom=bottom, color=PART_COLORS[part],
                       label=part)
                bottom += height
            mark(ax, range(len(cells)), bottom, cells, data.suspect)
            cell_labels(ax, labels)
            ax.set_ylabel(unit)
            ax.set_title(wrapped(f"model {model}: {kind}", width))
            ax.grid(axis="y", alpha=0.3)
    legend(figure, list(axes))
    return (fixed_text(fixed) + "Each bar: one step of the cell, split into its parts (the mean "
            "over its ranks and repeats): input, forward, backward, optimizer, waiting for the "
            "slowest rank, exposed communication, host overhead; left in ms, right as shares of "
            "the cell's own step (each bar 100%)."
            + left_out(data.frame, faults=False)), figure


SECTION = Section(
    name="steps",
    title="Where a step's time goes",
    paragraphs=[COMMUNICATION, ATTRIBUTION_TEXT],
    figures=(Figure("step_parts", "Where a step's time goes, per cell", step_parts),),
    tables=(Table("attribution", "The parts of a step, per cell", attribution_table,
                  NO_ATTRIBUTION),
            Table("communication", "Waiting, communication and bandwidth of every N-device cell",
                  communication_table,
                  "it needs attributed cells on N > 1 devices (the smoke grid has 2)")))
