"""The Keras networks and optimizer, built from common.models' specs (channels last: NHWC,
"same" padding), starting from the same initial weights as the PyTorch networks.
"""
import math

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from common.models import (
    ADAM,
    INPUT_SHAPE,
    MODELS,
    Conv,
    Dense,
    Flatten,
    MaxPool,
    initial_weights,
    layer_shapes,
)


def build_model(name, seed=0):
    """The model `name` with the initial weights every backend starts from (common.models),
    converted from PyTorch's layout to Keras'."""
    channels, height, width = INPUT_SHAPE
    layers = [keras.Input((height, width, channels))]
    for layer in MODELS[name]:
        if isinstance(layer, Conv):
            layers.append(keras.layers.Conv2D(layer.out_channels, layer.kernel, padding="same",
                                              activation="relu", kernel_initializer="zeros"))
        elif isinstance(layer, MaxPool):
            layers.append(keras.layers.MaxPooling2D(layer.size))
        elif isinstance(layer, Flatten):
            layers.append(keras.layers.Flatten())
        elif isinstance(layer, Dense):
            layers.append(keras.layers.Dense(layer.out_features,
                                             activation="relu" if layer.relu else None,
                                             kernel_initializer="zeros"))
    model = keras.Sequential(layers, name=name)
    model.set_weights(keras_layout(name, initial_weights(name, seed)))
    return model


def keras_layout(name, tensors):
    """PyTorch-layout weights (common.models.initial_weights) in Keras' layout: conv kernels
    OIHW -> HWIO, dense kernels (out, in) -> (in, out), and for the dense layer after the
    flatten the rows reordered from PyTorch's (C, H, W) flatten order to Keras' (H, W, C)."""
    converted, values = [], iter(tensors)
    flattened = None
    for layer, shape in layer_shapes(name):
        if isinstance(layer, Flatten):
            flattened = shape
        if not isinstance(layer, (Conv, Dense)):
            continue
        weight, bias = next(values), next(values)
        if isinstance(layer, Conv):
            kernel = weight.transpose(2, 3, 1, 0)
        elif flattened is not None:
            c, h, w = flattened
            kernel = weight.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1)
            flattened = None
        else:
            kernel = weight.T
        converted += [np.ascontiguousarray(kernel), bias]
    return converted


class TorchAdam(keras.optimizers.Adam):
    """Adam as torch.optim.Adam (and the Adam paper's Algorithm 1) computes it: epsilon is added
    to the bias-corrected sqrt(v). Keras adds it before the correction, which makes its epsilon
    eps / sqrt(1 - beta_2^t), 32x larger at step 1, fading over the first thousands of steps;
    from the same weights that alone moved the loss after one step by 1.3e-3 against PyTorch
    (small model, 64 MNIST images), against 2e-7 with this class."""

    def __init__(self, l2=0.0, **settings):
        super().__init__(**settings)
        self.l2 = l2

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        dtype = variable.dtype
        gradient = with_l2(ops.cast(gradient, dtype), variable, self.l2)
        step = ops.cast(self.iterations + 1, dtype)
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        m_hat = ops.divide(m, 1 - ops.power(ops.cast(self.beta_1, dtype), step))
        v_hat = ops.divide(v, 1 - ops.power(ops.cast(self.beta_2, dtype), step))
        self.assign_sub(variable, ops.divide(ops.multiply(ops.cast(learning_rate, dtype), m_hat),
                                             ops.add(ops.sqrt(v_hat), self.epsilon)))


class TorchSGD(keras.optimizers.SGD):
    """SGD as torch.optim.SGD computes it: the momentum buffer b = momentum * b + g (b = g at the
    first step) and p -= lr * b. Keras keeps v = momentum * v - lr * g instead, which is the same
    step only while lr is constant: under a warm-up it is not. L2 weight decay is added to the
    gradient (with_l2), as PyTorch does; Keras' own weight_decay is decoupled (AdamW-style)."""

    def __init__(self, l2=0.0, **settings):
        super().__init__(**settings)
        self.l2 = l2

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = with_l2(ops.cast(gradient, dtype), variable, self.l2)
        if self.momentum != 0:
            buffer = self.momentums[self._get_variable_index(variable)]
            self.assign(buffer, ops.add(ops.multiply(buffer, ops.cast(self.momentum, dtype)),
                                        gradient))
            gradient = buffer
        self.assign_sub(variable, ops.multiply(ops.cast(learning_rate, dtype), gradient))


def with_l2(gradient, variable, l2):
    """The gradient of loss + l2/2 * |w|^2: PyTorch's weight_decay in SGD and Adam."""
    return ops.add(gradient, ops.multiply(variable, l2)) if l2 else gradient


def build_optimizer(name="adam", lr=ADAM["learning_rate"], momentum=0.0, weight_decay=0.0):
    """The optimizer of every backend (common.grid's settings), stepping as PyTorch's does."""
    if name == "sgd":
        return TorchSGD(learning_rate=lr, momentum=momentum, l2=weight_decay)
    return TorchAdam(**{**ADAM, "learning_rate": lr}, l2=weight_decay)


def parameter_count(model):
    return sum(math.prod(v.shape) for v in model.trainable_variables)


def forward_flops(model):
    """2 x multiply-accumulates of the conv and dense layers, from the built layers' kernels and
    output shapes (the convention of common.models.flops_per_sample)."""
    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            _, height, width, _ = layer.output.shape
            total += 2 * math.prod(layer.kernel.shape) * height * width
        elif isinstance(layer, keras.layers.Dense):
            total += 2 * math.prod(layer.kernel.shape)
    return total


def describe(name):
    """Parameters and forward FLOPs counted on the built Keras model."""
    model = build_model(name)
    versions = f"Keras {_major_minor(keras.__version__)} / TF {_major_minor(tf.__version__)}"
    return {"framework": versions,
            "params": parameter_count(model), "flops_per_sample": forward_flops(model)}


def _major_minor(version):
    return ".".join(version.split(".")[:2])
