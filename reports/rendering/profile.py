"""What `xbench profile` shows of its record (common.running.profile): a table per framework, a
figure of the units side by side, and the JSON file with every round's seconds."""
import json
from pathlib import Path

from matplotlib.figure import Figure

from xbench.common.measuring.contention import taken_share
from xbench.common.results.outputs import whole_file
from xbench.common.terminal import table, width, wrap
from xbench.reports.rendering.figures import color, render
from xbench.reports.rendering.tables import num

COLUMNS = ("unit", "layer", "output", "params", "fwd ms [95% CI]", "bwd ms [95% CI]",
           "share [95% CI]", "fwd GFLOP/s [95% CI]", "bwd GFLOP/s [95% CI]")
FILE_COLUMNS = 200  # profile.txt's width: a file is read in an editor, not a terminal
# left out first, in this order, where the terminal is too narrow for every column
OPTIONAL = ("layer", "output", "params", "bwd GFLOP/s [95% CI]", "fwd GFLOP/s [95% CI]")
METHOD = ("Each unit runs alone on its input inside the model, forward then backward (the "
          "gradients of its weights and input), synchronised, wall clock, once per round beside "
          "one whole training step; share = the unit's forward + backward / the whole step; "
          "GFLOP/s = 2 x multiply-accumulates of its convolutions and dense layers / the time "
          "(backward: twice the forward's, once for the first unit, which computes no input "
          "gradient); times, shares, rates and sums are taken per round, and each shown is the "
          "median of the kept rounds with its distribution-free 95% interval.")


def median_text(summary, scale: float = 1.0, form=num) -> str:
    """'1.23 [1.20, 1.31]': a median (common.running.profile.median_interval) and its interval times
    `scale`; '—' where there is none."""
    if summary is None:
        return "—"
    median, low, high = (form(summary[key] * scale) for key in ("median", "low", "high"))
    return f"{median} [{low}, {high}]"


def ms(summary) -> str:
    """A time in milliseconds with its interval."""
    return median_text(summary, 1e3)


def percent(summary) -> str:
    """A share in per cent with its interval."""
    return median_text(summary, 100, lambda value: f"{value:.1f}%")


def table_text(record: dict, columns: int | None = None) -> str:
    """The profile as plain text within `columns` (the terminal's by default): one table per
    framework, then what was not measured."""
    columns = columns or width()
    lines = [f"{record['model']}, batch {record['batch']}, {record['data']} data, "
             f"{record['warmup']} warm-up + {record['steps']} timed rounds"]
    for framework in record["frameworks"]:
        step = framework["step"]
        lines += ["", f"{framework['backend']}: {framework['framework']} "
                      f"{framework['framework_version']} on {framework['device_name']} "
                      f"({framework['device_type']}, {framework['threads']} threads)"]
        rows = [[unit["unit"], unit["layer"], "x".join(map(str, unit["output_shape"])),
                 f"{unit['params']:,}", ms(unit["forward"]), ms(unit["backward"]),
                 percent(unit["share_of_step"]), median_text(unit["forward_gflops"]),
                 median_text(unit["backward_gflops"])] for unit in framework["units"]]
        lines.append(table(list(COLUMNS), rows, columns, OPTIONAL))
        which = "every unit" if framework["all_units"] else "the units timed"
        lines += [f"whole step: {ms(step['total'])} ms; its passes: forward with loss "
                  f"{ms(step['forward'])}, backward {ms(step['backward'])}, optimizer "
                  f"{ms(step['optimizer'])}",
                  f"{which}, each alone: {ms(framework['units_seconds'])} ms "
                  f"({percent(framework['units_share'])} of the step)"
                  + (rest_text(framework["rest_seconds"]) if framework["all_units"] else ""),
                  contention_text(framework["contention"])]
    lines += [f"{missing['backend']}: not measured: {missing['why'].splitlines()[0]}"
              for missing in record["not_measured"]]
    return wrap("\n".join([*lines, "", METHOD]), columns)


def rest_text(rest: dict) -> str:
    """What the step spends beyond its units alone (the loss, the optimizer, the framework), or
    why the units alone took longer."""
    if rest["median"] >= 0:
        return f"; rest of step (loss, optimizer, framework): {ms(rest)} ms"
    beyond = {"median": -rest["median"], "low": -rest["high"], "high": -rest["low"]}
    return (f"; {ms(beyond)} ms more than the step: alone, each pass pays its own launch "
            f"and synchronisation, which passes inside a step overlap")


def contention_text(contention: dict) -> str:
    """What else used the machine while it was timed; CONTENDED past the cell's limit."""
    share = taken_share(contention)
    text = (f"other processes, interrupts, busy siblings, steal and throttling took {share:.0%} "
            f"of its cores while it was timed (1-minute load {contention['load_1m']:.1f})")
    return ("CONTENDED: " + text + ": these times are not this machine's") \
        if contention["contended"] else text


def figure(record: dict) -> Figure:
    """Horizontal bars, one group per unit: each framework's forward and backward medians
    stacked, with their 95% intervals."""
    frameworks = record["frameworks"]
    units = [u["unit"] for u in frameworks[0]["units"]] if frameworks else []
    figure = Figure(figsize=(7.5, 1.2 + 0.32 * len(units) * max(1, len(frameworks))))
    ax = figure.subplots()
    height = 0.8 / max(1, len(frameworks))
    for number, framework in enumerate(frameworks):
        rows = {u["unit"]: u for u in framework["units"]}
        where = [i + number * height for i in range(len(units))]
        forward = [rows[u]["forward"] for u in units]
        backward = [rows[u]["backward"] or {"median": 0, "low": 0, "high": 0} for u in units]
        tint = color(framework["backend"])
        ax.barh(where, [f["median"] * 1e3 for f in forward], height, color=tint,
                xerr=errors(forward), label=f"{framework['backend']} forward "
                f"(whole step {framework['step']['total']['median'] * 1e3:.3g} ms)")
        ax.barh(where, [b["median"] * 1e3 for b in backward], height, hatch="//",
                left=[f["median"] * 1e3 for f in forward], color="white", edgecolor=tint,
                xerr=errors(backward), label=f"{framework['backend']} backward")
    ax.set_yticks([i + height * (len(frameworks) - 1) / 2 for i in range(len(units))], units)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per pass (median, 95% CI)")
    ax.set_title(f"{record['model']}, batch {record['batch']}: each unit's forward and backward")
    ax.legend(fontsize="small", loc="lower right")
    return figure


def errors(summaries):
    """matplotlib's xerr (below, above) in ms of the medians' intervals."""
    return [[(s["median"] - s["low"]) * 1e3 for s in summaries],
            [(s["high"] - s["median"]) * 1e3 for s in summaries]]


def write(record: dict, out: Path) -> list[Path]:
    """profile.json (every round's seconds), profile.txt and profile.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "profile.json", out / "profile.txt", out / "profile.png"]
    contents = [(json.dumps(record, indent=1) + "\n").encode(),
                (table_text(record, FILE_COLUMNS) + "\n").encode(),
                render(figure(record), "png")]
    for path, content in zip(written, contents, strict=True):
        with whole_file(path) as partial:
            partial.write_bytes(content)
    return written
