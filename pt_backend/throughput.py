"""`python -m pt_backend.throughput MODEL BATCH STEPS`: a short measured training throughput of a
model on this machine's CPU (the plain module, Adam, a batch shaped as the model's samples),
answered as JSON (common.children.answer), with the rate of the forward pass alone (what a
cell's test evaluation runs).
`xbench grid --dry-run` uses it to estimate cells for which no earlier rows exist."""
import sys
import time

import torch

from xbench.common.children import answer
from xbench.common.workload.resolve import resolve_model
from xbench.pt_backend.models import build_model, build_optimizer, example_input
from xbench.pt_backend.train import mean_loss


def samples_per_second(model_name: str, batch: int, steps: int) -> tuple[float, float]:
    """Training and forward-only samples per second, each after two warm-up steps."""
    spec = resolve_model(model_name)
    model = build_model(spec)
    optimizer = build_optimizer(model.parameters())
    samples = example_input(spec, batch)
    with torch.no_grad():  # class ids (a window's next tokens) shaped as the model predicts
        targets = torch.zeros(model(samples).shape[:-1], dtype=torch.int64)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps + 2):  # two warm-up steps
        if step == 2:
            started = time.perf_counter()
        optimizer.zero_grad()
        mean_loss(model(samples), targets, loss_fn).backward()
        optimizer.step()
    training = steps * batch / (time.perf_counter() - started)
    with torch.no_grad():
        for step in range(steps + 2):
            if step == 2:
                started = time.perf_counter()
            model(samples)
    return training, steps * batch / (time.perf_counter() - started)


if __name__ == "__main__":
    name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    training, forward = samples_per_second(name, batch, steps)
    answer({"model": name, "batch": batch, "samples_per_second": training,
            "forward_samples_per_second": forward})
