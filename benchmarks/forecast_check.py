"""Do the dry run's forecasts hold? Issue 66's goals, each printed beside what was reached:

- the dry run on an empty cache answers within a minute (it measures each framework's
  reference, within common.running.timings.PROBES_SECONDS), and within 5 s with a kept one;
- the total forecast within 25% of the real run;
- per cell, real seconds over the forecast: goal, 80% of the cells within 0.5x-2x.

    python benchmarks/forecast_check.py --preset smoke --data-dir ../shared/data/mnist
    python benchmarks/forecast_check.py --preset knobs --data-dir ../shared/data/mnist

From a fresh results folder and an empty cache (a temporary XBENCH_CACHE): the dry run through
the real command line (timed), again until one measures nothing (timed: a busy machine's first
may leave a reference to the next, past its 30 s), the forecasts it printed
(made again here from what it kept: rows and kept timings only, measuring nothing), then the
grid for real, then each cell's real seconds (its row's cell_seconds) over its forecast. The
machine's load is printed before and after: timings are this machine's, so each run is a fact
about that run only.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xbench.common.grids import grid as grid_module
from xbench.common.results.store import read_rows
from xbench.common.running.estimate import estimate
from xbench.common.running.launch import make_launcher

WITHIN = (0.5, 2.0)  # a cell's real seconds over its forecast, the goal's band
TOTAL_GOAL, SHARE_GOAL = 0.25, 0.8


def xbench(*arguments: str, check: bool = True) -> tuple[float, str]:
    """Run `xbench ARGUMENTS` (its output shown), its wall seconds and output; stop where it
    fails (`check`: a grid whose cells failed goes on to be compared)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "xbench.cli.main", *arguments], check=check,
                          stdout=subprocess.PIPE, text=True)
    print(done.stdout, end="")
    return time.perf_counter() - started, done.stdout


def dry_runs(grid: list[str]) -> list[float]:
    """Dry runs until one measures nothing (at most 3: a busy machine's first may leave a
    reference for the next), each one's wall seconds."""
    seconds = []
    for _ in range(3):
        took, said = xbench(*grid, "--dry-run")
        seconds.append(took)
        if "measured now" not in said:
            break
    return seconds


def load() -> str:
    return ", ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True)
    parser.add_argument("--data-dir", required=True)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix=f"forecast-{options.preset}-"))
    os.environ["XBENCH_CACHE"] = str(folder / "cache")
    results = folder / f"{options.preset}.jsonl"
    grid = ["grid", "--preset", options.preset, "--data-dir", options.data_dir, "--results",
            str(results)]
    print(f"load (1, 5, 15 min) before: {load()}; cores: {os.cpu_count()}")
    dry = dry_runs(grid)
    spec = grid_module.read_grid_file(grid_module.preset_path(options.preset))
    cells = grid_module.expand(spec, {})
    forecast = estimate(cells, results, True, make_launcher(grid_module.resolve(spec, {})[1]))
    real_run = xbench(*grid, check=False)[0]
    print(f"load (1, 5, 15 min) after: {load()}")
    rows = {(r["cell_key"], r["repeat"]): r for r in read_rows(results)[0]}
    report(cells, forecast, rows, dry, real_run)


def report(cells, forecast, rows, dry: list[float], real_run: float) -> None:
    """Each cell's forecast and real seconds, then the goals beside what was reached."""
    ratios, forecast_total, real_total = [], 0.0, 0.0
    print(f"\n{'cell':60} {'forecast s':>10} {'real s':>8} {'real/forecast':>13}")
    for cell, estimated in zip(cells, forecast):
        row, seconds = rows.get((cell.key, cell.repeat)), estimated.seconds
        if seconds is None or row is None or row["status"] != "ok":
            why = (estimated.status if estimated.status != "to run" else "no forecast"
                   if seconds is None else row["status"] if row else "no row")
            print(f"{cell.key[:60]:60} {'-':>10} {'-':>8} {why:>13}")
            continue
        ratio = row["cell_seconds"] / seconds
        ratios.append(ratio)
        forecast_total += seconds
        real_total += row["cell_seconds"]
        print(f"{cell.key[:60]:60} {seconds:10.1f} {row['cell_seconds']:8.1f} {ratio:13.2f}")
    inside = sum(WITHIN[0] <= r <= WITHIN[1] for r in ratios)
    print(f"\ndry runs, the first on an empty cache, the last measuring nothing: "
          f"{', '.join(f'{s:.1f} s' for s in dry)} (goals: the first at most 60 s, one with "
          f"the cache kept at most 5 s)")
    if ratios:
        print(f"total: forecast {forecast_total:.0f} s, real {real_total:.0f} s of cells "
              f"({real_run:.0f} s the whole grid run): real/forecast "
              f"{real_total / forecast_total:.2f} (goal: within {TOTAL_GOAL:.0%})")
        print(f"per cell: real/forecast {min(ratios):.2f} to {max(ratios):.2f}; {inside} of "
              f"{len(ratios)} ({inside / len(ratios):.0%}) within {WITHIN[0]}x-{WITHIN[1]}x "
              f"(goal: {SHARE_GOAL:.0%})")


if __name__ == "__main__":
    main()
