"""The Keras GPT models are PyTorch's: the same logits, loss, gradients and Adam steps from the
same initial weights, the spec's parameters and FLOPs, one variable for the tied token table, and
the units `xbench profile` times. gpt-tiny on the CPU, random token windows."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
from torch.nn import functional

from xbench.common.workload.models import MODELS, VOCAB
from xbench.keras_models import models as keras_nets
from xbench.pt_backend import models as pt_models

NAME = "gpt-tiny"
BATCH = 4


def windows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """BATCH random windows of gpt-tiny's context: the input tokens and the next tokens."""
    context = MODELS[NAME].input_shape()[0]
    tokens = np.random.default_rng(seed).integers(0, VOCAB, (BATCH, context + 1))
    return tokens[:, :-1], tokens[:, 1:]


def torch_loss(model, inputs, targets) -> torch.Tensor:
    """Mean next-token cross-entropy over the batch's tokens."""
    logits = model(torch.from_numpy(inputs))
    return functional.cross_entropy(logits.reshape(-1, VOCAB), torch.from_numpy(targets).ravel())


def keras_loss(model, inputs, targets) -> tf.Tensor:
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        targets.astype(np.int32), tf.cast(model(inputs.astype(np.int32)), tf.float32)))


def largest_difference(keras_tensors, torch_tensors) -> float:
    """The largest difference between Keras' tensors and PyTorch's (converted to Keras' layout),
    both per layer in the spec's order."""
    return max(float(np.abs(mine - theirs).max())
               for layer_mine, layer_theirs in zip(keras_tensors, keras_nets.keras_layout(
                   NAME, torch_tensors), strict=True)
               for mine, theirs in zip(layer_mine, layer_theirs, strict=True))


@pytest.mark.parametrize("seed", [0, 1])
def test_same_weights_give_the_same_logits(seed):
    torch_model = pt_models.build_model(MODELS[NAME], seed)
    keras_model = keras_nets.build_model(MODELS[NAME], seed)
    inputs, _ = windows(seed)
    torch_logits = torch_model(torch.from_numpy(inputs)).detach().numpy()
    keras_logits = keras_model(inputs.astype(np.int32)).numpy()
    assert keras_logits.shape == torch_logits.shape == (BATCH, MODELS[NAME].input_shape()[0], VOCAB)
    # measured: at most 7.2e-7 over seeds 0-2 (logits up to 1.7 in magnitude)
    assert np.abs(keras_logits - torch_logits).max() < 1e-5


def test_same_loss_and_weights_after_three_adam_steps():
    """Each backend's Adam (both step as torch.optim.Adam does) on three batches."""
    torch_model = pt_models.build_model(MODELS[NAME], 0)
    keras_model = keras_nets.build_model(MODELS[NAME], 0)
    torch_optimizer = pt_models.build_optimizer(torch_model.parameters())
    keras_optimizer = keras_nets.build_optimizer()
    for step in range(3):
        inputs, targets = windows(10 + step)
        torch_optimizer.zero_grad()
        loss = torch_loss(torch_model, inputs, targets)
        loss.backward()
        torch_optimizer.step()
        with tf.GradientTape() as tape:
            keras_side = keras_loss(keras_model, inputs, targets)
        keras_optimizer.apply(tape.gradient(keras_side, keras_model.trainable_variables),
                              keras_model.trainable_variables)
        # measured: at most 9.5e-7 over initial seeds 0-11 (float32 rounding of a loss of 4.2)
        assert abs(loss.item() - float(keras_side)) < 1e-5
    inputs, targets = windows(13)
    assert abs(torch_loss(torch_model, inputs, targets).item()
               - float(keras_loss(keras_model, inputs, targets))) < 1e-5
    trained = [p.detach().numpy() for p in torch_model.parameters()]
    # measured: 1.5e-5 here, at most 3.7e-5 over initial seeds 0-11, in linear weights whose
    # gradient is ~1e-7: Adam's g / (sqrt(v) + 1e-7) turns float32 rounding of such a g into a
    # few % of a step of 1e-3 (the losses, gradients and logits agree to ~1e-7)
    assert largest_difference(keras_nets.trainable_leaf_weights(keras_model), trained) < 1e-4
    moved = max(float(np.abs(after - before).max())
                for after, before in zip(trained, MODELS[NAME].initial_weights(0), strict=True))
    assert moved > 2e-3  # three real steps of about the learning rate


