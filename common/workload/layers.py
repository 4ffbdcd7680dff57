"""The layers a benchmark model's spec is made of (common.workload.models), framework-free, and
what each computes: its output's shape, its trainable values and tensors, its forward FLOPs.
PyTorch, Keras and Flax each build one module per layer (pt_backend, keras_models,
jax_backend), so the frameworks cannot drift apart."""
import math
from collections.abc import Iterator
from dataclasses import dataclass

LAYERNORM_EPSILON = 1e-5  # PyTorch's default; Keras' is 1e-3
BATCHNORM = {"epsilon": 1e-5, "torch_momentum": 0.1}  # PyTorch's defaults; Keras' momentum is 0.9


@dataclass(frozen=True)
class Conv:
    """kxk convolution with PyTorch's padding k // 2 ("same" at stride 1), then ReLU if `relu`."""
    in_channels: int
    out_channels: int
    kernel: int = 3
    stride: int = 1
    bias: bool = True
    relu: bool = True


@dataclass(frozen=True)
class BatchNorm:
    """Batch normalisation over the channels (learned scale and shift, running statistics), then
    ReLU if `relu`: batch statistics in training, running statistics in evaluation."""
    channels: int
    relu: bool = True


@dataclass(frozen=True)
class MaxPool:
    """2x2 max pooling, stride 2, floor (Keras 'valid')."""
    size: int = 2


@dataclass(frozen=True)
class GlobalAvgPool:
    """The mean over height and width: (C, H, W) -> (C,)."""


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class Dense:
    """Fully connected layer; relu=False only for the logits layer."""
    in_features: int
    out_features: int
    relu: bool = True


@dataclass(frozen=True)
class Residual:
    """A residual block: body(x) + shortcut(x) (the identity when `shortcut` is empty), then
    ReLU."""
    body: tuple
    shortcut: tuple = ()


@dataclass(frozen=True)
class Embedding:
    """A token's learned embedding plus its position's: (T,) tokens -> (T, width). The token
    table is also the output layer's weight (`TiedLogits`)."""
    vocab: int
    context: int
    width: int


@dataclass(frozen=True)
class Block:
    """A pre-LayerNorm transformer block: x + proj(attention(ln1(x))), then
    x + out(gelu(fc(ln2(x)))); causal self-attention of `heads` heads over the packed
    query-key-value projection, an MLP 4x as wide, every linear layer with a bias. PyTorch's
    parameter order: ln1, qkv, proj, ln2, fc, out (each weight, then bias)."""
    width: int
    heads: int
    context: int


@dataclass(frozen=True)
class LayerNorm:
    """Layer normalisation over the width (learned scale and shift), epsilon 1e-5."""
    width: int


@dataclass(frozen=True)
class TiedLogits:
    """(T, width) -> (T, vocab) through the token embedding's table transposed: no parameters
    of its own."""
    width: int
    vocab: int


EMBEDDING_UNIT = "embed1"  # a language model's embedding, whose table its output layer reads
LAYER_NAMES = {Conv: "conv", BatchNorm: "bn", MaxPool: "pool", GlobalAvgPool: "avgpool",
               Flatten: "flatten", Dense: "fc", Residual: "block", Embedding: "embed",
               Block: "block", LayerNorm: "ln", TiedLogits: "head"}


