"""What the processes of pt-ddp and pt-fsdp share: one per device, started by torchrun on each
node (common.backends.launch_scopes.TORCHRUN) and joined in torch.distributed's default process
group (nccl on GPUs, gloo on the CPU)."""
from xbench.common.backends.collectives import Collectives
from xbench.pt_backend.base import TorchBackend


class TorchrunBackend(TorchBackend):
    """A backend whose ranks torchrun starts (standalone on one machine, a c10d rendezvous at the
    first node across several); a subclass says how it wraps the model."""

    def start_processes(self, device_kind):
        import torch.distributed as dist
        self.device_kind = device_kind
        self.process_group = "nccl" if device_kind == "cuda" else "gloo"
        dist.init_process_group(self.process_group)
        return TorchDistributedCollectives()

    def stop_processes(self):
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()

    def local_rank(self):
        return self.traits.start.environment.local_rank_here()

    def launch_details(self) -> dict:
        """What the row records of the launch and the process group."""
        launcher = "torchrun --standalone" if self.cell.nodes == 1 else "torchrun (c10d rendezvous)"
        return {"process_group": self.process_group, "launcher": launcher,
                "collective_library": self.process_group}

    def group_described(self) -> str:
        """The process group, as a row's reduction_detail names it."""
        import torch.distributed as dist
        return self.process_group + (" (a group of one)" if dist.get_world_size() == 1 else "")


class TorchDistributedCollectives(Collectives):
    """torch.distributed's default process group (DDP's and FSDP's gradients cross in it)."""
    carries_gradients = True

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

    def sum_all(self, buffers):
        for work in [self.dist.all_reduce(buffer, async_op=True) for buffer in buffers]:
            work.wait()
