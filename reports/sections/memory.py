"""Memory: the peak of each device and the model state it holds, per cell and against the device
count."""
import math

import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import (
    cell_labels,
    color,
    fixed_text,
    left_out,
    panels,
    without_faults,
)
from xbench.reports.rendering.tables import (
    CELL_VALUES,
    MIB,
    Column,
    Numbers,
    batch_text,
    column,
    num,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import NO_ROWS, Figure, Made, Section, Table

NO_MEMORY = "no usable run recorded its memory"


def recorded(cells):
    """The measured cells that recorded their memory."""
    measured = analysis.measured(cells)
    return measured[measured["memory_per_device"].map(bool)]


def memory_table(data: ReportData) -> Numbers:
    def imbalance(cell):
        values = cell["memory_per_device"]
        return max(values) / min(values) if min(values) > 0 else math.nan
    return numbers(recorded(data.cells), [
        *CELL_VALUES, ("device type", column("device_type")),
        Column("peak per device (MiB)", lambda c: mebibytes(c["memory_per_device"]),
               mebibytes_text),
        Column("max / min", imbalance, lambda v: "—" if math.isnan(v) else f"{v:.2f}"),
        Column("model state per device (MiB)", lambda c: mebibytes(c["model_state_per_device"]),
               mebibytes_text)])


def mebibytes(values) -> list[float]:
    """A list of bytes in MiB (empty where none was recorded)."""
    return [v / MIB for v in values]


def mebibytes_text(values: list[float]) -> str:
    """'12.3, 12.3', '—' where none was recorded."""
    return ", ".join(map(num, values)) if values else "—"


def memory_against_devices_table(data: ReportData) -> Numbers | pd.DataFrame:
    """Per backend and setup, one line: for each device count the largest peak of a device and
    the largest model state a device held (what sharding divides), side by side."""
    measured = recorded(data.cells)
    if measured.empty:
        return measured
    counts = sorted(measured["devices"].unique())
    setup = ["series", "nodes", *(c for c in analysis.SETUP if c != "backend")]
    lines = []
    for _, group in measured.groupby(setup, sort=False, dropna=False):
        first = group.iloc[0]
        line = {"env": first["env"], "backend": first["series"], "model": first["model"],
                "batch": batch_text(first), "nodes": first["nodes"],
                "training": first["training"]}
        for count in counts:
            at = group[group["devices"] == count]
            line[f"{count} device(s): peak / model state (MiB)"] = None if at.empty else (
                max(at.iloc[0]["memory_per_device"]) / MIB,
                max(at.iloc[0]["model_state_per_device"]) / MIB
                if at.iloc[0]["model_state_per_device"] else None)
        lines.append(line)
    values = pd.DataFrame(lines, dtype=object)
    return Numbers(values, {f"{count} device(s): peak / model state (MiB)": peak_and_state
                            for count in counts})


def peak_and_state(value: tuple[float, float | None] | None) -> str:
    """'300 / 3.00' MiB of a device count's largest peak and model state, '—' for none."""
    return "—" if value is None else f"{num(value[0])} / {num(value[1])}"


def memory_figure(data: ReportData) -> Made:
    """Bars of peak memory per device, one group per cell (device 0 first)."""
    cells = without_faults(data.cells)
    fixed = analysis.reference(cells, analysis.held_fixed("devices"))
    shown = analysis.at(cells, fixed)
    shown = shown[shown["memory_per_device"].map(bool)]
    if shown.empty:
        return NO_ROWS
    figure, (ax,) = panels(1, width=max(6.0, 1.0 * len(shown)), columns=1)
    for position, (_, cell) in enumerate(shown.iterrows()):
        values = [b / MIB for b in cell["memory_per_device"]]
        width = 0.8 / len(values)
        ax.bar([position - 0.4 + (i + 0.5) * width for i in range(len(values))], values, width,
               color=color(cell["backend"]), edgecolor="black", linewidth=0.5)
    cell_labels(ax, [f"{cell['series']}, {cell['devices']} dev" for _, cell in shown.iterrows()])
    ax.set_ylabel("peak memory per device (MiB)")
    ax.grid(axis="y", alpha=0.3)
    return (fixed_text(fixed) + "One bar per device of the cell, device 0 first. On GPU: peak "
            "allocated memory per GPU; on CPU: peak resident memory of each process."
            + left_out(data.frame)), figure


SHARDING = ", ".join(t.name for t in TRAITS.values() if t.shards_parameters)

SECTION = Section(
    name="memory",
    title="Memory",
    paragraphs=[
        "Peak memory per device where recorded: allocated memory per GPU, or peak resident "
        "memory per process on CPU. DataParallel gathers on device 0, which shows here.",
        "Model state: the trainable parameters and the optimizer's state a device holds between "
        f"steps, counted on its tensors at the end of the run; what sharding ({SHARDING}) divides "
        "over the devices, and what every other backend keeps whole on each device. On a CPU "
        "the peak also holds the framework and its libraries (FSDP's own add about 46 MiB) and "
        "the collectives' buffers, so a small model's sharded state need not lower it there.",
        "The second table lays each backend's memory side by side against the device count."],
    figures=(Figure("memory", "Figure: peak memory of each device, by cell", memory_figure),),
    tables=(Table("memory", "Peak memory of each device, per cell", memory_table, NO_MEMORY),
            Table("memory_devices", "Memory against devices, per backend",
                  memory_against_devices_table, NO_MEMORY)))
