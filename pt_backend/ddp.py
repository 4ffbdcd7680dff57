"""pt-ddp: DistributedDataParallel, one process per device, started by torchrun (nccl / gloo)."""
import os
import sys

from common.backend import Backend
from pt_backend.dp import INSTALL_HINT


class DistributedDataParallelBackend(Backend):
    name = "pt-ddp"
    framework = "torch"
    requires = ("torch",)
    install_hint = INSTALL_HINT

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
            return loop.train(job, model, wrapped, device, loop.TorchDistributed(),
                              {"parallelism": "DistributedDataParallel", "process_group": process_group,
                               "launcher": "torchrun --standalone"})
        finally:
            dist.destroy_process_group()

    def is_out_of_memory(self, error):
        from pt_backend.train import is_out_of_memory
        return is_out_of_memory(error)