def output_shape(layer, shape: tuple) -> tuple:
    """The shape `layer` makes of `shape`, checking that the spec is consistent."""
    if isinstance(layer, Conv):
        assert shape[0] == layer.in_channels, (layer, shape)
        pad = layer.kernel // 2
        return (layer.out_channels,
                *((side + 2 * pad - layer.kernel) // layer.stride + 1 for side in shape[1:]))
    if isinstance(layer, BatchNorm):
        assert shape[0] == layer.channels, (layer, shape)
        return shape
    if isinstance(layer, MaxPool):
        return (shape[0], shape[1] // layer.size, shape[2] // layer.size)
    if isinstance(layer, GlobalAvgPool):
        return (shape[0],)
    if isinstance(layer, Flatten):
        return (math.prod(shape),)
    if isinstance(layer, Dense):
        assert shape == (layer.in_features,), (layer, shape)
        return (layer.out_features,)
    if isinstance(layer, Embedding):
        assert shape == (layer.context,), (layer, shape)
        return (layer.context, layer.width)
    if isinstance(layer, (Block, LayerNorm)):
        assert shape[1:] == (layer.width,), (layer, shape)
        return shape
    if isinstance(layer, TiedLogits):
        assert shape[1:] == (layer.width,), (layer, shape)
        return (shape[0], layer.vocab)
    body, shortcut = shape, shape
    for inner in layer.body:
        body = output_shape(inner, body)
    for inner in layer.shortcut:
        shortcut = output_shape(inner, shortcut)
    assert body == shortcut, (layer, body, shortcut)
    return body



def leaves(layers: tuple, shape: tuple) -> Iterator[tuple[object, tuple]]:
    """(layer, input shape) of every layer that is not a block, depth first (a block's body, then
    its shortcut): PyTorch's parameter order."""
    for layer in layers:
        if isinstance(layer, Residual):
            yield from leaves(layer.body, shape)
            yield from leaves(layer.shortcut, shape)
        else:
            yield layer, shape
        shape = output_shape(layer, shape)



def layer_parameters(layer) -> int:
    """Trainable values of one layer (a block's: its layers')."""
    if isinstance(layer, Conv):
        return layer.kernel ** 2 * layer.in_channels * layer.out_channels \
            + (layer.out_channels if layer.bias else 0)
    if isinstance(layer, BatchNorm):
        return 2 * layer.channels  # scale and shift; the running statistics are not trained
    if isinstance(layer, Dense):
        return layer.in_features * layer.out_features + layer.out_features
    if isinstance(layer, Residual):
        return sum(layer_parameters(inner) for inner in layer.body + layer.shortcut)
    if isinstance(layer, (Embedding, Block, LayerNorm)):
        return sum(math.prod(shape) for shape in tensor_shapes_of(layer))
    return 0  # TiedLogits: the token embedding's table


def layer_flops(layer, shape: tuple) -> int:
    """Forward FLOPs of one sample through `layer` given its input shape: 2 x the
    multiply-accumulates of convolutions and dense layers (a block's: its layers')."""
    if isinstance(layer, Conv):
        _, height, width = output_shape(layer, shape)
        return 2 * layer.kernel ** 2 * layer.in_channels * layer.out_channels * height * width
    if isinstance(layer, Dense):
        return 2 * layer.in_features * layer.out_features
    if isinstance(layer, Residual):
        return sum(layer_flops(inner, inner_shape)
                   for inner, inner_shape in leaves((layer,), shape))
    if isinstance(layer, Block):
        tokens, width = shape
        # qkv, proj, fc and out per token; then attention's two products (Q K^T and the
        # weights times V) over every pair of positions, as torch counts them (the causal mask
        # halves what they need, not what they compute)
        return 2 * tokens * 12 * width ** 2 + 2 * 2 * tokens ** 2 * width
    if isinstance(layer, TiedLogits):
        return 2 * shape[0] * layer.width * layer.vocab
    return 0



# A transformer block's tensors in PyTorch's order (pt_backend.models' module names).
BLOCK_TENSORS = ("ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                 "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "out.weight", "out.bias")


def tensor_shapes_of(layer) -> list[tuple[int, ...]]:
    """The shapes of a transformer layer's tensors, in PyTorch's order and layout (linear
    weights (out, in))."""
    if isinstance(layer, Embedding):
        return [(layer.vocab, layer.width), (layer.context, layer.width)]
    if isinstance(layer, LayerNorm):
        return [(layer.width,), (layer.width,)]
    width = layer.width
    return [(width,), (width,), (3 * width, width), (3 * width,), (width, width), (width,),
            (width,), (width,), (4 * width, width), (4 * width,), (width, 4 * width), (width,)]

