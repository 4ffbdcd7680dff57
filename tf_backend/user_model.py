"""`python -m xbench.tf_backend.user_model FILE`: a user's model file as Keras builds it
(common.workload.user_models): its keras() checked, the model built once and run on a batch of 2,
its parameters, tensor shapes and TensorFlow's own count of a forward pass's floating-point
operations (its profiler on the traced graph), printed as JSON. Exit 2 with one line where the
file is wrong."""
import math
from pathlib import Path
from types import ModuleType

import keras
import numpy as np
import tensorflow as tf

from xbench.common.errors import UserError
from xbench.common.workload.user_models import (
    NotServed,
    call,
    data_check,
    run_describer,
    sample_check,
)

BATCH = 2


def forward_flops(model, shape: dict) -> int:
    """TensorFlow's count of one sample's forward pass: its profiler's float operations of the
    traced call (2 per multiply-accumulate, and an operation per bias add and activation)."""
    dtype = tf.int64 if shape["input_dtype"] == "int64" else tf.float32
    traced = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec((1, *shape["input_shape"]), dtype))
    profiler = tf.compat.v1.profiler
    options = (profiler.ProfileOptionBuilder(profiler.ProfileOptionBuilder.float_operation())
               .with_empty_output().build())
    return int(profiler.profile(graph=traced.graph, options=options).total_float_ops)


def describe(module: ModuleType, path: Path) -> dict:
    if not callable(getattr(module, "keras", None)):
        raise NotServed(f"{path.name} defines no keras()")
    keras.utils.set_random_seed(0)
    spec = call(module, "keras", path)
    shape = sample_check(spec, "keras")
    model = spec["model"]
    if not isinstance(model, keras.Model):
        raise UserError(f"{path.name}: keras()'s model is {type(model).__name__}, not a "
                        f"keras.Model")
    inputs = np.zeros((BATCH, *shape["input_shape"]), shape["input_dtype"])
    wanted = (BATCH, *shape["target_shape"], shape["classes"])
    try:
        logits = model(inputs, training=False)
    except Exception as e:  # the user's model on inputs of the shape it declared
        raise UserError(f"{path.name}: keras()'s model on inputs of {inputs.shape} raised "
                        f"{type(e).__name__}: {e}") from None
    if tuple(logits.shape) != wanted:
        raise UserError(f"{path.name}: keras()'s model returned {tuple(logits.shape)} for a batch "
                        f"of {BATCH}; its targets and classes need logits of {wanted}")
    flops = forward_flops(model, shape)
    sizes = data_check(call(module, "data", path), shape, path.name) \
        if callable(getattr(module, "data", None)) else None
    return {**shape, "data": sizes,
            "params": sum(math.prod(v.shape) for v in model.trainable_variables),
            "tensor_shapes": [list(v.shape) for v in model.trainable_variables],
            "flops_per_sample": flops, "training_flops_per_sample": 3 * flops,
            "activations_per_sample": None,
            "batchnorm": any(isinstance(layer, keras.layers.BatchNormalization)
                             for layer in model._flatten_layers()),
            "dominant_math": "matmul",
            "counted_by": f"TensorFlow {tf.__version__}'s profiler (float operations); a "
                          f"training step counted as 3 x forward"}


if __name__ == "__main__":
    run_describer(describe)
