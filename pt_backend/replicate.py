"""pt-replicate: torch.distributed's composable `replicate` (replicate_with_fsdp, built on FSDP2's
machinery, where PyTorch's maintainers now point DDP's users), one process per device started by
torchrun (nccl / gloo). Every rank keeps the whole model, its parameters replicated over a
one-dimensional device mesh; each unit all-reduces its gradients as one message once its backward
is done (FSDP2's reduction with nothing to shard), and nothing else crosses: no buffer is
broadcast."""
from contextlib import nullcontext

from xbench.common.workload.compression import gradient_wire_bytes
from xbench.pt_backend.fsdp import units
from xbench.pt_backend.torchrun import TorchrunBackend


class ReplicateBackend(TorchrunBackend):
    name = "pt-replicate"

    def wrap_model(self, model, device):
        """Each of the model's units replicated on its own, so that its all-reduce starts when
        its backward is done; then the root, which holds the rest. The mesh is the cell's
        device type's (replicate's default would be the accelerator's, even in a CPU cell); a
        16-bit compression is FSDP2's reduce dtype (the gradients cast for the all-reduce, and
        back)."""
        import torch
        import torch.distributed as dist
        from torch.distributed._composable.replicate_with_fsdp import replicate
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy

        mesh = init_device_mesh(device.type, (dist.get_world_size(),),
                                mesh_dim_names=("replicate",))
        reduce_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.cell.compression)
        policy = MixedPrecisionPolicy(reduce_dtype=reduce_dtype)
        for unit in units(model):
            replicate(unit, mesh=mesh, mp_policy=policy)
        return replicate(model, mesh=mesh, mp_policy=policy)

    def watch_collectives(self, wrapped, model, optimizer, clock):
        """Each unit's gradients ready, and its all-reduce launched where the micro-batch syncs,
        when FSDP2 starts the unit's post-backward (it has no public hook there: the unit's
        parameter group's own method is wrapped); completed when FSDP2 calls the unit's
        all-reduce hook, after the all-reduce, on its stream."""
        from torch.distributed.fsdp import FSDPModule

        for unit in wrapped.modules():
            if isinstance(unit, FSDPModule):
                for group in unit._get_fsdp_state()._fsdp_param_groups:
                    self.time_unit(unit, group, clock)

    def time_unit(self, unit, group, clock):
        """Tell `clock` of one unit's gradients and their all-reduce, in its bytes on the wire;
        on a CPU gloo's all-reduce returns only once done, so it blocks the rank's backward
        (its Flight is `blocking`, as pt-fsdp's collectives are)."""
        size = sum(gradient_wire_bytes(tuple(parameter.sharded_param.shape),
                                       self.cell.compression, 0)
                   for parameter in group.fsdp_params)
        blocking = group.fsdp_params[0].sharded_param.device.type == "cpu"
        in_flight = []
        reduce = group.post_backward

        def post_backward(*unused):
            clock.ready(size)
            if group.reduce_grads:
                in_flight.append(clock.launch(size, blocking=blocking))
            return reduce(*unused)
        group.post_backward = post_backward
        unit.set_all_reduce_hook(lambda reduced: clock.complete(in_flight.pop()))

    def wait_for_gradients(self, optimizer, clock):
        clock.done()

    def micro_batch(self, wrapped, syncs):
        """Where the micro-batch does not sync, every unit's gradients summed on its rank, to
        be all-reduced with the syncing micro-batch's."""
        wrapped.set_requires_gradient_sync(syncs)
        return nullcontext()

    def whole_parameters(self, model):
        """Each rank's replica: the parameters are replicated tensors, whole on every rank."""
        return [parameter.to_local() for parameter in model.parameters()]

    def details(self):
        group = self.group_described()
        if self.cell.compression != "none":
            group += f", gradients compressed: {self.cell.compression} (FSDP2's reduce dtype)"
        return {"parallelism": "replicate (composable, on FSDP2)", **self.launch_details(),
                "reduction": "all-reduce",
                "reduction_detail": f"each unit's gradients all-reduced as one message once "
                                    f"its backward is done, over {group}"}
