"""Predicted against measured: what `xbench predict` would have said of every N-device cell,
held out of its own calibration, beside what was measured."""
from matplotlib import ticker

from xbench.reports.numbers import analysis
from xbench.reports.rendering.figures import left_out, legend, look, panels, plain
from xbench.reports.rendering.predict_tables import check_table
from xbench.reports.sections.data import ReportData
from xbench.reports.sections.section import Figure, Made, Section, Table
from xbench.reports.step_model import predict

NO_PREDICTION = ("no N-device cell could be predicted: it needs attributed cells on 1 and on "
                 "more devices of one backend and setup (the smoke grid has 1 and 2)")
PREDICT_TEXT = (
    "What `xbench predict` would have said of each N-device cell from its backend's 1-device "
    "cell of the same setup and batch: compute from that cell's attributed parts (the "
    "per-sample ones in proportion to the per-device batch; on a CPU slower by the cores a rank "
    "lost, to a power calibrated per backend), the collectives the step waits for after "
    "backward on its timeline (the 1-device cell's gradients ready over backward, formed into "
    "buckets as the library forms them, queued on one stream, each its ring's passes over the "
    "link), and the wait for the slowest rank from the 1-device cell's spread. The link is what "
    "the library's collectives moved at when they ran after backward in other cells (a latency "
    "and an efficiency per library and class of link), else the probe's bandwidth, or a capped "
    "link's cap. Every cell is predicted from a "
    "calibration on the median of each other cell's runs, its own configuration (its seeds and "
    "capped-link twins) and every cell of its backend at its bucket size held out, so its error "
    "is held out; the errors are given apart for uncapped cells on one node (the headline), "
    "capped links (whose link is the cap set by hand) and several nodes, each with its skill: "
    "1 - its median error / that of the best predictor that knows nothing of the step (perfect "
    "scaling, the 1-device step, the other cells' median ratio to perfect scaling). How the "
    "model works: docs/numbers.md, \"Predicted\".")


def predicted_figure(data: ReportData) -> Made:
    """Each N-device cell's epoch time as the model predicted it (held out of its calibration)
    against the measured one, on the y = x line where the model is right."""
    check = predict.predicted(data.check)
    if check.empty:
        return NO_PREDICTION
    figure, (ax,) = panels(1, width=5.5, height=4.5, columns=1)
    for backend in sorted(check["backend"].unique(), key=analysis.backend_order):
        rows = check[check["backend"] == backend]
        capped, drawn = rows["link"].str.startswith("the cap"), look(backend)
        for chosen, edge, how in ((~capped, drawn.color, ""), (capped, "black", ", capped link")):
            if chosen.any():
                ax.scatter(rows.loc[chosen, "measured_seconds"], rows.loc[chosen, "epoch_seconds"],
                           color=drawn.color, marker=drawn.marker, edgecolors=edge,
                           linewidths=1.5, label=plain(backend + how))
    reach = [min(check["measured_seconds"].min(), check["epoch_seconds"].min()) * 0.8,
             max(check["measured_seconds"].max(), check["epoch_seconds"].max()) * 1.2]
    ax.plot(reach, reach, "k--", linewidth=1, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_number = ticker.FuncFormatter(lambda value, _: f"{value:g}")
    some = ticker.FuncFormatter(  # 2, 3 and 5 of each decade: the others would overlap
        lambda value, _: f"{value:g}" if value > 0 and f"{value:.0e}"[0] in "235" else "")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain_number)
        axis.set_minor_formatter(some)
    ax.tick_params(which="minor", labelsize=7)
    ax.set_xlabel("measured epoch-2 time (s)")
    ax.set_ylabel("predicted epoch time (s)")
    ax.grid(alpha=0.3)
    legend(figure, [ax])
    return ("Each point: one N-device cell, predicted from its backend's 1-device cell and a "
            "calibration on every other configuration's cells (reports.step_model.predict); on "
            "the dashed line the model is right." + left_out(data.frame, faults=False)), figure


SECTION = Section(
    name="predicted",
    title="Predicted against measured",
    paragraphs=[PREDICT_TEXT],
    figures=(Figure("predicted", "Predicted against measured epoch time, every N-device cell",
                    predicted_figure),),
    tables=(Table("predicted",
                  lambda data: f"Predicted against measured: {predict.check_summary(data.check)}",
                  lambda data: check_table(data.check), NO_PREDICTION),))
