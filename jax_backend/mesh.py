"""The one-axis mesh every JAX step runs over, and the float32 math XLA is told to use: what the
backends' set-up (jax_backend.base), the networks, the loop, the probe's part and
jax-multiprocess share, in a module of its own that imports none of them.

Like jax_backend.base, which imports it before JAX starts, it imports no framework: JAX is
imported when a mesh is made, in a launched worker.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jax

AXIS = "batch"  # the mesh's one axis, the batch's first dimension split over it
# Float32 matmuls and convolutions as the cell's precision asks (JAX's default on GPUs lets them
# run in TF32): jax_default_matmul_precision's values.
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}


def one_axis_mesh(devices: list[jax.Device], axis: str = AXIS) -> jax.sharding.Mesh:
    """A mesh of `devices` in that order along one axis, by jax.make_mesh (the pinned JAX's way
    to lay one out). Its axis is Auto: the step says how its arrays lie (NamedSharding) and XLA's
    partitioner carries that through the step, as it does with a Mesh built by hand."""
    import jax
    return jax.make_mesh((len(devices),), (axis,), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=devices)


def platform(kind: str) -> str:
    """JAX's platform name of a device kind ("cpu", "cuda")."""
    return "gpu" if kind == "cuda" else "cpu"


def has_tf32(kind: str, device: jax.Device) -> bool:
    """Whether `device` can run float32 matmuls in TF32: a GPU of compute capability 8.0 on."""
    return kind == "cuda" and float(getattr(device, "compute_capability", "0")) >= 8.0
