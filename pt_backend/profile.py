"""PyTorch's part of `xbench profile` (common.running.profile): the passes of each unit and of the
whole training step, as torch runs them in training (train mode: BatchNorm uses batch
statistics)."""
import torch
from torch import nn

from xbench.common.running.profile import STEP_PASSES, time_passes
from xbench.common.workload.data import load
from xbench.common.workload.resolve import resolve_model
from xbench.pt_backend.models import TorchTiedLogits, build_model, build_optimizer
from xbench.pt_backend.probe import device_name
from xbench.pt_backend.train import mean_loss, model_inputs


def profile(cell, device, request):
    """The seconds of every pass of `request`'s units and of the step (common.running.profile)."""
    spec = resolve_model(cell.model)
    data = load(cell, spec, "torch")
    model = build_model(spec, cell.seed).to(device).train()
    x = model_inputs(torch.from_numpy(data.train_images).to(device), data)
    labels = torch.from_numpy(data.train_labels.astype("int64")).to(device)
    generator = torch.Generator(device).manual_seed(cell.seed)
    passes, unit_input = [], x
    for index, (name, unit) in enumerate(model.named_children()):
        with torch.no_grad():
            output = unit(unit_input)
        if name in request["units"]:
            gradient = torch.randn(output.shape, generator=generator, device=device)
            passes += unit_passes(name, unit, unit_input, gradient, input_gradient=index > 0)
        unit_input = output
    passes += step_passes(model, build_optimizer(model.parameters()), x, labels)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    timed = time_passes(passes, sync, request["steps"], request["warmup"], cell.contention_limit)
    return {"framework": "torch", "framework_version": torch.__version__,
            "device_type": device.type, "device_name": device_name(device),
            "threads": torch.get_num_threads(), **timed}


def unit_passes(name, unit: nn.Module, unit_input, gradient, input_gradient: bool):
    """The unit's forward pass, and its backward pass: the gradients of its weights (and of its
    input where training needs them) from `gradient`, returned, not accumulated."""
    unit_input = unit_input.detach().requires_grad_(input_gradient)
    # the tied output layer's weight is the embedding's table: its gradient is computed there too
    weights = ([unit.embedding.token.weight] if isinstance(unit, TorchTiedLogits)
               else unit.parameters())
    wanted = [*([unit_input] if input_gradient else []), *weights]
    kept = {}

    def forward():
        kept["output"] = unit(unit_input)

    def backward():
        torch.autograd.grad(kept.pop("output"), wanted, gradient)

    return [(f"{name}.forward", forward)] + ([(f"{name}.backward", backward)] if wanted else [])


def step_passes(model: nn.Module, optimizer, x, labels):
    """One training step as pt_backend.train runs it, in three timed passes."""
    loss_fn, kept = nn.CrossEntropyLoss(), {}

    def forward():
        kept["loss"] = mean_loss(model(x), labels, loss_fn)

    def backward():
        kept.pop("loss").backward()

    def update():
        optimizer.step()
        optimizer.zero_grad()

    return [(f"step.{name}", run) for name, run in zip(STEP_PASSES, (forward, backward, update))]
