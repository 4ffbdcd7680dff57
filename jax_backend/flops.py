"""What XLA's cost analysis counts of a compiled program's FLOPs: a training step's, beside the
spec's count (jax_backend.train's rows), and a model file's forward pass (jax_backend.user_model).
"""


def xla_flops(compiled) -> float | None:
    """The FLOPs XLA's cost analysis counts in one call of a compiled program (one device's
    program, where it is partitioned over a mesh); None where the platform gives none."""
    return (compiled.cost_analysis() or {}).get("flops")


def flops_check(counted: float | None, spec) -> dict:
    """XLA's count of a training step's FLOPs per sample beside xbench's from the model's `spec`
    (the MFU's numerator). They differ where their conventions do: XLA counts the elementwise
    ops too (the loss, activations, the optimizer's update), and leaves out a convolution's
    products with its zero padding, which the spec counts. XLA's is one device's program over
    its share of the batch, the whole optimizer update included (every device steps every
    parameter), so its count per sample grows with the devices. A model file (keras-jax's) has
    no spec (`spec` None): its rows' FLOPs are XLA's own count of its forward pass
    (jax_backend.user_model), no second opinion to check against, so none is given."""
    from_spec = spec.training_flops_per_sample() if spec else None
    return {"xla": counted, "spec": from_spec,
            "ratio": counted / from_spec if counted and from_spec else None}
