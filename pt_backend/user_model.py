"""`python -m xbench.pt_backend.user_model FILE`: a user's model file as PyTorch builds it
(common.workload.user_models): its pytorch() checked, the model built once and run on a batch of
2, its parameters, tensor shapes and what torch's FlopCounterMode counts of a forward pass and of
a training step, printed as JSON. Exit 2 with one line where the file is wrong."""
from pathlib import Path
from types import ModuleType

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from xbench.common.errors import UserError
from xbench.common.workload.user_models import (
    NotServed,
    call,
    data_check,
    run_describer,
    sample_check,
)

BATCH = 2


def example_batch(shape: dict, batch: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeros shaped as `batch` samples' inputs and targets."""
    dtype = torch.int64 if shape["input_dtype"] == "int64" else torch.float32
    return (torch.zeros(batch, *shape["input_shape"], dtype=dtype),
            torch.zeros(batch, *shape["target_shape"], dtype=torch.int64))


def describe(module: ModuleType, path: Path) -> dict:
    if not callable(getattr(module, "pytorch", None)):
        raise NotServed(f"{path.name} defines no pytorch()")
    torch.manual_seed(0)
    spec = call(module, "pytorch", path)
    shape = sample_check(spec, "pytorch")
    model = spec["model"]
    if not isinstance(model, nn.Module):
        raise UserError(f"{path.name}: pytorch()'s model is {type(model).__name__}, not a "
                        f"torch.nn.Module")
    inputs, targets = example_batch(shape)
    wanted = (BATCH, *shape["target_shape"], shape["classes"])
    try:
        with torch.no_grad():
            logits = model(inputs)
    except Exception as e:  # the user's model on inputs of the shape it declared
        raise UserError(f"{path.name}: pytorch()'s model on inputs of {tuple(inputs.shape)} "
                        f"raised {type(e).__name__}: {e}") from None
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != wanted:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise UserError(f"{path.name}: pytorch()'s model returned {got} for a batch of {BATCH}; "
                        f"its targets and classes need logits of {wanted}")
    forward, step = FlopCounterMode(display=False), FlopCounterMode(display=False)
    saved = []
    with sdpa_kernel(SDPBackend.MATH), forward, torch.no_grad():
        model(inputs)
    with (sdpa_kernel(SDPBackend.MATH), step,
          torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t,
                                                   lambda t: t)):
        nn.functional.cross_entropy(model(inputs).reshape(-1, shape["classes"]),
                                    targets.reshape(-1)).backward()
    counts = forward.get_flop_counts().get("Global", {})
    convolution = sum(n for op, n in counts.items() if "convolution" in str(op))
    sizes = data_check(call(module, "data", path), shape, path.name) \
        if callable(getattr(module, "data", None)) else None
    parameters = [p for p in model.parameters() if p.requires_grad]
    return {**shape, "data": sizes, "params": sum(p.numel() for p in parameters),
            "tensor_shapes": [list(p.shape) for p in parameters],
            "flops_per_sample": forward.get_total_flops() // BATCH,
            "training_flops_per_sample": step.get_total_flops() // BATCH,
            "activations_per_sample": sum(saved) // BATCH,
            "batchnorm": any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                             for m in model.modules()),
            "dominant_math": ("convolution" if 2 * convolution >= forward.get_total_flops()
                              else "matmul"),
            "counted_by": f"PyTorch {torch.__version__}'s FlopCounterMode"}


if __name__ == "__main__":
    run_describer(describe)
