"""pt-ddp: DistributedDataParallel, one process per device, started by torchrun (nccl / gloo)."""
import os
import sys
import time

from common.collectives import Collectives
from common.limits import bus_bandwidth
from pt_backend.base import TorchBackend


class DistributedDataParallelBackend(TorchBackend):
    name = "pt-ddp"
    spans_nodes = True
    timed = None  # the TimedAllReduce hook of the wrapped model

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
                f"--nproc-per-node={cell.devices}", "-m", "common.worker", *worker_args]

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

    def wrap_model(self, model, device):
        from torch.nn.parallel import DistributedDataParallel
        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                          else None)
        self.timed = TimedAllReduce(device.type == "cuda")
        wrapped.register_comm_hook(state=None, hook=self.timed.hook)
        return wrapped

    def details(self):
        import torch.distributed as dist
        group = " (a group of one)" if dist.get_world_size() == 1 else ""
        launcher = "torchrun --standalone" if self.cell.nodes == 1 else "torchrun (c10d rendezvous)"
        return {"parallelism": "DistributedDataParallel", "process_group": self.process_group,
                "launcher": launcher, "reduction": "all-reduce", "collective_library": self.process_group,
                "reduction_detail": f"DDP's bucketed all-reduce over {self.process_group}{group}, "
                                    f"overlapped with the backward pass",
                "all_reduce_timed": self.timed and self.timed.summary(self.cell.epochs,
                                                                      dist.get_world_size())}


class TimedAllReduce:
    """A DDP communication hook that does what DDP's default does (each gradient bucket divided by
    the world size and all-reduced, asynchronously) and times every bucket's all-reduce from its
    call to its completion: on the host clock on a CPU (gloo completes the future when the
    reduction is done), with CUDA events on a GPU. The time includes waiting for the slowest rank
    to hand in the same bucket."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.buckets = []  # [index, bytes, started, ended]: perf_counter seconds or CUDA events

    def hook(self, state, bucket):
        import torch
        import torch.distributed as dist
        tensor = bucket.buffer().div_(dist.get_world_size())
        record = [bucket.index(), tensor.numel() * tensor.element_size(), self._now(torch), None]
        self.buckets.append(record)
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def finished(done):
            record[3] = self._now(torch)
            return done.value()[0]
        return future.then(finished)

    def _now(self, torch):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _seconds(self, started, ended):
        return ended - started if not self.cuda else started.elapsed_time(ended) / 1000

    def summary(self, epochs, world):
        """Over the last epoch (each epoch calls the hook equally often): buckets per step,
        gradient bytes and all-reduce seconds per step (the buckets' times added), and nccl-tests'
        algbw and busbw of those (bytes/s). None when nothing was all-reduced."""
        last = self.buckets[len(self.buckets) - len(self.buckets) // epochs:]
        if not last or world < 2:
            return None
        steps = sum(1 for b in last if b[0] == 0)  # every step reduces bucket 0 once
        size = sum(b[1] for b in last) / steps
        seconds = sum(self._seconds(b[2], b[3]) for b in last) / steps
        return {"buckets_per_step": len(last) // steps, "bytes_per_step": int(size),
                "seconds_per_step": seconds, "algbw": size / seconds,
                "busbw": bus_bandwidth(size / seconds, world), "steps": steps,
                "timing": "each bucket's all-reduce from its call to its completion (CUDA "
                          "events on a GPU, the host clock on a CPU), including the wait for the "
                          "slowest rank; the buckets' times added per step"}


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
