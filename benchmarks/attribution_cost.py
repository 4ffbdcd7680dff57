"""Does the step attribution cost the measured epochs anything? Each backend's epoch-2 rate with
its instruments (the loop's marks at every part's boundary, DDP's and Horovod's gradient hooks;
TensorFlow's traced steps run after the timed epochs) against without them
(XBENCH_ATTRIBUTION=off: only each step's window and its input wait), as real grid cells,
alternated, and the ratio of their mean epoch-2 times with Fieller's interval (1.00: no cost).

    python benchmarks/attribution_cost.py --data-dir ../shared/data/mnist [--rounds 5]
        [--backends pt-single,pt-ddp,hvd-torch,tf-multiworker] [--samples 4096] [--batch 64]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from xbench.common.results.store import read_rows
from xbench.reports.numbers.stats import ratio_of_means

SINGLE = ("pt-single", "tf-single")


def epoch_seconds(backend, mode, args, folder, round_):
    """One cell of `backend` (2 devices where it spans them) run as a grid with the attribution
    `mode` ("on" or "off"): its epoch-2 seconds."""
    grid = Path(folder) / f"{backend}-{mode}-{round_}.toml"
    spec = {"name": f"cost-{mode}", "backends": [backend], "models": ["small"], "multiples": [1],
            "batches": [args.batch], "devices": [1 if backend in SINGLE else 2], "epochs": 2,
            "max_train_samples": args.samples, "timeout": 600}
    grid.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in spec.items()))
    results = grid.with_suffix(".jsonl")
    done = subprocess.run([sys.executable, "-m", "xbench.cli.main", "-q", "grid", str(grid),
                           "--data-dir", args.data_dir, "--results", str(results)],
                          env={**os.environ, "XBENCH_ATTRIBUTION": mode}, capture_output=True,
                          text=True)
    [row] = read_rows(results)[0]
    if row["status"] != "ok":
        raise SystemExit(f"{backend} ({mode}): {row['status']}: {row['error']}\n{done.stderr}")
    assert (row["attribution"] is None) == (mode == "off")
    return row["epochs"][1]["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--backends", default="pt-single,pt-ddp,hvd-torch,tf-multiworker")
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64, help="small batches: many steps")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for backend in args.backends.split(","):
            seconds = {"on": [], "off": []}
            for round_ in range(args.rounds):
                for mode in (("on", "off") if round_ % 2 else ("off", "on")):  # alternated
                    seconds[mode].append(epoch_seconds(backend, mode, args, folder, round_))
            ratio = ratio_of_means(seconds["off"], seconds["on"])  # rate on / rate off
            print(f"{backend}: epoch-2 rate with / without the attribution = {ratio.value:.3f}, "
                  f"95% CI [{ratio.low:.3f}, {ratio.high:.3f}] (Fieller, {args.rounds} runs "
                  f"each, alternated; epoch-2 seconds on {sorted(seconds['on'])}, off "
                  f"{sorted(seconds['off'])})", flush=True)


if __name__ == "__main__":
    main()
