"""hvd-torch: Horovod's ring all-reduce over PyTorch, N processes started by horovodrun."""
import threading
import time

from xbench.common.backends import horovod_support
from xbench.common.backends.collectives import Collectives
from xbench.common.workload.compression import gradient_wire_bytes
from xbench.pt_backend.base import TorchBackend

POLL_SECONDS = 0.0002  # how often the outstanding handles are asked whether they are done


class HorovodTorchBackend(TorchBackend):
    name = "hvd-torch"

    def start_processes(self, device_kind):
        import horovod.torch as hvd
        horovod_support.init(hvd, self.cell.bucket_bytes)
        self.hvd = hvd
        return HorovodTorchCollectives(hvd)

    def local_rank(self):
        return self.hvd.local_rank()

    def wrap_optimizer(self, optimizer, model):
        """Every rank starts from rank 0's parameters and optimizer state; gradients are
        averaged by Horovod's all-reduce as the backward pass produces them (with bucket_mb, in
        groups of that size, each launched once all of its gradients are ready); accumulating
        with sync last, once every backward_passes_per_step (K) micro-batches."""
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        syncs_once = self.cell.accumulate_sync == "last"
        return self.hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=horovod_support.compressor(self.hvd, self.cell.compression),
            groups=buckets(model, self.cell.bucket_mb) if self.cell.bucket_mb else None,
            backward_passes_per_step=self.cell.accumulate if syncs_once else 1)

    def watch_collectives(self, wrapped, model, optimizer, clock):
        self.watch_gradients(model, clock)  # at size 1 too: when backward makes each gradient
        if self.hvd.size() == 1:  # at size 1 Horovod reduces nothing
            return
        self.handles = HandleWatch(self.hvd.poll, clock, self.cell.compression)
        for name in ("_allreduce_grad_async", "_grouped_allreduce_grad_async"):
            setattr(optimizer, name, self.handles.timed(getattr(optimizer, name), clock))

    def wait_for_gradients(self, optimizer, clock):
        """The averages in place of the gradients; accumulating with sync each, a micro-batch's,
        to which the next backward adds its own (averaged again: the sum of the averages)."""
        if self.hvd.size() > 1:
            self.handles.wait()
        optimizer.synchronize()
        clock.done()

    def update(self, optimizer, scaler):
        with optimizer.skip_synchronize():  # synchronized in wait_for_gradients
            scaler.step(optimizer)

    def details(self):
        return {"parallelism": "hvd.DistributedOptimizer",
                **horovod_support.details(self.hvd, self.cell.compression)}


def buckets(model, megabytes: float) -> list[list]:
    """The model's parameters in Horovod's buckets of `megabytes` of gradients
    (horovod_support.buckets)."""
    parameters = list(model.parameters())
    sizes = [parameter.numel() * parameter.element_size() for parameter in parameters]
    return [[parameters[index] for index in group]
            for group in horovod_support.buckets(sizes, megabytes)]


def tensor_bytes(argument, compression: str) -> int:
    """The bytes the gradients of one launch put on the wire under `compression`: a
    parameter's, or a group's (a list of them)."""
    tensors = argument if isinstance(argument, (list, tuple)) else [argument]
    return sum(gradient_wire_bytes(tuple(t.grad.shape), compression, 0)
               for t in tensors if t.grad is not None)


class HandleWatch:
    """Horovod tells a collective's completion only through its handle: a thread asks the
    step's outstanding handles every POLL_SECONDS whether they are done, and tells the clock the
    moment it sees each one done."""

    def __init__(self, poll, clock, compression: str):
        self.poll, self.clock, self.compression = poll, clock, compression
        self.pending: dict = {}  # handle -> the clock's token of its launch
        self.changed = threading.Condition()
        threading.Thread(target=self._watch, daemon=True, name="xbench-horovod-handles").start()

    def timed(self, launch, clock):
        """Horovod's `launch` (the optimizer's method that starts one gradient's or group's
        all-reduce), its handle watched from the moment it is called."""
        def timed_launch(argument):
            op = clock.launch(tensor_bytes(argument, self.compression))
            handle, context = launch(argument)
            with self.changed:
                self.pending[handle] = op
                self.changed.notify_all()
            return handle, context
        return timed_launch

    def wait(self) -> None:
        """Until every handle launched so far has been seen done."""
        with self.changed:
            self.changed.wait_for(lambda: not self.pending)

    def _watch(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.pending)
                pending = list(self.pending.items())
            done = [(handle, op) for handle, op in pending if self._done(handle)]
            if done:
                with self.changed:
                    for handle, op in done:
                        self.clock.complete(op)
                        del self.pending[handle]
                    self.changed.notify_all()
            time.sleep(POLL_SECONDS)

    def _done(self, handle) -> bool:
        try:
            return bool(self.poll(handle))
        except (ValueError, RuntimeError):  # released by a synchronize: done by then
            return True


class HorovodTorchCollectives(horovod_support.HorovodGather, Collectives):
    carries_gradients = True  # hvd.allreduce: what DistributedOptimizer's hooks launch

    def barrier(self):
        self.hvd.barrier()

    def sum(self, tensor):
        """`tensor` summed over the ranks in place, as DistributedOptimizer reduces a gradient
        (allreduce_async_ on a buffer that stays allocated), done when a look at its handle
        every POLL_SECONDS says so, as HandleWatch times the training's: `xbench probe` times
        this call (common.measuring.limits.time_all_reduce), so it must be the all-reduce a
        row's collectives do. hvd.allreduce allocates a fresh output and copies the input into
        it on every call, and hvd.synchronize sleeps 1 ms between its looks at the handle:
        timed that way, alternating with this one, 2 ranks on this 2-core machine took 38.8
        against 10.7 ms at 1.54 MiB and 408 against 78 ms at 76.45 MiB, and hvd-torch's rows
        read a bus bandwidth above the probe's (docs/numbers.md, Against the limit)."""
        handle = self.hvd.allreduce_async_(tensor, op=self.hvd.Sum)
        while not self.hvd.poll(handle):
            time.sleep(POLL_SECONDS)
        return self.hvd.synchronize(handle)  # done: releases the handle, returns `tensor`

    def sum_all(self, buffers):
        """As DistributedOptimizer launches a step's gradients: each in place, asynchronously,
        so that Horovod fuses those of one cycle, each waited for as `sum` waits."""
        handles = [self.hvd.allreduce_async_(buffer, op=self.hvd.Sum) for buffer in buffers]
        for handle in handles:
            while not self.hvd.poll(handle):
                time.sleep(POLL_SECONDS)
            self.hvd.synchronize(handle)
