"""`python -m xbench.jax_backend.user_model FILE`: a user's model file's keras() as Keras on JAX
builds it, for keras-jax (common.workload.model_file): the checks and counts of Keras on
TensorFlow (keras_models.file_facts), and XLA's cost analysis of a forward pass (compiled for
the CPU, batch 1, as jax_backend.models.describe counts xbench's own models), answered as JSON.
A keras() that fails here after TensorFlow's describer took it (a TensorFlow op in a layer, say)
is not served on JAX: keras-jax's cells are `unsupported`, with why, and the grid goes on.
jax-single, jax-dp and jax-multiprocess train Flax models and take no model file."""
import os

# before Keras and JAX load: Keras on JAX, and one count on every machine
os.environ["KERAS_BACKEND"] = "jax"
os.environ["JAX_PLATFORMS"] = "cpu"

from functools import partial

import jax
import keras
import numpy as np

from xbench.common.workload.file_checks import run_describer
from xbench.jax_backend.flops import xla_flops
from xbench.keras_models.file_facts import counted, seed


def forward_flops(model, takes: dict) -> tuple[int, str]:
    """XLA's count of one sample's forward pass: its cost analysis of the model's
    stateless_call compiled for a batch of 1 (the elementwise ops counted too)."""
    inputs = np.zeros((1, *takes["input_shape"]),
                      np.int32 if takes["input_dtype"] == "int64" else np.float32)
    forward = jax.jit(lambda trainable, others, x: model.stateless_call(
        trainable, others, x, training=False)[0])
    compiled = forward.lower([v.value for v in model.trainable_variables],
                             [v.value for v in model.non_trainable_variables], inputs).compile()
    return int(xla_flops(compiled)), (f"XLA's cost analysis (JAX {jax.__version__}, Keras "
                                      f"{keras.__version__} on JAX)")


if __name__ == "__main__":
    run_describer("keras", seed, partial(counted, forward_flops=forward_flops),
                  runtime="Keras' JAX backend")
