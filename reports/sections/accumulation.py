"""Accumulation: each setup run at more than one gradient accumulation, side by side, and whether
syncing once a step pays off (reports.judging.knobs)."""
from xbench.reports.judging import knobs
from xbench.reports.rendering.tables import (
    CELL_VALUES,
    RATE_INTERVAL,
    Numbers,
    column,
    field,
    num,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Section, Table

NEEDS = ("it needs one setup run at more than one accumulation (--accumulate 1,4 "
         "--accumulate-sync last,each), e.g. `xbench grid --preset knobs`")


def accumulation_table(data: ReportData) -> Numbers:
    return numbers(knobs.accumulation_table(data.cells), [
        *CELL_VALUES, ("link", column("inject")),
        field("micro-batches (K)", "accumulate", str), ("sync", column("accumulate_sync")),
        field("epoch-2 rate (samples/s)", "epoch2_rate"), RATE_INTERVAL,
        field("optimizer steps/s", "steps_per_second"),
        field("collectives / step (counted)", "collectives_counted"),
        ("gradient bytes reduced / step", lambda c: f"{num(c['step_bytes'])} ({c['bytes_how']})")])


def findings(data: ReportData) -> list[str]:
    """Each comparison's verdict, or what would give the section one."""
    return knobs.answers(
        knobs.accumulation_findings(data.cells),
        "K micro-batches of batch / K per optimizer step, synced once a step (last) or after "
        "every micro-batch (each): " + NEEDS + ".")


SECTION = Section(
    name="accumulation",
    title="Accumulation",
    answers=findings,
    paragraphs=[
        "K micro-batches of batch / K per optimizer step, their gradients summed into one "
        "update: the same global batch, so for a model without BatchNorm the same trajectory. "
        "Synced last, the gradients cross once a step (DDP's and FSDP's no_sync, Horovod's "
        "backward_passes_per_step, summed inside TensorFlow's and JAX's step); synced each, "
        "after every micro-batch, as a naive loop does: K times the bytes. The bytes a step are "
        "the collectives' as the library counted them where it tells them (else computed from "
        "the model). Cells are compared only with cells alike in every other setting, their "
        "link included: a verdict holds for the link they ran on."],
    tables=(Table("accumulation", "Rate and bytes per optimizer step by micro-batches and sync",
                  accumulation_table, NEEDS),))
