"""pt-ddp: DistributedDataParallel, one process per device, started by torchrun (nccl / gloo)."""
import os
import sys

from xbench.common.backend import wire
from xbench.common.collectives import Collectives
from xbench.pt_backend.base import TorchBackend


class DistributedDataParallelBackend(TorchBackend):
    name = "pt-ddp"
    spans_nodes = True
    batchnorm_statistics = ("DistributedDataParallel (broadcast_buffers=True, its default) "
                            "broadcasts rank 0's running statistics to every rank before each "
                            "forward: each rank normalises with its own samples' statistics, and "
                            "the statistics kept (and evaluated with) are rank 0's")

    def processes(self, cell):
        return cell.devices

    def launch_command(self, cell, worker_args, placement):
        """torchrun on each node: standalone on one machine, else a c10d rendezvous at the first
        node."""
        if cell.nodes == 1:
            rendezvous = ["--standalone"]
        else:
            rendezvous = [f"--nnodes={cell.nodes}", "--rdzv-backend=c10d",
                          f"--rdzv-endpoint={placement.hosts[0]}:{placement.port}",
                          f"--rdzv-id=xbench-{placement.port}"]
        return [sys.executable, "-m", "torch.distributed.run", *rendezvous,
                f"--nproc-per-node={cell.devices}", "-m", "xbench.common.worker", *worker_args]

    def start_processes(self, device_kind):
        import torch.distributed as dist
        self.process_group = "nccl" if device_kind == "cuda" else "gloo"
        dist.init_process_group(self.process_group)
        return TorchDistributedCollectives()

    def stop_processes(self):
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()

    def local_rank(self):
        return int(os.environ["LOCAL_RANK"])

    collectives_counted = ("DDP: its buckets' all-reduces launched as backward makes each bucket's "
                           "gradients ready (the gradients' own hooks tell when, and their "
                           "bytes), done when backward, which waits for them all, returns")

    def watch_collectives(self, wrapped, model, optimizer, clock):
        self.watch_gradients(model, clock)

    def wait_for_gradients(self, optimizer, clock):
        clock.done()

    def wrap_model(self, model, device):
        from torch.nn.parallel import DistributedDataParallel
        self.buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                       else None)

    def traffic(self, cell, reduction):
        """Besides the gradients: the buffers DDP broadcasts from rank 0 before each forward."""
        items = super().traffic(cell, reduction)
        if cell.world > 1:
            items.append(wire("buffers broadcast from rank 0", (cell.world - 1) * self.buffer_bytes,
                              "computed", "DDP's broadcast_buffers, before each forward pass: the "
                                          "model's buffers (e.g. BatchNorm statistics; these "
                                          "models have none)"))
        return items

    def details(self):
        import torch.distributed as dist
        group = " (a group of one)" if dist.get_world_size() == 1 else ""
        launcher = "torchrun --standalone" if self.cell.nodes == 1 else "torchrun (c10d rendezvous)"
        return {"parallelism": "DistributedDataParallel", "process_group": self.process_group,
                "launcher": launcher, "reduction": "all-reduce", "collective_library": self.process_group,
                "reduction_detail": f"DDP's bucketed all-reduce over {self.process_group}{group}, "
                                    f"overlapped with the backward pass"}


class TorchDistributedCollectives(Collectives):
    """torch.distributed's default process group."""

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def barrier(self):
        self.dist.barrier()

    def gather(self, value):
        values = [None] * self.world
        self.dist.all_gather_object(values, value)
        return values

    def sum(self, tensor):
        self.dist.all_reduce(tensor)
        return tensor
