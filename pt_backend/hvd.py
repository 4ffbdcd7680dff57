"""hvd-torch: Horovod's ring all-reduce over PyTorch, N processes started by horovodrun."""
from xbench.common.backends import horovod_support
from xbench.common.backends.collectives import Collectives
from xbench.pt_backend.base import TorchBackend


class HorovodTorchBackend(TorchBackend):
    name = "hvd-torch"

    def start_processes(self, device_kind):
        import horovod.torch as hvd
        hvd.init()
        self.hvd = hvd
        return HorovodTorchCollectives(hvd)

    def local_rank(self):
        return self.hvd.local_rank()

    def wrap_optimizer(self, optimizer, model):
        """Every rank starts from rank 0's parameters and optimizer state; gradients are
        averaged by Horovod's all-reduce as the backward pass produces them."""
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return self.hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=horovod_support.compressor(self.hvd, self.cell.compression))

    def watch_collectives(self, wrapped, model, optimizer, clock):
        if self.hvd.size() > 1:  # at size 1 Horovod reduces nothing
            self.watch_gradients(model, clock)

    def wait_for_gradients(self, optimizer, clock):
        optimizer.synchronize()
        clock.done()

    def update(self, optimizer, scaler):
        with optimizer.skip_synchronize():  # synchronized in wait_for_gradients
            scaler.step(optimizer)

    def details(self):
        return {"parallelism": "hvd.DistributedOptimizer",
                **horovod_support.details(self.hvd, self.cell.compression)}


class HorovodTorchCollectives(horovod_support.HorovodGather, Collectives):
    def barrier(self):
        self.hvd.barrier()

    def sum(self, tensor):
        return self.hvd.allreduce(tensor, op=self.hvd.Sum)
