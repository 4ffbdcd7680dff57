"""pt-fsdp: PyTorch's fully sharded data parallelism (FSDP2, `fully_shard`), one process per
device started by torchrun (nccl / gloo). Each rank keeps 1/N of every parameter, its gradient
and its optimizer state; a unit all-gathers its parameters before its forward pass (and again
before its backward pass where it resharded after forward) and reduce-scatters its gradients
after its backward pass, so the optimizer steps on each rank's shard only."""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import TYPE_CHECKING

from xbench.common.backends.backend import wire
from xbench.pt_backend.torchrun import TorchrunBackend

if TYPE_CHECKING:
    from torch import nn

FLOAT32_BYTES = 4  # FSDP gathers and reduces in the parameters' dtype (no MixedPrecisionPolicy)


def units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP2's machinery (fully_shard, and replicate built on it) wraps one by one
    before the root: each top-level unit that has parameters (conv1, dense1, block1, ...), whose
    gradients are reduced as one once its backward is done. A language model's token embedding
    is also its output layer (tied): it stays with the root, whose parameters are whole from the
    first unit's forward to the last's, since two units of their own would each gather and
    reduce the one table."""
    from xbench.pt_backend.models import TorchTokenEmbedding
    return [unit for unit in model.children()
            if any(True for _ in unit.parameters()) and not isinstance(unit, TorchTokenEmbedding)]


class FullyShardedBackend(TorchrunBackend):
    name = "pt-fsdp"

    def wrap_model(self, model, device):
        """Each of the model's units shards its parameters on its own, so one unit at a time is
        whole; then the root, which holds the rest."""
        from torch.distributed.fsdp import fully_shard

        after_forward = self.cell.reshard == "after-forward"
        for unit in units(model):
            fully_shard(unit, reshard_after_forward=after_forward)
        return fully_shard(model, reshard_after_forward=after_forward)

    def watch_collectives(self, wrapped, model, optimizer, clock):
        """Each unit's all-gathers and reduce-scatters through FSDP2's own defaults, subclassed
        to tell `clock` of each (set_custom_all_gather, set_custom_reduce_scatter: FSDP2's
        public way to replace them): `TimedAllGather`, `TimedReduceScatter`."""
        from torch.distributed.fsdp import FSDPModule

        from xbench.pt_backend.fsdp_collectives import TimedAllGather, TimedReduceScatter
        gather, scatter = TimedAllGather(clock), TimedReduceScatter(clock)
        for module in wrapped.modules():
            if isinstance(module, FSDPModule):  # a unit, or the root (whose own may be none)
                module.set_custom_all_gather(gather)
                module.set_custom_reduce_scatter(scatter)

    def wait_for_gradients(self, optimizer, clock):
        clock.done()

    def micro_batch(self, wrapped, syncs):
        """FSDP2 keeps the unsharded gradients of a micro-batch that does not sync and
        reduce-scatters their sum with the one that does."""
        wrapped.set_requires_gradient_sync(syncs)
        return nullcontext()

    def whole_parameters(self, model):
        return [parameter.full_tensor() for parameter in model.parameters()]

    def traffic(self, cell, model, reduction):
        """Per step, over all links: each unit's parameters all-gathered once before forward (and
        again before backward when it reshards after forward), its gradients reduce-scattered
        once, in the passes of a ring its protocol on this device type says (gloo's
        reduce-scatter is an all-reduce: two); a pass over S bytes sends (N-1)/N of S from each
        of N devices. FSDP pads each parameter's first dimension to a multiple of N."""
        devices = cell.world
        if devices == 1:
            return []
        padded = sum(math.ceil(shape[0] / devices) * devices * math.prod(shape[1:]) if shape
                     else devices  # a scalar: one value per shard
                     for shape in model.tensor_shapes("torch")) * FLOAT32_BYTES
        protocol = self.traits.protocol_on(self.device_kind)
        gathers, reductions = protocol.gathers[cell.reshard], protocol.reduce_passes
        again = " and again before backward" if gathers == 2 else ""
        how = ("a ring reduce-scatter: each of N devices sends (N-1)/N of them" if reductions == 1
               else "gloo's reduce-scatter, an all-reduce of them all: each of N devices sends "
                    "2(N-1)/N of them")
        return [wire("parameters all-gathered",
                     cell.accumulate * gathers * (devices - 1) * padded, "computed",
                     f"ring all-gather of each unit's parameters before its forward{again}, "
                     f"each micro-batch: each of N devices sends (N-1)/N of them, padded to N "
                     f"shards"),
                wire("gradients reduce-scattered",
                     cell.syncs_per_step * reductions * (devices - 1) * padded, "computed",
                     f"each unit's gradients after its backward, each sync, in {how}, padded "
                     f"to N shards")]

    def details(self):
        gathered = ("before forward and again before backward"
                    if self.cell.reshard == "after-forward" else "before forward, kept until "
                    "backward is done")
        return {"parallelism": f"FSDP2 fully_shard (reshard {self.cell.reshard})",
                **self.launch_details(), "reduction": "reduce-scatter",
                "reduction_detail": f"each unit's parameters all-gathered {gathered}, its "
                                    f"gradients reduce-scattered after its backward, over "
                                    f"{self.group_described()}; the optimizer steps on each "
                                    f"rank's shard"}

