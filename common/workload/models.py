"""The benchmark models as framework-free layer specs, built identically in PyTorch and Keras.

- `small`, `large`: the blog post's two MNIST CNNs (the study xbench grows from; "same" padding,
  PyTorch's padding=1).
- `resnet18`: the CIFAR form of ResNet-18 the course lab trains (HPML lab 4): He et al. 2016's
  ResNet-18 as kuangliu/pytorch-cifar writes it for 32x32 images (3x3 stem, no max-pool, four
  stages of two BasicBlocks, 64/128/256/512 channels, global average pool).
- `vgg19`: VGG-19 with BatchNorm for 32x32 inputs (Simonyan & Zisserman 2015, configuration E,
  as kuangliu/pytorch-cifar writes it), the case study's model (data parallelisation with PyTorch):
  one linear layer.
- `gpt-tiny`, `gpt-small`, `gpt-medium`: a GPT-style decoder on Tiny Shakespeare's characters
  (Radford et al. 2019's GPT-2 as nanoGPT writes it): learned token and position embeddings,
  pre-LayerNorm blocks of causal self-attention and a 4x GELU MLP, a last LayerNorm, the output
  layer tied to the token embedding, no dropout. gpt-small is nanoGPT's shakespeare_char shape,
  gpt-medium GPT-2 small's.

Both backends build their networks from these specs, so PyTorch and Keras cannot drift apart;
parameter counts and FLOPs are computed here from the spec, never hard-coded.
"""
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from xbench.common.errors import known_name
from xbench.common.workload import user_models
from xbench.common.workload.user_models import UserModel

# The images each dataset holds: channels, height, width.
INPUT_SHAPES = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32)}
NUM_CLASSES = 10
VOCAB = 65  # Tiny Shakespeare's distinct characters (common.workload.data's text)
LAYERNORM_EPSILON = 1e-5  # PyTorch's default; Keras' is 1e-3
GPT_INIT_STD = 0.02  # GPT-2's initial weights: N(0, 0.02), residual projections scaled down
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


@dataclass(frozen=True)
class Model:
    dataset: str   # the dataset it takes (INPUT_SHAPES for images; "shakespeare": text)
    layers: tuple


def conv_bn(in_channels: int, out_channels: int, kernel: int = 3, stride: int = 1,
            relu: bool = True) -> tuple:
    """A convolution without bias followed by BatchNorm (ResNet's unit)."""
    return (Conv(in_channels, out_channels, kernel, stride, bias=False, relu=False),
            BatchNorm(out_channels, relu=relu))


def basic_block(in_channels: int, out_channels: int, stride: int) -> Residual:
    """ResNet's BasicBlock: two 3x3 conv-BN, a 1x1 conv-BN shortcut where the shape changes."""
    shortcut = (conv_bn(in_channels, out_channels, 1, stride, relu=False)
                if stride != 1 or in_channels != out_channels else ())
    return Residual(conv_bn(in_channels, out_channels, 3, stride)
                    + conv_bn(out_channels, out_channels, 3, 1, relu=False), shortcut)


def resnet18() -> Model:
    blocks, channels = [], 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for first in (True, False):
            blocks.append(basic_block(channels, width, stride if first else 1))
            channels = width
    return Model("cifar10", (*conv_bn(3, 64), *blocks, GlobalAvgPool(),
                             Dense(512, NUM_CLASSES, relu=False)))


def vgg19() -> Model:
    layers, channels = [], 3
    for width in (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
                  512, 512, 512, 512, "M", 512, 512, 512, 512, "M"):
        if width == "M":
            layers.append(MaxPool())
        else:
            layers += [Conv(channels, width, relu=False), BatchNorm(width)]
            channels = width
    return Model("cifar10", (*layers, Flatten(), Dense(512, NUM_CLASSES, relu=False)))


