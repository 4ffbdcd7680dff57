"""The Keras models are PyTorch's models: equal parameters and FLOPs, and with the same weights the
same logits, loss and Adam step on a real MNIST batch."""
import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

from common.models import (
    MODELS,
    Flatten,
    flops_per_sample,
    layer_shapes,
    parameter_count,
)
from pt_backend import models as pt_models
from pt_backend import train as pt_train
from tf_backend import models as tf_models
from tf_backend import train as tf_train
from tf_backend.collectives import OneTensorFlowProcess

BATCH = 64


@pytest.mark.parametrize("name, params", [("small", 402_442), ("large", 4_104_202)])
def test_parameter_counts_equal_across_frameworks(name, params):
    keras_model = tf_models.build_model(name)
    assert tf_models.parameter_count(keras_model) == params == parameter_count(name)
    assert keras_model.count_params() == params
    assert sum(p.numel() for p in pt_models.build_model(name).parameters()) == params


@pytest.mark.parametrize("name", list(MODELS))
def test_keras_flops_equal_torch_flops_and_the_spec(name):
    keras_side, torch_side = tf_models.describe(name), pt_models.describe(name)
    assert keras_side["flops_per_sample"] == torch_side["flops_per_sample"] == flops_per_sample(name)
    assert keras_side["params"] == torch_side["params"]
    assert keras_side["framework"].startswith("Keras 3.") and "TF 2." in keras_side["framework"]


def test_keras_init_follows_torch_default_bounds():
    """U(+-1/sqrt(fan_in)) for kernels and biases, as torch's Conv2d and Linear."""
    keras.utils.set_random_seed(0)
    conv, _, _, dense, _ = tf_models.build_model("small").layers
    for layer, fan_in in ((conv, 9), (dense, 14 * 14 * 32)):
        bound = 1 / np.sqrt(fan_in)
        kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
        assert np.abs(kernel).max() <= bound and np.abs(bias).max() <= bound
        assert kernel.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)  # uniform, not Glorot
        assert np.abs(bias).max() > 0  # drawn, not Keras' zeros


def copy_torch_weights(name, torch_model, keras_model):
    """Load the torch model's weights into the Keras model: OIHW -> HWIO conv kernels, (out, in) ->
    (in, out) dense kernels, and for the first dense layer the flatten order (C, H, W) -> (H, W, C)."""
    torch_layers = [m for m in torch_model if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    keras_layers = [layer for layer in keras_model.layers if layer.weights]
    channels, height, width = next(shape for layer, shape in layer_shapes(name)
                                   if isinstance(layer, Flatten))
    first_dense = True
    for torch_layer, keras_layer in zip(torch_layers, keras_layers, strict=True):
        weight = torch_layer.weight.detach().numpy()
        if isinstance(torch_layer, torch.nn.Conv2d):
            kernel = weight.transpose(2, 3, 1, 0)
        elif first_dense:
            kernel = (weight.reshape(-1, channels, height, width).transpose(2, 3, 1, 0)
                      .reshape(height * width * channels, -1))
            first_dense = False
        else:
            kernel = weight.T
        keras_layer.set_weights([kernel, torch_layer.bias.detach().numpy()])


@pytest.mark.parametrize("name", list(MODELS))
def test_same_weights_give_the_same_logits_loss_and_adam_step(name, mnist):
    torch.manual_seed(0)
    torch_model = pt_models.build_model(name)
    keras_model = tf_models.build_model(name)
    copy_torch_weights(name, torch_model, keras_model)
    images, labels = mnist.train_images[:BATCH].copy(), mnist.train_labels[:BATCH]
    torch_images = pt_train.normalise(torch.from_numpy(images))
    torch_labels = torch.from_numpy(labels.astype(np.int64))
    keras_images, keras_labels = tf_train.normalise(images), tf.constant(labels.astype(np.int32))

    def torch_loss():
        return torch.nn.functional.cross_entropy(torch_model(torch_images), torch_labels)

    def keras_loss():
        return float(tf.reduce_mean(tf_train.cross_entropy(keras_labels, keras_model(keras_images))))

    torch_logits = torch_model(torch_images).detach().numpy()
    assert np.abs(torch_logits - keras_model(keras_images).numpy()).max() < 1e-4
    loss_before = torch_loss()
    assert abs(loss_before.item() - keras_loss()) < 1e-4

    # One Adam step from the same weights, each with its backend's optimizer and step code.
    torch_optimizer = pt_models.build_optimizer(torch_model.parameters())
    torch_optimizer.zero_grad()
    loss_before.backward()
    torch_optimizer.step()
    totals = tf_train.EpochTotals()
    tf_train.make_replica_step(keras_model, tf_models.build_optimizer(), OneTensorFlowProcess(),
                               BATCH, totals)(keras_images, keras_labels)
    loss_after = torch_loss().item()
    # The issue asks for 1e-3; they agree to ~1e-7. Keras' stock Adam (epsilon placed before
    # the bias correction) misses by 1.3e-3, so 1e-4 keeps that difference out.
    assert abs(loss_after - keras_loss()) < 1e-4
    assert loss_after < loss_before.item()  # the step was a real step
    assert totals.read()[0] / BATCH == pytest.approx(loss_before.item(), abs=1e-4)
    assert totals.read()[1] == (torch_logits.argmax(1) == labels).sum()
