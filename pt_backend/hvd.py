"""hvd-torch: Horovod's ring all-reduce over PyTorch, N processes started by horovodrun."""
from common import horovod_support
from pt_backend.base import TorchBackend


class HorovodTorchBackend(horovod_support.HorovodLaunch, TorchBackend):
    name = "hvd-torch"
    # The compiled extension, not just the Python package: a Horovod built without PyTorch lacks it.
    requires = ("torch", horovod_support.EXTENSIONS["PyTorch"])

    def train(self, job):
        import horovod.torch as hvd
        import torch

        from pt_backend import train as loop
        from pt_backend.models import build_optimizer

        hvd.init()
        loop.set_threads(job.threads)
        kind = loop.resolve_device(job.cell.device, job.cell.devices)
        if kind == "cuda":
            torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank()) if kind == "cuda" else torch.device("cpu")
        model = loop.new_model(job, device)
        optimizer = build_optimizer(model.parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        details = {"parallelism": "hvd.DistributedOptimizer", **horovod_support.details(hvd)}
        return loop.train(job, model, model, optimizer, device, HorovodCollectives(hvd), details)


class HorovodCollectives(horovod_support.HorovodProcesses):
    def barrier(self):
        self.hvd.barrier()

    def sum(self, tensor):
        return self.hvd.allreduce(tensor, op=self.hvd.Sum)