def gpt(layers: int, heads: int, width: int, context: int) -> Model:
    """A GPT-style decoder over Tiny Shakespeare's characters."""
    assert width % heads == 0, (width, heads)
    return Model("shakespeare", (Embedding(VOCAB, context, width),
                                 *[Block(width, heads, context)] * layers, LayerNorm(width),
                                 TiedLogits(width, VOCAB)))


MODELS = {
    "small": Model("mnist", (
        Conv(1, 32), MaxPool(), Flatten(),
        Dense(14 * 14 * 32, 64), Dense(64, NUM_CLASSES, relu=False),
    )),
    "large": Model("mnist", (
        Conv(1, 128), MaxPool(), Conv(128, 256), MaxPool(), Conv(256, 512), MaxPool(), Flatten(),
        Dense(3 * 3 * 512, 512), Dense(512, 512), Dense(512, NUM_CLASSES, relu=False),
    )),
    "resnet18": resnet18(),
    "vgg19": vgg19(),
    "gpt-tiny": gpt(layers=4, heads=4, width=128, context=64),
    "gpt-small": gpt(layers=6, heads=6, width=384, context=256),
    "gpt-medium": gpt(layers=12, heads=12, width=768, context=1024),
}
EMBEDDING_UNIT = "embed1"  # a language model's embedding, whose table its output layer reads
LAYER_NAMES = {Conv: "conv", BatchNorm: "bn", MaxPool: "pool", GlobalAvgPool: "avgpool",
               Flatten: "flatten", Dense: "fc", Residual: "block", Embedding: "embed",
               Block: "block", LayerNorm: "ln", TiedLogits: "head"}


def check_model_name(name: str) -> str:
    """`name` if it is a model here, a model file's `path@digest` where it names a file or
    module (common.workload.user_models; common.backends.model_files builds it), else a clear
    error with a near miss."""
    if name not in MODELS and user_models.looks_like_file_or_module(name):
        return user_models.reference(name)
    return known_name(name, MODELS, "model")


def user_model(name: str) -> UserModel | None:
    """What xbench knows of the model file `name` names; None for xbench's own models."""
    return None if name in MODELS else user_models.facts(name)


def input_shape(name: str, framework: str | None = None) -> tuple[int, ...]:
    """One sample's input: (C, H, W) of the model's images, or (context,) of its token
    windows; a model file's as `framework` takes it (Keras' images channels last)."""
    if user := user_model(name):
        return tuple(user.by(framework)["input_shape"])
    first = MODELS[name].layers[0]
    return (first.context,) if isinstance(first, Embedding) else INPUT_SHAPES[MODELS[name].dataset]


def takes_ids(name: str) -> bool:
    """Whether the model's inputs are int64 ids (a language model's tokens), else float32."""
    if user := user_model(name):
        return user.input_dtype == "int64"
    return is_language_model(name)


def is_language_model(name: str) -> bool:
    """Whether it predicts a sequence of tokens (else one class per sample)."""
    if user := user_model(name):
        return bool(user.target_shape)
    return isinstance(MODELS[name].layers[0], Embedding)


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


def named_layers(name: str) -> Iterator[tuple[str, object, tuple]]:
    """(name, layer, input shape) of the model's top-level layers, in order: conv1, bn1, block1,
    pool1, fc1 ... (the units `xbench profile` times)."""
    shape, counts = input_shape(name), {}
    for layer in MODELS[name].layers:
        kind = LAYER_NAMES[type(layer)]
        counts[kind] = counts.get(kind, 0) + 1
        yield f"{kind}{counts[kind]}", layer, shape
        shape = output_shape(layer, shape)


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


def layer_shapes(name: str) -> Iterator[tuple[object, tuple]]:
    """(layer, input shape) of every layer of the model (blocks opened), checking the spec."""
    return leaves(MODELS[name].layers, input_shape(name))


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


def parameter_count(name: str, framework: str | None = None) -> int:
    """Trainable parameters: weights and biases of convolutions and dense layers, BatchNorm's
    scales and shifts; a transformer's embeddings, linear layers and LayerNorms (the tied
    output layer's table once); a model file's, counted on `framework`'s built model."""
    if user := user_model(name):
        return user.by(framework)["params"]
    return sum(layer_parameters(layer) for layer in MODELS[name].layers)


