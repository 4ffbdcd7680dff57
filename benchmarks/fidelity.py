"""Fidelity benchmark: does xbench's PyTorch loop cost anything a plain loop would not?

Runs the same model, batch and data through xbench's PyTorch loop (the pt-dp backend, in this
process) and through a minimal hand-written loop, alternately, and prints the ratio of their
epoch-2 rates (best and median of the rounds). Target: >= 0.97.

    python benchmarks/fidelity.py --data-dir ../shared/data/mnist [--model small --batch 128]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from xbench.common.backends.registry import get_backend
from xbench.common.grids.cell import Cell
from xbench.common.machine import cpu_cores
from xbench.common.running.job import Job
from xbench.common.workload.mnist import load_mnist
from xbench.common.workload.models import MODELS
from xbench.common.workload.samples import epoch_order
from xbench.pt_backend.models import build_model, build_optimizer


def xbench_rate(cell, data, threads):
    job = Job(cell, MODELS[cell.model], data, threads, time.time())
    measurement = get_backend(cell.backend).train(job)
    return measurement.epochs[1]["rate"]


def minimal_rate(cell, data):
    """The loop anyone would write: index, normalise, forward, backward, step."""
    torch.manual_seed(cell.seed)
    model = build_model(MODELS[cell.model], cell.seed)
    optimizer = build_optimizer(model.parameters())
    images, labels = torch.from_numpy(data.train_images), torch.from_numpy(data.train_labels).long()
    steps = len(images) // cell.batch
    for epoch in (1, 2):
        order = torch.from_numpy(epoch_order(len(images), cell.seed, epoch))
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * cell.batch:(step + 1) * cell.batch]
            x = images[index].permute(0, 3, 1, 2).float().div_(255)  # (B, H, W, C) -> NCHW
            x = x.sub_(data.mean[0]).div_(data.std[0])
            optimizer.zero_grad()  # set_to_none, the default since torch 2.0
            F.cross_entropy(model(x), labels[index]).backward()
            optimizer.step()
        seconds = time.perf_counter() - start
    return steps * cell.batch / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="small")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=8192, help="training images per epoch")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    threads = cpu_cores()
    torch.set_num_threads(threads)
    data = load_mnist(args.data_dir)
    data.train_images, data.train_labels = (data.train_images[:args.samples],
                                            data.train_labels[:args.samples])
    cell = Cell(grid="fidelity", backend="pt-dp", model=args.model, multiple=1, batch=args.batch,
                devices=1, epochs=2, batch_mode="global", seed=0, max_train_samples=args.samples,
                data="mnist", device="cpu", timeout=0)
    xbench, minimal = [], []
    for round_ in range(1, args.rounds + 1):
        xbench.append(xbench_rate(cell, data, threads))
        minimal.append(minimal_rate(cell, data))
        print(f"round {round_}: xbench {xbench[-1]:,.0f} samples/s, "
              f"minimal {minimal[-1]:,.0f} samples/s")
    print(f"{args.model} batch {args.batch}, {args.samples} images, {threads} threads: "
          f"epoch-2 rate xbench / minimal loop = {max(xbench) / max(minimal):.3f} best of "
          f"{args.rounds}, {statistics.median(xbench) / statistics.median(minimal):.3f} median "
          f"(target >= 0.97)")


if __name__ == "__main__":
    main()
