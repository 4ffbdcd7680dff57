"""pt-dp: torch.nn.DataParallel, one process driving N GPUs (the blog's PyTorch backend)."""
from pt_backend.base import TorchBackend


class DataParallelBackend(TorchBackend):
    name = "pt-dp"
    device_ids = None

    def unsupported_reason(self, cell, device_kind):
        if device_kind == "cpu" and cell.devices > 1:
            return (f"{self.name} with {cell.devices} devices needs {cell.devices} CUDA GPUs; "
                    f"DataParallel has no multi-device CPU mode, and running on one device "
                    f"instead would misreport the cell")
        return None

    def wrap_model(self, model, device):
        import torch
        if device.type == "cuda":
            self.device_ids = list(range(device.index, device.index + self.cell.devices))
        return torch.nn.DataParallel(model, device_ids=self.device_ids)

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
