"""The benchmark models as framework-free layer specs (common.workload.layers), built identically
in PyTorch, Keras and Flax: each a `SpecModel`, one of the two kinds of model
(common.workload.model).

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
- `phantom-mlp`: a stack of equal dense layers on MNIST, whose answer is known before it runs
  (docs/numbers.md, tests/test_phantoms.py): the matmuls are nearly all its work (a bias and a
  ReLU cost 1/PHANTOM_WIDTH of a layer's product), so its backward costs twice its forward,
  less the first layer's input gradient, which no framework computes.

Both backends build their networks from these specs, so PyTorch and Keras cannot drift apart;
parameter counts and FLOPs are computed here from the spec, never hard-coded.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from xbench.common.errors import UserError
from xbench.common.workload.layers import (
    BLOCK_TENSORS,
    LAYER_NAMES,
    BatchNorm,
    Block,
    Conv,
    Dense,
    Embedding,
    Flatten,
    GlobalAvgPool,
    LayerNorm,
    MaxPool,
    Residual,
    TiedLogits,
    layer_flops,
    layer_parameters,
    leaves,
    output_shape,
    tensor_shapes_of,
)
from xbench.common.workload.model import IMAGES, TOKENS

# The images each dataset holds: channels, height, width.
INPUT_SHAPES = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32)}
NUM_CLASSES = 10
VOCAB = 65  # Tiny Shakespeare's distinct characters (common.workload.shakespeare)
GPT_INIT_STD = 0.02  # GPT-2's initial weights: N(0, 0.02), residual projections scaled down
# phantom-mlp's layers: wide enough that the matmuls are its work, deep enough that the first
# layer's missing input gradient weighs little in its backward
PHANTOM_WIDTH, PHANTOM_HIDDEN = 1024, 4
WEIGHTS_STREAM = 0  # the random stream of the initial weights; common.workload.samples' epoch
                    # orders use 1, 2, ...


@dataclass(frozen=True)
class SpecModel:
    """One of xbench's models: its layers, the same in every framework (so `framework`, where a
    method takes it, changes nothing), every number computed from them."""
    name: str
    dataset: str   # the dataset it takes (INPUT_SHAPES for images; "shakespeare": text)
    layers: tuple

    @property
    def input_kind(self) -> str:
        """IMAGES of its dataset, or TOKENS (a language model's windows)."""
        return TOKENS if isinstance(self.layers[0], Embedding) else IMAGES

    @property
    def predicts_sequence(self) -> bool:
        """Whether it predicts a sequence of tokens (else one class per sample)."""
        return self.input_kind == TOKENS

    def input_shape(self, framework: str | None = None) -> tuple[int, ...]:
        """One sample's input: (C, H, W) of its images, or (context,) of its token windows."""
        first = self.layers[0]
        return (first.context,) if isinstance(first, Embedding) else INPUT_SHAPES[self.dataset]

    def why_not_served(self, framework: str, own_models_only: str = "") -> str | None:
        """Why a backend of `framework` cannot train it: never (every backend builds the
        spec)."""
        return None

    def network(self, from_spec: Callable[[SpecModel], object],
                from_file: Callable[..., object]) -> object:
        """A framework's network of it: `from_spec(self)` (the framework builds the layers)."""
        return from_spec(self)

    def carried(self) -> dict | None:
        """What a job carries of it to its worker: nothing (the spec is in every process)."""
        return None

    def row_record(self) -> dict:
        """What a row's backend details record of it beyond its name: nothing."""
        return {}

    def files(self) -> tuple[str, ...]:
        """The user's files its cells read: none (the spec is xbench's own)."""
        return ()

    def named_layers(self) -> Iterator[tuple[str, object, tuple]]:
        """(name, layer, input shape) of its top-level layers, in order: conv1, bn1, block1,
        pool1, fc1 ... (the units `xbench profile` times)."""
        shape, counts = self.input_shape(), {}
        for layer in self.layers:
            kind = LAYER_NAMES[type(layer)]
            counts[kind] = counts.get(kind, 0) + 1
            yield f"{kind}{counts[kind]}", layer, shape
            shape = output_shape(layer, shape)

    def layer_shapes(self) -> Iterator[tuple[object, tuple]]:
        """(layer, input shape) of every layer (blocks opened), checking the spec."""
        return leaves(self.layers, self.input_shape())

    def parameters(self, framework: str | None = None) -> int:
        """Trainable parameters: weights and biases of convolutions and dense layers,
        BatchNorm's scales and shifts; a transformer's embeddings, linear layers and LayerNorms
        (the tied output layer's table once)."""
        return sum(layer_parameters(layer) for layer in self.layers)

    def flops_per_sample(self, framework: str | None = None) -> int:
        """Forward-pass FLOPs of one sample (an image, or a window of `context` tokens), counted
        as 2 x multiply-accumulates of convs, dense layers and a transformer's matrix products.

        This is the convention of torch.utils.flop_counter and of most papers; bias adds,
        BatchNorm, ReLU, residual adds and pooling are left out. A training step's are
        `training_flops_per_sample`."""
        return sum(layer_flops(layer, shape) for _, layer, shape in self.named_layers())

    def output_values(self) -> int:
        """Values of one sample's output: its class logits, or a window's next-token logits."""
        shape = self.input_shape()
        for layer in self.layers:
            shape = output_shape(layer, shape)
        return math.prod(shape)

    def dominant_math(self) -> str:
        """'convolution' or 'matmul': which kind of layer does most of its FLOPs (a GPU may run
        the two at different precisions: PyTorch allows TF32 in convolutions only)."""
        convolution = sum(layer_flops(layer, shape) for layer, shape in self.layer_shapes()
                          if isinstance(layer, Conv))
        return "convolution" if 2 * convolution >= self.flops_per_sample() else "matmul"

    def training_flops_per_sample(self) -> int:
        """FLOPs of one sample's training step: the forward's, and per layer the backward's two
        products (the weights' gradient and the input's), each as many as the layer's forward,
        except the first trained layer's input gradient, which no framework computes (its input
        is the data, or a flatten of it). The common "3 x forward" counts that one too: 13.6%
        too many for the small model. A language model's first layer is its embedding, a lookup:
        its products all need both gradients, so there it is 3 x forward exactly."""
        first, shape = next((layer, shape) for layer, shape in self.layer_shapes()
                            if layer_parameters(layer))
        return 3 * self.flops_per_sample() - (layer_flops(first, shape)
                                              if isinstance(first, (Conv, Dense)) else 0)

    def initial_weights(self, seed: int) -> list[np.ndarray]:
        """Every trainable tensor, in PyTorch's parameter order and layout (each layer's weight,
        then its bias; conv weights (out, in, kh, kw), dense weights (out, in); BatchNorm's
        scale, then shift), drawn once with numpy from the seed, from PyTorch's default
        distribution U(-1/sqrt(fan_in), 1/sqrt(fan_in)); BatchNorm starts at scale 1, shift 0
        as in PyTorch.

        A language model's are GPT-2's instead: embeddings and linear weights from N(0, 0.02),
        the two projections back into the residual stream (proj, out) from
        N(0, 0.02 / sqrt(2 x blocks)), biases 0, LayerNorms at scale 1, shift 0.

        Every backend of every framework loads these, so all backends of a cell start from the
        same weights and, given the same samples in the same global batches, follow one
        trajectory."""
        rng = np.random.default_rng([seed, WEIGHTS_STREAM])
        residual = GPT_INIT_STD / math.sqrt(2 * max(1, sum(isinstance(layer, Block)
                                                            for layer in self.layers)))
        tensors = []
        for layer, shapes in self.parameter_shapes():
            if isinstance(layer, (BatchNorm, LayerNorm)):
                tensors += [np.ones(shapes[0], np.float32), np.zeros(shapes[1], np.float32)]
            elif isinstance(layer, Embedding):
                tensors += [rng.normal(0, GPT_INIT_STD, shape).astype(np.float32)
                            for shape in shapes]
            elif isinstance(layer, Block):
                tensors += [block_tensor(rng, part, shape, residual)
                            for part, shape in zip(BLOCK_TENSORS, shapes, strict=True)]
            else:
                bound = 1 / math.sqrt(math.prod(shapes[0][1:]))
                tensors += [rng.uniform(-bound, bound, shape).astype(np.float32)
                            for shape in shapes]
        return tensors

    def parameter_shapes(self) -> Iterator[tuple[object, list[tuple[int, ...]]]]:
        """Each layer with trainable tensors and their shapes, in PyTorch's order and layout
        (see `initial_weights`)."""
        for layer, _ in self.layer_shapes():
            if isinstance(layer, BatchNorm):
                yield layer, [(layer.channels,), (layer.channels,)]
            elif isinstance(layer, Conv):
                weight = (layer.out_channels, layer.in_channels, layer.kernel, layer.kernel)
                yield layer, [weight, (layer.out_channels,)] if layer.bias else [weight]
            elif isinstance(layer, Dense):
                yield layer, [(layer.out_features, layer.in_features), (layer.out_features,)]
            elif isinstance(layer, (Embedding, Block, LayerNorm)):
                yield layer, tensor_shapes_of(layer)

    def activations_per_sample(self) -> int:
        """Values one sample's forward pass produces and keeps for the backward pass: the input
        and every layer's output (a ReLU is a tensor of its own; a block adds its sum and its
        ReLU). A transformer block keeps, per token, the inputs of its two LayerNorms and their
        outputs, the queries, keys and values, the attention output and its projection, the
        MLP's hidden layer before and after GELU and its output (18 x width), and each head's
        attention weights over the window."""
        if self.predicts_sequence:
            tokens = self.input_shape()[0]  # and as many token ids
            return tokens + sum(tokens * (18 * layer.width + layer.heads * tokens)
                                if isinstance(layer, Block)
                                else math.prod(output_shape(layer, shape))
                                for layer, shape in self.layer_shapes())
        total = math.prod(self.input_shape())
        for layer, shape in self.layer_shapes():
            if not isinstance(layer, Flatten):  # a view of its input
                size = math.prod(output_shape(layer, shape))
                total += size * (2 if getattr(layer, "relu", False) else 1)
        for _, layer, shape in self.named_layers():
            if isinstance(layer, Residual):
                total += 2 * math.prod(output_shape(layer, shape))
        return total

    def tensor_shapes(self, framework: str | None = None) -> list[tuple[int, ...]]:
        """Every trainable tensor's shape, in PyTorch's order (one gradient each)."""
        return [shape for _, shapes in self.parameter_shapes() for shape in shapes]

    def gradient_bytes(self, framework: str | None = None, bytes_per_value: int = 4) -> int:
        """Bytes all-reduced per step: one gradient of `bytes_per_value` per parameter."""
        return self.parameters(framework) * bytes_per_value

    def has_batchnorm(self, framework: str | None = None) -> bool:
        """Whether it keeps running statistics (rows then record what replicas do with them)."""
        return any(isinstance(layer, BatchNorm) for layer, _ in self.layer_shapes())

    def check_data(self, data: str, layouts: Mapping[str, str]) -> None:
        """A clear error where it cannot take `data`'s samples (`layouts`, each framework's
        image layout, change nothing here: every framework builds the spec for its own)."""
        if data == "model":
            raise UserError(f"--data model is a model file's own data(); '{self.name}' is "
                            f"xbench's: use --data {self.dataset} (or synthetic)")
        if data in ("synthetic", self.dataset):
            return

        def shape(dataset):
            return "x".join(map(str, INPUT_SHAPES[dataset]))
        takes = "text" if self.dataset == "shakespeare" else f"images ({shape(self.dataset)})"
        holds = "text" if data == "shakespeare" else f"{shape(data)} images"
        fitting = ", ".join(name for name, spec in MODELS.items() if spec.dataset == data)
        raise UserError(f"model '{self.name}' takes {self.dataset} {takes}; --data {data} holds "
                        f"{holds}: use --data {self.dataset} (or synthetic), or a model for "
                        f"{data}: {fitting}")


def block_tensor(rng: np.random.Generator, part: str, shape: tuple, residual_std: float
                 ) -> np.ndarray:
    """One of a transformer block's tensors at its start (see `SpecModel.initial_weights`)."""
    if part.startswith("ln"):
        return (np.ones if part.endswith("weight") else np.zeros)(shape, np.float32)
    if part.endswith("bias"):
        return np.zeros(shape, np.float32)
    std = residual_std if part in ("proj.weight", "out.weight") else GPT_INIT_STD
    return rng.normal(0, std, shape).astype(np.float32)


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


def resnet18() -> SpecModel:
    blocks, channels = [], 64
    for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for first in (True, False):
            blocks.append(basic_block(channels, width, stride if first else 1))
            channels = width
    return SpecModel("resnet18", "cifar10", (*conv_bn(3, 64), *blocks, GlobalAvgPool(),
                                             Dense(512, NUM_CLASSES, relu=False)))


def vgg19() -> SpecModel:
    layers, channels = [], 3
    for width in (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
                  512, 512, 512, 512, "M", 512, 512, 512, 512, "M"):
        if width == "M":
            layers.append(MaxPool())
        else:
            layers += [Conv(channels, width, relu=False), BatchNorm(width)]
            channels = width
    return SpecModel("vgg19", "cifar10",
                     (*layers, Flatten(), Dense(512, NUM_CLASSES, relu=False)))


def phantom_mlp(width: int = PHANTOM_WIDTH, hidden: int = PHANTOM_HIDDEN) -> SpecModel:
    """An MNIST image flattened into `width` values, `hidden` layers of width x width, then the
    logits: every layer a dense one, with a bias and (but the logits) a ReLU."""
    return SpecModel("phantom-mlp", "mnist", (
        Flatten(), Dense(math.prod(INPUT_SHAPES["mnist"]), width),
        *[Dense(width, width)] * hidden, Dense(width, NUM_CLASSES, relu=False)))


def gpt(name: str, layers: int, heads: int, width: int, context: int) -> SpecModel:
    """A GPT-style decoder over Tiny Shakespeare's characters."""
    assert width % heads == 0, (width, heads)
    return SpecModel(name, "shakespeare", (Embedding(VOCAB, context, width),
                                           *[Block(width, heads, context)] * layers,
                                           LayerNorm(width), TiedLogits(width, VOCAB)))


MODELS: dict[str, SpecModel] = {model.name: model for model in (
    SpecModel("small", "mnist", (
        Conv(1, 32), MaxPool(), Flatten(),
        Dense(14 * 14 * 32, 64), Dense(64, NUM_CLASSES, relu=False),
    )),
    SpecModel("large", "mnist", (
        Conv(1, 128), MaxPool(), Conv(128, 256), MaxPool(), Conv(256, 512), MaxPool(), Flatten(),
        Dense(3 * 3 * 512, 512), Dense(512, 512), Dense(512, NUM_CLASSES, relu=False),
    )),
    resnet18(),
    vgg19(),
    gpt("gpt-tiny", layers=4, heads=4, width=128, context=64),
    gpt("gpt-small", layers=6, heads=6, width=384, context=256),
    gpt("gpt-medium", layers=12, heads=12, width=768, context=1024),
    phantom_mlp(),
)}


# The optimizer of every backend (the blog's): Adam with Keras' epsilon, no weight decay.
ADAM = {"learning_rate": 1e-3, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}