def flops_per_sample(name: str, framework: str | None = None) -> int:
    """Forward-pass FLOPs of one sample (an image, or a window of `context` tokens), counted as
    2 x multiply-accumulates of convs, dense layers and a transformer's matrix products.

    This is the convention of torch.utils.flop_counter and of most papers; bias adds, BatchNorm,
    ReLU, residual adds and pooling are left out. A training step's are
    `training_flops_per_sample`. A model file's: what `framework` counted on its built model
    (common.workload.user_models).
    """
    if user := user_model(name):
        return user.by(framework)["flops_per_sample"]
    return sum(layer_flops(layer, shape) for _, layer, shape in named_layers(name))


def output_values(name: str) -> int:
    """Values of one sample's output: its class logits, or a window's next-token logits."""
    if user := user_model(name):
        return math.prod(user.target_shape) * user.classes
    shape = input_shape(name)
    for layer in MODELS[name].layers:
        shape = output_shape(layer, shape)
    return math.prod(shape)


def dominant_math(name: str) -> str:
    """'convolution' or 'matmul': which kind of layer does most of the model's FLOPs (a GPU may
    run the two at different precisions: PyTorch allows TF32 in convolutions only)."""
    convolution = sum(layer_flops(layer, shape) for layer, shape in leaves(MODELS[name].layers,
                                                                            input_shape(name))
                      if isinstance(layer, Conv))
    return "convolution" if 2 * convolution >= flops_per_sample(name) else "matmul"


def training_flops_per_sample(name: str) -> int:
    """FLOPs of one sample's training step: the forward's, and per layer the backward's two
    products (the weights' gradient and the input's), each as many as the layer's forward, except
    the first layer's input gradient, which no framework computes (its input is the data). The
    common "3 x forward" counts that one too: 13.6% too many for the small model. A language
    model's first layer is its embedding, a lookup: its products all need both gradients, so
    there it is 3 x forward exactly."""
    first, shape = next(leaves(MODELS[name].layers, input_shape(name)))
    return 3 * flops_per_sample(name) - (layer_flops(first, shape)
                                         if isinstance(first, (Conv, Dense)) else 0)


WEIGHTS_STREAM = 0  # the random stream of the initial weights; common.workload.data's epoch
                    # orders use 1, 2, ...


def initial_weights(name: str, seed: int) -> list[np.ndarray]:
    """Every trainable tensor of the model, in PyTorch's parameter order and layout (each layer's
    weight, then its bias; conv weights (out, in, kh, kw), dense weights (out, in); BatchNorm's
    scale, then shift), drawn once with numpy from the seed, from PyTorch's default distribution
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)); BatchNorm starts at scale 1, shift 0 as in PyTorch.

    A language model's are GPT-2's instead: embeddings and linear weights from N(0, 0.02), the
    two projections back into the residual stream (proj, out) from N(0, 0.02 / sqrt(2 x
    blocks)), biases 0, LayerNorms at scale 1, shift 0.

    Every backend of every framework loads these, so all backends of a cell start from the same
    weights and, given the same samples in the same global batches, follow one trajectory."""
    rng = np.random.default_rng([seed, WEIGHTS_STREAM])
    blocks = sum(isinstance(layer, Block) for layer in MODELS[name].layers)
    tensors = []
    for layer, shapes in parameter_shapes(name):
        if isinstance(layer, (BatchNorm, LayerNorm)):
            tensors += [np.ones(shapes[0], np.float32), np.zeros(shapes[1], np.float32)]
        elif isinstance(layer, Embedding):
            tensors += [rng.normal(0, GPT_INIT_STD, shape).astype(np.float32) for shape in shapes]
        elif isinstance(layer, Block):
            residual = GPT_INIT_STD / math.sqrt(2 * blocks)
            for part, shape in zip(BLOCK_TENSORS, shapes, strict=True):
                if part.startswith("ln"):
                    tensors.append((np.ones if part.endswith("weight") else np.zeros)(
                        shape, np.float32))
                elif part.endswith("bias"):
                    tensors.append(np.zeros(shape, np.float32))
                else:
                    std = residual if part in ("proj.weight", "out.weight") else GPT_INIT_STD
                    tensors.append(rng.normal(0, std, shape).astype(np.float32))
        else:
            bound = 1 / math.sqrt(math.prod(shapes[0][1:]))
            tensors += [rng.uniform(-bound, bound, shape).astype(np.float32) for shape in shapes]
    return tensors


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


