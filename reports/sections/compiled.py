"""Compiled or eager: each setup run with its step compiled and not, side by side, with what
compiling costs up front and the job length from which it pays off (reports.judging.knobs)."""
from xbench.reports.judging import knobs
from xbench.reports.rendering.tables import (
    CELL_VALUES,
    RATE_INTERVAL,
    Numbers,
    column,
    field,
    numbers,
)
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Section, Table

NEEDS = ("it needs one setup run compiled and not (--compile off,on), e.g. `xbench grid "
         "--preset knobs`")


def compiled_table(data: ReportData) -> Numbers:
    return numbers(knobs.compile_table(data.cells), [
        *CELL_VALUES, ("--compile", column("compile")), ("the step", column("compiled_how")),
        field("epoch-2 rate (samples/s)", "epoch2_rate"), RATE_INTERVAL,
        field("warm-up (s)", "warmup_seconds"),
        field("warm-up 95% CI half-width (s)", "warmup_seconds_ci")])


def findings(data: ReportData) -> list[str]:
    """Each comparison's verdict and pay-off, or what would give the section one."""
    return knobs.answers(
        knobs.compile_findings(data.cells),
        "Compiled steps against each framework's default, with their warm-up: " + NEEDS + ".")


SECTION = Section(
    name="compiled",
    title="Compiled or eager",
    answers=findings,
    paragraphs=[
        "Compiling (torch.compile; TensorFlow's jit_compile=True) trades a longer first epoch "
        "for faster steps. Warm-up: what epoch 1 took beyond its steps at the last epoch's "
        "median step, plus a compile ahead of time (JAX's): tracing, compiling, first "
        "allocations. Compiling pays off in a job longer than its extra warm-up over the time "
        "it saves an epoch. JAX compiles every step (jax.jit), whatever --compile: its cells "
        "are shown with their warm-up."],
    tables=(Table("compiled", "Rate and warm-up compiled and not", compiled_table, NEEDS),))
