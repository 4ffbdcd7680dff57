"""The benchmark models as framework-free layer specs: the blog post's two MNIST CNNs, built
identically in PyTorch and Keras ("same" padding, PyTorch's padding=1).

Both backends build their networks from these specs, so PyTorch and Keras cannot drift apart;
parameter counts and FLOPs are computed here from the spec, never hard-coded.
"""
import math
from dataclasses import dataclass

import numpy as np

INPUT_SHAPE = (1, 28, 28)  # channels, height, width
NUM_CLASSES = 10


@dataclass(frozen=True)
class Conv:
    """3x3 convolution, stride 1, 'same' padding (padding=1 in PyTorch), followed by ReLU."""
    in_channels: int
    out_channels: int
    kernel: int = 3


@dataclass(frozen=True)
class MaxPool:
    """2x2 max pooling, stride 2, floor (Keras 'valid')."""
    size: int = 2


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class Dense:
    """Fully connected layer; relu=False only for the logits layer."""
    in_features: int
    out_features: int
    relu: bool = True


MODELS = {
    "small": (
        Conv(1, 32), MaxPool(), Flatten(),
        Dense(14 * 14 * 32, 64), Dense(64, NUM_CLASSES, relu=False),
    ),
    "large": (
        Conv(1, 128), MaxPool(), Conv(128, 256), MaxPool(), Conv(256, 512), MaxPool(), Flatten(),
        Dense(3 * 3 * 512, 512), Dense(512, 512), Dense(512, NUM_CLASSES, relu=False),
    ),
}


def layer_shapes(name):
    """Yield (layer, input shape (C, H, W) or (F,)) through the model, checking the spec is consistent."""
    shape = INPUT_SHAPE
    for layer in MODELS[name]:
        yield layer, shape
        if isinstance(layer, Conv):
            assert shape[0] == layer.in_channels, (name, layer, shape)
            shape = (layer.out_channels, shape[1], shape[2])
        elif isinstance(layer, MaxPool):
            shape = (shape[0], shape[1] // layer.size, shape[2] // layer.size)
        elif isinstance(layer, Flatten):
            shape = (shape[0] * shape[1] * shape[2],)
        elif isinstance(layer, Dense):
            assert shape == (layer.in_features,), (name, layer, shape)
            shape = (layer.out_features,)


def parameter_count(name):
    """Trainable parameters: weights plus biases of every conv and dense layer."""
    total = 0
    for layer, _ in layer_shapes(name):
        if isinstance(layer, Conv):
            total += layer.kernel ** 2 * layer.in_channels * layer.out_channels + layer.out_channels
        elif isinstance(layer, Dense):
            total += layer.in_features * layer.out_features + layer.out_features
    return total


def flops_per_sample(name):
    """Forward-pass FLOPs of one sample, counted as 2 x multiply-accumulates of convs and dense layers.

    This is the convention of torch.utils.flop_counter and of most papers; bias adds, ReLU and
    pooling are left out. Training costs about 3x this (forward + two backward matmuls).
    """
    total = 0
    for layer, shape in layer_shapes(name):
        if isinstance(layer, Conv):
            total += 2 * layer.kernel ** 2 * layer.in_channels * layer.out_channels * shape[1] * shape[2]
        elif isinstance(layer, Dense):
            total += 2 * layer.in_features * layer.out_features
    return total


WEIGHTS_STREAM = 0  # the random stream of the initial weights; common.data's epoch orders use 1, 2, ...


def initial_weights(name: str, seed: int) -> list[np.ndarray]:
    """Every trainable tensor of the model, in PyTorch's parameter order and layout (each layer's
    weight, then its bias; conv weights (out, in, kh, kw), dense weights (out, in)), drawn once with
    numpy from the seed, from PyTorch's default distribution U(-1/sqrt(fan_in), 1/sqrt(fan_in)).

    Every backend of every framework loads these, so all backends of a cell start from the same
    weights and, given the same samples in the same global batches, follow one trajectory."""
    rng = np.random.default_rng([seed, WEIGHTS_STREAM])
    tensors = []
    for layer, _ in layer_shapes(name):
        if isinstance(layer, Conv):
            shape = (layer.out_channels, layer.in_channels, layer.kernel, layer.kernel)
        elif isinstance(layer, Dense):
            shape = (layer.out_features, layer.in_features)
        else:
            continue
        bound = 1 / math.sqrt(math.prod(shape[1:]))
        tensors += [rng.uniform(-bound, bound, shape).astype(np.float32),
                    rng.uniform(-bound, bound, shape[0]).astype(np.float32)]
    return tensors


def activations_per_sample(name):
    """Values one sample's forward pass produces and keeps for the backward pass: the input and
    every layer's output (a conv's and a dense layer's ReLU is a tensor of its own)."""
    total = math.prod(INPUT_SHAPE)
    for layer, shape in layer_shapes(name):
        if isinstance(layer, Conv):
            total += 2 * layer.out_channels * shape[1] * shape[2]
        elif isinstance(layer, MaxPool):
            total += shape[0] * (shape[1] // layer.size) * (shape[2] // layer.size)
        elif isinstance(layer, Dense):
            total += layer.out_features * (2 if layer.relu else 1)
    return total


def gradient_bytes(name, bytes_per_value=4):
    """Bytes all-reduced per step: one float32 gradient per parameter."""
    return parameter_count(name) * bytes_per_value


# The optimizer of every backend (the blog's): Adam with Keras' epsilon, no weight decay.
ADAM = {"learning_rate": 1e-3, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
