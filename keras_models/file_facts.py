"""What Keras counts of a model file's keras() model (common.workload.model_file), on whichever
runtime Keras runs: the part of TensorFlow's describer (tf_backend.user_model) and keras-jax's
(jax_backend.user_model) they share, each adding its runtime's own count of a forward pass."""
import math
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np

from xbench.common.errors import UserError

BATCH = 2


def seed() -> None:
    """What each describer seeds before calling keras() (the cells seed their own)."""
    keras.utils.set_random_seed(0)


def counted(model, takes: dict, path: Path,
            forward_flops: Callable[[keras.Model, dict], tuple[int, str]]) -> dict:
    """The file's model checked (a keras.Model whose logits on a batch of 2 fit its targets and
    classes) and counted: its parameters, tensor shapes and whether it has BatchNorm, and
    `forward_flops(model, takes)`'s (FLOPs of one sample's forward pass, how counted)."""
    if not isinstance(model, keras.Model):
        raise UserError(f"{path.name}: keras()'s model is {type(model).__name__}, not a "
                        f"keras.Model")
    inputs = np.zeros((BATCH, *takes["input_shape"]), takes["input_dtype"])
    wanted = (BATCH, *takes["target_shape"], takes["classes"])
    try:
        logits = model(inputs, training=False)
    except Exception as e:  # the user's model on inputs of the shape it declared
        raise UserError(f"{path.name}: keras()'s model on inputs of {inputs.shape} raised "
                        f"{type(e).__name__}: {e}") from None
    shape = tuple(getattr(logits, "shape", ()))
    if shape != wanted:
        raise UserError(f"{path.name}: keras()'s model returned {shape or type(logits).__name__} "
                        f"for a batch of {BATCH}; its targets and classes need logits of {wanted}")
    if not model.trainable_variables:  # what every cell would fail on: nothing to train
        raise UserError(f"{path.name}: keras()'s model has no trainable weights: there is "
                        f"nothing to train")
    flops, how = forward_flops(model, takes)
    return {"params": sum(math.prod(v.shape) for v in model.trainable_variables),
            "tensor_shapes": [list(v.shape) for v in model.trainable_variables],
            "flops_per_sample": flops, "activations_per_sample": None,
            "batchnorm": any(isinstance(layer, keras.layers.BatchNormalization)
                             for layer in model._flatten_layers()),
            "counted_by": how}
