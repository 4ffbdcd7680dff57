"""pt-single: PyTorch with no parallel wrapper on one device: the reference that tells what pt-dp,
pt-ddp and hvd-torch cost at one device."""
from xbench.pt_backend.base import TorchBackend


class SingleDeviceTorchBackend(TorchBackend):
    name = "pt-single"

    def details(self):
        return {"parallelism": "none (the plain module on one device)", "reduction": "none",
                "reduction_detail": "no parallel wrapper"}
