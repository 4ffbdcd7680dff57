"""Is xbench's harness noisier than the loop it times? Rounds alternate one real grid cell (pt-ddp
on 1 process: the small model, batch 128, the first 8,192 MNIST images, 2 epochs) with a short
hand-written PyTorch loop of the same cell in a fresh process (same model, Adam, batch, images and
threads; no DDP, no marks); each gives its epoch-2 rate. Printed: both runs' rates, their means and
coefficients of variation, and xbench's CV over the hand loop's (target: at most 1.5).

    python benchmarks/harness_spread.py --data-dir ../shared/data/mnist [--rounds 6]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from xbench.common.results.store import read_rows

CELL = {"backends": ["pt-ddp"], "models": ["small"], "multiples": [1], "batches": [128],
        "devices": [1], "epochs": 2, "max_train_samples": 8192, "max_test_samples": 1000,
        "timeout": 600}

HAND_LOOP = '''
import sys, time, numpy as np, torch
from torch import nn
from xbench.common.workload.mnist import load_mnist
threads, data_dir = int(sys.argv[1]), sys.argv[2]
samples, batch = int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
torch.manual_seed(0)
data = load_mnist(data_dir)
x = torch.from_numpy(data.train_images[:samples]).permute(0, 3, 1, 2)
x = ((x.to(torch.float32, memory_format=torch.contiguous_format) / 255 - 0.1307) / 0.3081)
y = torch.from_numpy(data.train_labels[:samples].astype(np.int64))
model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(14 * 14 * 32, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
loss_of = nn.CrossEntropyLoss()
for epoch in range(2):
    order = torch.randperm(samples)
    start = time.perf_counter()
    for first in range(0, samples - batch + 1, batch):
        rows = order[first:first + batch]
        optimizer.zero_grad()
        loss_of(model(x[rows]), y[rows]).backward()
        optimizer.step()
    seconds = time.perf_counter() - start
print(samples // batch * batch / seconds)
'''


def xbench_rate(folder: Path, round_: int, data_dir: str) -> tuple[float, int]:
    """One grid cell's epoch-2 rate and the threads per device it ran with."""
    grid = folder / f"xbench-{round_}.toml"
    grid.write_text("".join(f"{key} = {json.dumps(value)}\n"
                            for key, value in {"name": "spread", **CELL}.items()))
    results = grid.with_suffix(".jsonl")
    done = subprocess.run([sys.executable, "-m", "xbench.cli.main", "-q", "grid", str(grid),
                           "--data-dir", data_dir, "--results", str(results)],
                          capture_output=True, text=True)
    if done.returncode != 0 or not results.exists():
        raise SystemExit(f"xbench grid exited {done.returncode}:\n{done.stderr}")
    [row] = read_rows(results)[0]
    if row["status"] != "ok":
        raise SystemExit(f"xbench: {row['status']}: {row['error']}\n{done.stderr}")
    return row["epochs"][1]["samples"] / row["epochs"][1]["seconds"], row["threads_per_device"]


def hand_rate(threads: int, data_dir: str) -> float:
    done = subprocess.run([sys.executable, "-c", HAND_LOOP, str(threads), data_dir,
                           str(CELL["max_train_samples"]), str(CELL["batches"][0])],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def spread(rates: list[float]) -> float:
    """Coefficient of variation: sample standard deviation / mean."""
    return statistics.stdev(rates) / statistics.fmean(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be 2 or more (a spread needs two runs)")
    data_dir = os.path.abspath(args.data_dir)
    rates = {"xbench": [], "hand loop": []}
    with tempfile.TemporaryDirectory() as folder:
        threads = None
        for round_ in range(args.rounds):
            for who in (("xbench", "hand loop") if round_ % 2 == 0 else ("hand loop", "xbench")):
                if who == "xbench":
                    rate, threads = xbench_rate(Path(folder), round_, data_dir)
                else:  # round 1 runs xbench first: it says how many threads the cell uses
                    rate = hand_rate(threads, data_dir)
                rates[who].append(rate)
                print(f"round {round_ + 1} {who}: {rate:,.0f} samples/s", flush=True)
    for who, values in rates.items():
        print(f"{who:>9}: mean {statistics.fmean(values):,.0f} samples/s, CV "
              f"{spread(values):.1%} ({min(values):,.0f} to {max(values):,.0f}; "
              f"{len(values)} runs, {threads} threads)")
    xbench, hand = rates["xbench"], rates["hand loop"]
    print(f"xbench's CV / the hand loop's: {spread(xbench) / spread(hand):.2f} (target at most "
          f"1.50); ratio of mean rates xbench / hand loop: "
          f"{statistics.fmean(xbench) / statistics.fmean(hand):.2f}")


if __name__ == "__main__":
    main()
