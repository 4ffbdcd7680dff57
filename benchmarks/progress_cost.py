"""Does live progress cost the measured epochs anything? pt-single's epoch-2 rate with the
progress report writing twice a second (as in every grid) against without it, alternated in one
process, and the ratio of their medians (1.00: no cost).

    python benchmarks/progress_cost.py --data-dir ../shared/data/mnist [--rounds 5]
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

from xbench.common.backends.registry import get_backend
from xbench.common.grids.cell import Cell
from xbench.common.machine import cpu_cores
from xbench.common.running.job import Job
from xbench.common.running.progress import ProgressReport
from xbench.common.workload.mnist import load_mnist
from xbench.reports.numbers.stats import ratio_of_means


def rate(cell, data, folder):
    report = ProgressReport(folder) if folder else ProgressReport()
    job = Job(cell, data, cpu_cores(), time.time(), report)
    return get_backend(cell.backend).train(job).epochs[1]["rate"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=32, help="small batches: many steps")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = load_mnist(args.data_dir)
    cell = Cell(grid="progress-cost", backend="pt-single", model="small", multiple=1,
                batch=args.batch, devices=1, epochs=2, batch_mode="global", seed=0,
                max_train_samples=args.samples, data="mnist", device="cpu", timeout=0)
    data.train_images, data.train_labels = (data.train_images[:args.samples],
                                            data.train_labels[:args.samples])
    with_progress, without = [], []
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(1, args.rounds + 1):
            first_with = round_ % 2  # alternate which runs first
            for folder_or_none in ((Path(folder), None) if first_with else (None, Path(folder))):
                (with_progress if folder_or_none else without).append(
                    rate(cell, data, folder_or_none))
            print(f"round {round_}: with progress {with_progress[-1]:,.0f} samples/s, without "
                  f"{without[-1]:,.0f} samples/s")
    ratio = ratio_of_means([1 / r for r in without], [1 / r for r in with_progress])
    print(f"{args.samples} images, batch {args.batch}: epoch-2 rate with / without progress = "
          f"{ratio.value:.3f}, 95% CI [{ratio.low:.3f}, {ratio.high:.3f}] (Fieller, "
          f"{args.rounds} runs each); medians "
          f"{statistics.median(with_progress) / statistics.median(without):.3f}")


if __name__ == "__main__":
    main()
