"""pt-dp: torch.nn.DataParallel, one process driving N GPUs (the blog's PyTorch backend)."""
from common.collectives import SingleProcess
from common.errors import Unsupported
from pt_backend.base import TorchBackend


class DataParallelBackend(TorchBackend):
    name = "pt-dp"

    def train(self, job):
        import torch

        from pt_backend import train as loop
        from pt_backend.models import build_optimizer

        loop.set_threads(job.threads)
        kind = loop.resolve_device(job.cell.device, job.cell.devices)
        if kind == "cpu" and job.cell.devices > 1:
            raise Unsupported(f"pt-dp with {job.cell.devices} devices needs {job.cell.devices} CUDA "
                              f"GPUs; DataParallel has no multi-device CPU mode, and running on one "
                              f"device instead would misreport the cell")
        device = torch.device("cuda:0" if kind == "cuda" else "cpu")
        model = loop.new_model(job, device)
        device_ids = list(range(job.cell.devices)) if kind == "cuda" else None
        wrapped = torch.nn.DataParallel(model, device_ids=device_ids)
        return loop.train(job, model, wrapped, build_optimizer(wrapped.parameters()), device,
                          SingleProcess(),
                          {"parallelism": "torch.nn.DataParallel", "device_ids": device_ids})