def test_the_tied_table_is_one_variable_whose_gradient_sums_both_uses():
    keras_model = keras_nets.build_model(MODELS[NAME], 0)
    table = keras_model.get_layer("embed1").token_table
    variables = keras_model.trainable_variables
    assert sum(variable is table for variable in variables) == 1
    assert len({id(variable) for variable in variables}) == len(variables) \
        == len(MODELS[NAME].tensor_shapes())
    assert keras_model.get_layer("head1").trainable_variables == []

    inputs, targets = windows(3)
    with tf.GradientTape() as tape:
        loss = keras_loss(keras_model, inputs, targets)
    keras_gradient = tape.gradient(loss, table).numpy()
    # PyTorch's gradient of the table, split into its two uses: the output layer's (through a
    # copy of the table) and the embedding lookup's (through the table itself)
    torch_model = pt_models.build_model(MODELS[NAME], 0)
    lookup_table = torch_model.embed1.token.weight
    head_table = lookup_table.detach().clone().requires_grad_()
    hidden = torch_model[:-1](torch.from_numpy(inputs))
    functional.cross_entropy(functional.linear(hidden, head_table).reshape(-1, VOCAB),
                             torch.from_numpy(targets).ravel()).backward()
    lookup_share, head_share = lookup_table.grad.numpy(), head_table.grad.numpy()
    # measured: at most 2.2e-8 (gradients up to 0.05)
    assert np.abs(keras_gradient - (lookup_share + head_share)).max() < 1e-6
    assert min(np.abs(lookup_share).max(), np.abs(head_share).max()) > 1e-3  # both count


@pytest.mark.parametrize("name", ["gpt-tiny", "gpt-small"])
def test_parameters_and_flops_of_the_built_model_are_the_specs(name):
    keras_model = keras_nets.build_model(MODELS[name])
    assert keras_nets.parameter_count(keras_model) == MODELS[name].parameters()
    assert keras_nets.forward_flops(keras_model) == MODELS[name].flops_per_sample()


def test_units_are_the_specs_named_layers_and_take_token_ids():
    keras_model = keras_nets.build_model(MODELS[NAME])
    assert [unit.name for unit in keras_model.layers] == [unit for unit, _, _ in
                                                          MODELS[NAME].named_layers()]
    assert keras_model.inputs[0].shape == (None, *MODELS[NAME].input_shape())
    assert keras_model.inputs[0].dtype == "int32"


def test_mixed_bfloat16_computes_as_torch_autocast_does():
    """Under a mixed policy the variables stay float32, and the residual stream, embeddings and
    LayerNorms float32 as torch.autocast keeps them; the linear layers, attention and the
    output layer compute in bfloat16: the same logits as PyTorch's under autocast."""
    inputs, _ = windows(4)
    reference = keras_nets.build_model(MODELS[NAME], 0)(inputs.astype(np.int32)).numpy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras_model = keras_nets.build_model(MODELS[NAME], 0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert {variable.dtype for variable in keras_model.trainable_variables} == {"float32"}
    x = inputs.astype(np.int32)
    for unit in keras_model.layers:
        x = unit(x)
        assert x.dtype == (tf.bfloat16 if unit.name == "head1" else tf.float32), unit.name
    keras_logits = tf.cast(x, tf.float32).numpy()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch_logits = pt_models.build_model(MODELS[NAME], 0)(torch.from_numpy(inputs))
    assert torch_logits.dtype == torch.bfloat16
    # measured: 7.0e-3 from float32 (logits up to 1.6; bfloat16 keeps 8 bits of mantissa), and
    # 7.8e-3 from PyTorch's: one bfloat16 step at that magnitude
    assert np.abs(keras_logits - reference).max() < 0.05
    assert np.abs(keras_logits - torch_logits.float().detach().numpy()).max() < 0.02
