"""Repeats until conclusive (`xbench grid --until-conclusive`): which cells to repeat next, and
when to stop, judged by the report's own comparisons. The policy lives with the judging it
reads; the command line gives it the runner."""
import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

from xbench.common.grids.cell import Cell
from xbench.reports.judging.comparisons import judged
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load
from xbench.reports.numbers.stats import LOOKS, MAX_REPEATS


def settle(cells: list[Cell], results_path: Path, budget_minutes: float,
           say: Callable[..., None], run: Callable[[list[Cell]], list[dict]]) -> list[dict]:
    """Repeats until conclusive (hyperfine's and pyperf's idea, for a grid's comparisons): while
    a cell of the grid ran ok but has no usable run (every run contended), or a comparison of
    its cells is open and more repeats can settle it, run one more repeat of each such cell, or
    of both cells of the most uncertain comparison (largest p-value) first, unless those runs
    would overrun the budget. Each round is a look of the grid's (its own repeats the first):
    its runs say which, there are LOOKS at most, so no comparison of its cells is tested more
    often whatever cells a round repeats, and the report tests a comparison with looks at a
    look's level (reports.numbers.stats.sequential_p): repeating until a verdict appears keeps its
    error rate. `run` runs the repeats asked for (the runner, as the command line gives it) and
    returns their rows; `say(text, err=False)` tells the user. Returns the rows it added."""
    grid_cells = {cell.key: cell for cell in cells}
    deadline, added = time.monotonic() + budget_minutes * 60, []
    while True:
        frame, _ = load([results_path])
        frame = frame[frame["cell_key"].isin(grid_cells)]
        runs = frame.groupby("cell_key")["repeat"].max()
        look = int(frame["look"].max()) + 1 if len(frame) else 1  # the grid's next round
        usable = frame[frame["usable"]].groupby("cell_key").size()
        unmeasured = [key for key in dict.fromkeys(frame[frame["status"] == "ok"]["cell_key"])
                      if not usable.get(key, 0)]
        pending = [o for o in judged(analysis.cell_table(frame))[1].open
                   if set(o.keys) <= set(grid_cells)]
        tried = [o.keys for o in sorted(pending, key=lambda o: -1.0 if math.isnan(o.p_value)
                                        else -o.p_value) if o.settleable]
        allowed = {key for key in grid_cells if runs.get(key, -1) + 1 < MAX_REPEATS}
        # every cell without a usable run one more repeat at once (not the first one only, over
        # and over), else both cells of the most uncertain comparison
        keys = (tuple(key for key in unmeasured if key in allowed)
                or next((k for k in tried if set(k) <= allowed), None))
        if not keys:
            break
        if look > LOOKS:
            say(f"until conclusive: the sequential plan's {LOOKS} looks are spent", err=True)
            break
        took = frame[frame["cell_key"].isin(keys)]["cell_seconds"].mean()
        if time.monotonic() + len(keys) * (0.0 if math.isnan(took) else took) > deadline:
            say(f"until conclusive: the budget of {budget_minutes:g} min is spent", err=True)
            break
        more = [dataclasses.replace(grid_cells[key], repeat=int(runs.get(key, -1)) + 1, look=look)
                for key in dict.fromkeys(keys)]
        say(f"until conclusive: look {look} of at most {LOOKS}, one more repeat of "
            f"{' and '.join(c.label for c in more)}")
        ran = run(more)
        if not ran:  # another grid holds them, or nothing could be written: no progress here
            say("until conclusive: the repeats did not run here; stopping", err=True)
            break
        added += ran
    left = [f"{key} (no uncontended run)" for key in unmeasured] + [
        f"{' vs '.join(o.keys)} ({open_reason(o)})" for o in pending]
    say(f"until conclusive: {len(added)} run(s) added; "
        + (f"{len(left)} still open: " + "; ".join(left) if left
           else "every comparison of the grid's cells is settled"), err=bool(left))
    return added


def open_reason(comparison) -> str:
    if comparison.held:
        return "held back by its look's level or the false-discovery control"
    if comparison.repeats < 2:
        return "one run on a side"
    if comparison.needed is None:
        return "within the noise: more repeats are unlikely to settle it"
    return f"about {comparison.needed} repeats a side would settle it"
