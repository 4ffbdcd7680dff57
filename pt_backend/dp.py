"""pt-dp: torch.nn.DataParallel, one process driving N GPUs (the blog's PyTorch backend)."""
import math

from xbench.common.backends.backend import wire
from xbench.common.workload.model import TOKENS
from xbench.common.workload.precision import lower_dtype
from xbench.pt_backend.base import TorchBackend


class DataParallelBackend(TorchBackend):
    name = "pt-dp"
    device_ids = None

    def wrap_model(self, model, device):
        import torch
        if device.type == "cuda":
            self.device_ids = list(range(device.index, device.index + self.cell.devices))
        self.module_bytes = sum(t.numel() * t.element_size()
                                for t in [*model.parameters(), *model.buffers()])
        lower = lower_dtype(self.cell.precision)
        if lower:  # each replica's thread must enter autocast at the cell's type itself
            from xbench.pt_backend.train import AutocastForward
            model = AutocastForward(model, device.type, getattr(torch, lower))
        return torch.nn.DataParallel(model, device_ids=self.device_ids)

    def traffic(self, cell, model, reduction):
        """DataParallel's every step (torch.nn.parallel): the module replicated from GPU 0, the
        inputs scattered, the outputs gathered on GPU 0, the gradients reduced onto it (each
        micro-batch's forward and backward: K times)."""
        devices = len(self.device_ids or ())
        if devices < 2:
            return []
        others, share = devices - 1, (devices - 1) / devices
        samples = cell.global_batch
        input_bytes = 8 if model.input_kind == TOKENS else 4  # int64 ids, float32 pixels
        passes = cell.accumulate  # DataParallel replicates and reduces in every micro-batch
        return [wire("parameters and buffers replicated from GPU 0",
                     passes * others * self.module_bytes, "computed",
                     "replicate(): the module copied to the other GPUs each forward pass"),
                wire("inputs scattered from GPU 0",
                     share * samples * input_bytes * math.prod(model.input_shape("torch")),
                     "computed", "scatter(): the other GPUs' shares of the batch (float32 "
                     "images, or int64 token ids)"),
                wire("outputs gathered on GPU 0",
                     share * samples * (2 if lower_dtype(cell.precision) else 4)
                     * model.output_values(), "computed",
                     "gather(): the other GPUs' logits (2 bytes each in mixed precision)"),
                wire("gradients reduced onto GPU 0",
                     passes * others * model.gradient_bytes("torch"),
                     "computed", "the replicas' gradients summed into GPU 0's parameters, each "
                     "backward pass")]

    def details(self):
        if not self.device_ids:
            reduction = "none", "DataParallel without device_ids calls the module directly"
        elif len(self.device_ids) == 1:
            reduction = "none", "DataParallel on one GPU calls the module; there are no replicas"
        else:
            reduction = ("reduce-to-one", "replicates the module to every GPU each step and "
                         "reduces the gradients onto the first GPU (not a ring)")
        return {"parallelism": "torch.nn.DataParallel", "device_ids": self.device_ids,
                "reduction": reduction[0], "reduction_detail": reduction[1]}
