"""`python -m xbench.pt_backend.user_model FILE`: a user's model file as PyTorch builds it
(common.workload.model_file): its pytorch() checked, the model built once and run on a batch of
2, its parameters, tensor shapes, what torch's FlopCounterMode counts of a forward pass and the
activations autograd keeps for the backward pass, answered as JSON (common.children.answer);
a wrong file is answered in one line."""
from functools import partial
from pathlib import Path

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from xbench.common.errors import UserError
from xbench.common.workload.file_checks import run_describer
from xbench.pt_backend.models import seed_generators

BATCH = 2


def example_batch(takes: dict, batch: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeros shaped as `batch` samples' inputs and targets."""
    dtype = torch.int64 if takes["input_dtype"] == "int64" else torch.float32
    return (torch.zeros(batch, *takes["input_shape"], dtype=dtype),
            torch.zeros(batch, *takes["target_shape"], dtype=torch.int64))


def count(model, takes: dict, path: Path) -> dict:
    """What PyTorch counts of the file's model: its parameters, tensor shapes, FLOPs and
    saved activations per sample, and whether it has BatchNorm."""
    if not isinstance(model, nn.Module):
        raise UserError(f"{path.name}: pytorch()'s model is {type(model).__name__}, not a "
                        f"torch.nn.Module")
    inputs, targets = example_batch(takes)
    wanted = (BATCH, *takes["target_shape"], takes["classes"])
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
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:  # what every cell would fail on: nothing for the optimizer to train
        raise UserError(f"{path.name}: pytorch()'s model has no trainable weights (no "
                        f"parameter requires grad): there is nothing to train")
    counter, kept = FlopCounterMode(display=False), {}
    with sdpa_kernel(SDPBackend.MATH), counter, torch.no_grad():
        model(inputs)
    weights = {p.data_ptr() for p in model.parameters()}

    def saved(tensor):  # the activations autograd keeps, each storage once, weights left out
        if tensor.data_ptr() not in weights:
            kept[tensor.data_ptr()] = tensor.untyped_storage().nbytes() // tensor.element_size()
        return tensor

    with sdpa_kernel(SDPBackend.MATH), torch.autograd.graph.saved_tensors_hooks(saved,
                                                                                 lambda t: t):
        loss = nn.functional.cross_entropy(model(inputs).reshape(-1, takes["classes"]),
                                           targets.reshape(-1))
    loss.backward()
    return {"params": sum(p.numel() for p in parameters),
            "tensor_shapes": [list(p.shape) for p in parameters],
            "flops_per_sample": counter.get_total_flops() // BATCH,
            "activations_per_sample": sum(kept.values()) // BATCH,
            "batchnorm": any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                             for m in model.modules()),
            "counted_by": f"PyTorch {torch.__version__}'s FlopCounterMode"}


if __name__ == "__main__":
    run_describer("pytorch", partial(seed_generators, 0), count)
