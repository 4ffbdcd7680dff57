"""`python -m xbench.tf_backend.user_model FILE`: a user's model file as Keras builds it
(common.workload.model_file): its keras() checked, the model built once and run on a batch of 2,
its parameters, tensor shapes and TensorFlow's own count of a forward pass's floating-point
operations (its profiler on the traced graph), printed as JSON. Exit 2 with one line where the
file is wrong."""
import math
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from xbench.common.errors import UserError
from xbench.common.workload.file_checks import run_describer

BATCH = 2


def forward_flops(model, takes: dict) -> tuple[int, str]:
    """TensorFlow's count of one sample's forward pass: its profiler's float operations of the
    traced call (2 per multiply-accumulate, and an operation per bias add and activation), and
    how it was counted. Its profiler has no count for some operations (an Einsum, which Keras
    runs where an einsum is not one matrix product: MultiHeadAttention's attention, for one):
    where the model has them, the count leaves them out, and says so."""
    dtype = tf.int64 if takes["input_dtype"] == "int64" else tf.float32
    traced = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec((1, *takes["input_shape"]), dtype))
    profiler = tf.compat.v1.profiler
    options = (profiler.ProfileOptionBuilder(profiler.ProfileOptionBuilder.float_operation())
               .with_empty_output().build())
    flops = int(profiler.profile(graph=traced.graph, options=options).total_float_ops)
    uncounted = sorted({op.type for op in traced.graph.get_operations()} & UNCOUNTED)
    how = f"TensorFlow {tf.__version__}'s profiler (float operations)"
    if uncounted:
        how += (f"; a lower bound: it counts no {', '.join(uncounted)}, which this model "
                f"runs")
    return flops, how


# Operations TensorFlow's profiler has no float-operation count for, which models run on.
UNCOUNTED = {"Einsum", "BatchMatMulV3"}


def count(model, takes: dict, path: Path) -> dict:
    """What Keras and TensorFlow count of the file's model: its parameters, tensor shapes and
    forward FLOPs, and whether it has BatchNorm."""
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
    flops, how = forward_flops(model, takes)
    return {"params": sum(math.prod(v.shape) for v in model.trainable_variables),
            "tensor_shapes": [list(v.shape) for v in model.trainable_variables],
            "flops_per_sample": flops, "activations_per_sample": None,
            "batchnorm": any(isinstance(layer, keras.layers.BatchNormalization)
                             for layer in model._flatten_layers()),
            "counted_by": how}


if __name__ == "__main__":
    run_describer("keras", lambda: keras.utils.set_random_seed(0), count)
