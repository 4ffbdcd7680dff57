"""pt-dp: torch.nn.DataParallel, one process driving N GPUs (the blog's PyTorch backend)."""
from common.backend import Backend
from common.errors import Unsupported

INSTALL_HINT = "install PyTorch with `make setup` (or `pip install torch` into the environment)"


class DataParallelBackend(Backend):
    name = "pt-dp"
    framework = "torch"
    requires = ("torch",)
    install_hint = INSTALL_HINT

    def train(self, job):
        import torch
        from pt_backend import train as loop

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
        return loop.train(job, model, wrapped, device, loop.Collectives(),
                          {"parallelism": "torch.nn.DataParallel", "device_ids": device_ids})

    def is_out_of_memory(self, error):
        from pt_backend.train import is_out_of_memory
        return is_out_of_memory(error)
