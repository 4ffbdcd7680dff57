"""pt-ddp: DistributedDataParallel, one process per device, started by torchrun (nccl / gloo)."""
from contextlib import nullcontext

from xbench.common.backends.backend import wire
from xbench.common.measuring.attribution import INSTRUMENTED
from xbench.common.workload.compression import (
    POWERSGD_MIN_RATE,
    POWERSGD_START_STEP,
    gradient_wire_bytes,
)
from xbench.common.workload.compression import label as compression_label
from xbench.pt_backend.torchrun import TorchrunBackend


class DistributedDataParallelBackend(TorchrunBackend):
    name = "pt-ddp"

    def watch_collectives(self, wrapped, model, optimizer, clock):
        self.watch_gradients(model, clock)
        self.clock = clock  # its buckets' all-reduces, timed by the communication hook

    def wait_for_gradients(self, optimizer, clock):
        clock.done()

    def micro_batch(self, wrapped, syncs):
        """DDP's no_sync(): the gradients accumulate locally, its hooks launch nothing."""
        return nullcontext() if syncs else wrapped.no_sync()

    def wrap_model(self, model, device):
        from torch.nn.parallel import DistributedDataParallel
        self.buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
        buckets = {"bucket_cap_mb": self.cell.bucket_mb} if self.cell.bucket_mb else {}
        wrapped = DistributedDataParallel(model, device_ids=[device.index]
                                          if device.type == "cuda" else None, **buckets)
        self.clock = None
        state, hook = self.communication_hook()
        if INSTRUMENTED:
            wrapped.register_comm_hook(state, self.timed(hook))
        elif self.cell.compression != "none":
            wrapped.register_comm_hook(state, hook)
        return wrapped

    def communication_hook(self):
        """(state, hook): the cell's compression as DDP's own communication hook
        (common.workload.compression), DDP's plain all-reduce where there is none."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        compression = self.cell.compression
        if compression == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=self.cell.powersgd_rank,
                start_powerSGD_iter=POWERSGD_START_STEP, min_compression_rate=POWERSGD_MIN_RATE,
                use_error_feedback=True, warm_start=True, random_seed=self.cell.seed)
            return state, powerSGD_hook.powerSGD_hook
        if compression in ("fp16", "bf16"):
            return None, getattr(default_hooks, f"{compression}_compress_hook")
        return None, default_hooks.allreduce_hook

    def timed(self, hook):
        """`hook`, each bucket's collective timed from its launch to its future's completion
        (on a GPU the clock's CUDA events, recorded on the stream the future completes on)."""
        def timed_hook(state, bucket):
            if self.clock is None:
                return hook(state, bucket)
            op = self.clock.launch(self.bucket_wire_bytes(bucket.buffer()))

            def completed(future):
                self.clock.complete(op)
                return future.value()
            return hook(state, bucket).then(completed)
        return timed_hook

    def bucket_wire_bytes(self, buffer) -> int | None:
        """The bytes a bucket's flat gradient buffer puts on the wire under the cell's
        compression (None under PowerSGD, whose messages are its factors, not the buffer)."""
        if self.cell.compression == "powersgd":
            return None
        return gradient_wire_bytes((buffer.numel(),), self.cell.compression, 0)

    def traffic(self, cell, model, reduction):
        """Besides the gradients: the buffers DDP broadcasts from rank 0 before each forward."""
        items = super().traffic(cell, model, reduction)
        if cell.world > 1:
            items.append(wire("buffers broadcast from rank 0",
                              cell.syncs_per_step * (cell.world - 1) * self.buffer_bytes,
                              "computed", "DDP's broadcast_buffers, before each forward pass "
                                          "that follows a synced one (no_sync's skip it): the "
                                          "model's buffers (e.g. BatchNorm statistics; these "
                                          "models have none)"))
        return items

    def details(self):
        group = self.group_described()
        if self.cell.compression != "none":
            group += (f", gradients compressed: "
                      f"{compression_label(self.cell.compression, self.cell.powersgd_rank)} "
                      f"(a communication hook)")
        return {"parallelism": "DistributedDataParallel", **self.launch_details(),
                "reduction": "all-reduce",
                "reduction_detail": f"DDP's bucketed all-reduce over {group}, "
                                    f"overlapped with the backward pass"}
