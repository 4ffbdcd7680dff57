"""`python -m pt_backend.throughput MODEL BATCH STEPS`: a short measured training throughput of a
model on this machine's CPU (the plain module, Adam, random MNIST-shaped data), printed as JSON.
`xbench grid --dry-run` uses it to estimate cells for which no earlier rows exist."""
import json
import sys
import time

import torch

from xbench.pt_backend.models import build_model, build_optimizer


def samples_per_second(model_name: str, batch: int, steps: int) -> float:
    model = build_model(model_name)
    optimizer = build_optimizer(model.parameters())
    images, labels = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    for step in range(steps + 2):  # two warm-up steps
        if step == 2:
            started = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return steps * batch / (time.perf_counter() - started)


if __name__ == "__main__":
    name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps({"model": name, "batch": batch,
                      "samples_per_second": samples_per_second(name, batch, steps)}))
