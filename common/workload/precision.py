"""Mixed precision, alike in both frameworks (the `precision` setting): the lower dtype of the
forward and backward passes (weights, their gradients and the optimizer stay float32), and fp16's
dynamic loss scale, which PyTorch's GradScaler and Keras' LossScaleOptimizer are both given."""

LOWER = {"bf16": "bfloat16", "fp16": "float16"}  # a mixed precision -> its dtype's name
LOSS_SCALE_START = 2.0 ** 15  # Keras' default; PyTorch's is 2**16
LOSS_SCALE_GROWTH_STEPS = 2000  # steps without an overflow before the scale doubles (both)


def lower_dtype(precision: str) -> str | None:
    """The dtype name the passes run in under `precision`, None where it is float32."""
    return LOWER.get(precision)
