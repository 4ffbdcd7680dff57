"""`python -m xbench.tf_backend.user_model FILE`: a user's model file as Keras on TensorFlow
builds it (common.workload.model_file): its keras() checked, the model built once and run on a
batch of 2, its parameters and tensor shapes (keras_models.file_facts) and TensorFlow's own count
of a forward pass's floating-point operations (its profiler on the traced graph), answered as
JSON (common.children.answer); a wrong file is answered in one line."""
from functools import partial

import tensorflow as tf

from xbench.common.workload.file_checks import run_describer
from xbench.keras_models.file_facts import counted, seed


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


if __name__ == "__main__":
    run_describer("keras", seed, partial(counted, forward_flops=forward_flops))
