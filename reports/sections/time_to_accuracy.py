"""Time to accuracy: each configuration's time to its target accuracy over its seeds, beside its
throughput (reports.judging.goodput)."""
from xbench.reports.judging import goodput
from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import TAB10, left_out, panels, plain, wrapped
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Figure, Made, Section, Table

NO_TARGET = ("no usable run has a target: run a grid with --target-accuracy (or a language "
             "model's --target-loss), e.g. `xbench grid --preset time-to-accuracy`")


def accuracy_curves(data: ReportData) -> Made:
    """Per backend and target, every run's test accuracy (or loss, for a target loss) at its
    evaluations against wall-clock time (evaluations included), one colour per batch and device
    count, the target dashed."""
    targets = data.targets
    if targets.empty or not any(curve for curves in targets["curves"] for curve in curves):
        return NO_TARGET
    panels_of = list(targets.groupby(["series", "training", "metric", "target"], sort=False))
    figure, axes = panels(len(panels_of), columns=2)
    for ax, ((series, training, metric, target), rows) in zip(axes, panels_of, strict=True):
        for n, (_, c) in enumerate(rows.iterrows()):
            label = (f"{analysis.batch_kind(c['batch_mode'])} {c['batch']}, "
                     f"{analysis.devices_text(c['devices'])}")
            for k, curve in enumerate(c["curves"]):
                ax.plot([p["seconds"] for p in curve], [p[metric] for p in curve],
                        color=TAB10[n % len(TAB10)], alpha=0.7, linewidth=1,
                        label=plain(label) if k == 0 else "_nolegend_")
        ax.axhline(target, color="black", linestyle="--", linewidth=1)
        ax.set_title(wrapped(f"{series}, {training}", 4.6, fontsize=10), fontsize="small")
        ax.set_xlabel("seconds of the epochs from the first step (evaluations included)")
        if metric == "loss":
            ax.set_ylabel("test loss (nats; a language model's per token)")
        else:
            ax.set_ylabel("test accuracy (fraction)")
            ax.set_ylim(max(0.0, min(target - 0.1, ax.get_ylim()[0])), 1.0)
        ax.legend(fontsize="x-small")
        ax.grid(alpha=0.3)
    return ("One line per run (seed); dashed: the target. A run that reached it ends at the end "
            "of that epoch and evaluates no more, so its last point is the one that reached it; "
            "a run that never did ends at its last epoch."
            + left_out(goodput.target_rows(data.frame), faults=False), figure)


SECTION = Section(
    name="time_to_accuracy",
    title="Time to accuracy",
    paragraphs=[
        goodput.TIME_TEXT,
        "The second table names, per backend, the batch and device count with the shortest "
        "time to the target beside the one with the highest throughput, and whether the "
        "shortest is surely the shortest: where it is and the two differ, the extra samples "
        "the faster configuration needs cost more than its speed gains."],
    figures=(Figure("time_to_accuracy", "Test accuracy against time, every run to its target",
                    accuracy_curves),),
    tables=(Table("time_to_target",
                  "Time to the target accuracy, per configuration over its seeds",
                  lambda data: goodput.target_text_table(data.targets), NO_TARGET),
            Table("goodput", "The shortest time to the target beside the highest throughput",
                  lambda data: goodput.goodput_table(data.targets), NO_TARGET)))