def parameter_shapes(name: str) -> Iterator[tuple[object, list[tuple[int, ...]]]]:
    """Each layer with trainable tensors and their shapes, in PyTorch's order and layout (see
    `initial_weights`)."""
    for layer, _ in layer_shapes(name):
        if isinstance(layer, BatchNorm):
            yield layer, [(layer.channels,), (layer.channels,)]
        elif isinstance(layer, Conv):
            weight = (layer.out_channels, layer.in_channels, layer.kernel, layer.kernel)
            yield layer, [weight, (layer.out_channels,)] if layer.bias else [weight]
        elif isinstance(layer, Dense):
            yield layer, [(layer.out_features, layer.in_features), (layer.out_features,)]
        elif isinstance(layer, (Embedding, Block, LayerNorm)):
            yield layer, tensor_shapes_of(layer)


def activations_per_sample(name: str) -> int:
    """Values one sample's forward pass produces and keeps for the backward pass: the input and
    every layer's output (a ReLU is a tensor of its own; a block adds its sum and its ReLU).
    A transformer block keeps, per token, the inputs of its two LayerNorms and their outputs,
    the queries, keys and values, the attention output and its projection, the MLP's hidden
    layer before and after GELU and its output (18 x width), and each head's attention weights
    over the window. A model file's: the values PyTorch's autograd saved for the backward pass
    (0 where only Keras builds it: not counted)."""
    if user := user_model(name):
        return user.by("torch").get("activations_per_sample") or 0
    if is_language_model(name):
        tokens = input_shape(name)[0]  # and as many token ids
        return tokens + sum(tokens * (18 * layer.width + layer.heads * tokens)
                            if isinstance(layer, Block) else math.prod(output_shape(layer, shape))
                            for layer, shape in layer_shapes(name))
    total = math.prod(input_shape(name))
    for layer, shape in layer_shapes(name):
        if not isinstance(layer, Flatten):  # a view of its input
            size = math.prod(output_shape(layer, shape))
            total += size * (2 if getattr(layer, "relu", False) else 1)
    for _, layer, shape in named_layers(name):
        if isinstance(layer, Residual):
            total += 2 * math.prod(output_shape(layer, shape))
    return total


def tensor_shapes(name: str, framework: str | None = None) -> list[tuple[int, ...]]:
    """Every trainable tensor's shape, in PyTorch's order (one gradient each); a model file's
    as `framework` built it."""
    if user := user_model(name):
        return [tuple(shape) for shape in user.by(framework)["tensor_shapes"]]
    return [shape for _, shapes in parameter_shapes(name) for shape in shapes]


def gradient_bytes(name: str, bytes_per_value: int = 4, framework: str | None = None) -> int:
    """Bytes all-reduced per step: one float32 gradient per parameter."""
    return parameter_count(name, framework) * bytes_per_value


def has_batchnorm(name: str, framework: str | None = None) -> bool:
    """Whether model `name` keeps running statistics (rows then record what replicas do with
    them)."""
    if user := user_model(name):
        return user.by(framework)["batchnorm"]
    return any(isinstance(layer, BatchNorm) for layer, _ in layer_shapes(name))


# The optimizer of every backend (the blog's): Adam with Keras' epsilon, no weight decay.
ADAM = {"learning_rate": 1e-3, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
