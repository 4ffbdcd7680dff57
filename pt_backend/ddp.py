"""pt-ddp: DistributedDataParallel, one process per device, started by torchrun (nccl / gloo)."""
import os
import sys

from xbench.common.backend import wire
from xbench.common.collectives import Collectives
from xbench.common.compression import COMPRESSIONS, POWERSGD_MIN_RATE, POWERSGD_START_STEP
from xbench.common.compression import label as compression_label
from xbench.pt_backend.base import TorchBackend


class DistributedDataParallelBackend(TorchBackend):
    name = "pt-ddp"
    spans_nodes = True
    compressions = COMPRESSIONS  # DDP's communication hooks
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

    def unsupported_reason(self, cell, device_kind):
        if cell.compression == "powersgd" and device_kind == "cpu":
            return ("PowerSGD's hook chains each bucket's all-reduces in callbacks; on gloo the "
                    "chains of DDP's two buckets interleave in another order on each rank, and "
                    "gloo aborts ('Received data size doesn't match expected size', torch "
                    "2.13 on 2 CPU ranks): powersgd runs on GPUs (NCCL) only")
        return super().unsupported_reason(cell, device_kind)

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
        wrapped = DistributedDataParallel(model, device_ids=[device.index]
                                          if device.type == "cuda" else None)
        self.compress(wrapped)
        return wrapped

    def compress(self, wrapped):
        """The cell's compression as DDP's own communication hook (common.compression)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        compression = self.cell.compression
        if compression in ("fp16", "bf16"):
            wrapped.register_comm_hook(None, getattr(default_hooks, f"{compression}_compress_hook"))
        elif compression == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=self.cell.powersgd_rank,
                start_powerSGD_iter=POWERSGD_START_STEP, min_compression_rate=POWERSGD_MIN_RATE,
                use_error_feedback=True, warm_start=True, random_seed=self.cell.seed)
            wrapped.register_comm_hook(state, powerSGD_hook.powerSGD_hook)

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
        if self.cell.compression != "none":
            group += (f", gradients compressed: "
                      f"{compression_label(self.cell.compression, self.cell.powersgd_rank)} "
                      f"(a communication hook)")
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
