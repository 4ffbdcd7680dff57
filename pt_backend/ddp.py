"""pt-ddp: DistributedDataParallel, one process per device, started by torchrun (nccl / gloo)."""
import os
import sys

from pt_backend.base import TorchBackend


class DistributedDataParallelBackend(TorchBackend):
    name = "pt-ddp"

    def processes(self, cell):
        return cell.devices

    def launch_command(self, cell, worker_args):
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={cell.devices}", "-m", "common.worker", *worker_args]

    def train(self, job):
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        from pt_backend import train as loop
        from pt_backend.models import build_optimizer

        loop.set_threads(job.threads)
        kind = loop.resolve_device(job.cell.device, job.cell.devices)
        local_rank = int(os.environ["LOCAL_RANK"])
        if kind == "cuda":
            torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank) if kind == "cuda" else torch.device("cpu")
        process_group = "nccl" if kind == "cuda" else "gloo"
        dist.init_process_group(process_group)
        try:
            model = loop.new_model(job, device)
            wrapped = DistributedDataParallel(model, device_ids=[local_rank] if kind == "cuda" else None)
            return loop.train(job, model, wrapped, build_optimizer(wrapped.parameters()), device,
                              loop.TorchDistributed(),
                              {"parallelism": "DistributedDataParallel", "process_group": process_group,
                               "launcher": "torchrun --standalone"})
        finally:
            dist.destroy_process_group()
