"""The Flax (linen) networks and the optax optimizers, built from common.workload.models' specs
(channels last: NHWC images, HWIO conv kernels, (in, out) dense kernels), starting from the same
initial weights as the PyTorch and Keras networks and stepping as PyTorch's optimizers do, so
that every framework of a cell follows one trajectory.

A model's variables are named after the spec's units (params["conv1"], a ResNet's
params["block3"]["body"]["bn2"], a GPT's params["block1"]["qkv"] ...); `leaf_arrays` and
`batchnorm_arrays` read them back in the spec's order.
"""
from collections import Counter
from collections.abc import Iterator
from functools import cache, partial

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from xbench.common.workload import layers as spec
from xbench.common.workload.layers import (
    BATCHNORM,
    BLOCK_TENSORS,
    EMBEDDING_UNIT,
    LAYER_NAMES,
    LAYERNORM_EPSILON,
)
from xbench.common.workload.layouts import channels_last
from xbench.common.workload.model import TOKENS
from xbench.common.workload.models import ADAM, MODELS

# The residual stream, the embeddings, LayerNorm and BatchNorm stay float32 in a mixed-precision
# cell, as torch.autocast and the Keras models keep them; the convolutions, dense layers,
# attention and the output layer compute in the cell's lower type.
KEPT_FLOAT32 = jnp.float32


def unit_names(layers: tuple) -> Iterator[tuple[str, object]]:
    """(unit name, layer) of a sequence of spec layers, named as common.workload.models'
    named_layers names a model's (conv1, bn1, conv2 ...): the names of the variables."""
    counts = Counter()
    for layer in layers:
        kind = LAYER_NAMES[type(layer)]
        counts[kind] += 1
        yield f"{kind}{counts[kind]}", layer


class FlaxBatchNormAsTorch(nn.Module):
    """BatchNorm as torch.nn.BatchNorm2d computes it, over the last (channel) axis: training
    normalises with the batch's biased variance and updates the running statistics with
    momentum 0.1 and the batch's unbiased variance (n / (n - 1), n the values per channel);
    evaluation normalises with the running statistics; epsilon 1e-5. flax's nn.BatchNorm would
    update the running variance with the biased one, so its statistics would drift from
    PyTorch's and Keras' (keras_models.models.KerasBatchNormAsTorch). It computes in float32 at
    least (bfloat16 and float16 inputs in float32, as torch.autocast and Keras'
    BatchNormalization do)."""
    momentum: float = BATCHNORM["torch_momentum"]
    epsilon: float = BATCHNORM["epsilon"]

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        channels = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (channels,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (channels,), jnp.float32)
        running_mean = self.variable("batch_stats", "mean", jnp.zeros, (channels,), jnp.float32)
        running_var = self.variable("batch_stats", "var", jnp.ones, (channels,), jnp.float32)
        values = x.astype(jnp.promote_types(x.dtype, KEPT_FLOAT32))
        if train:
            axes = tuple(range(values.ndim - 1))
            mean, variance = values.mean(axes), values.var(axes)
            if not self.is_initializing():  # an init's example batch is no training data
                count = values.size // channels
                running_mean.value += self.momentum * (mean - running_mean.value)
                running_var.value += self.momentum * (variance * count / (count - 1)
                                                      - running_var.value)
        else:
            mean, variance = running_mean.value, running_var.value
        normalised = (values - mean) * jax.lax.rsqrt(variance + self.epsilon)
        return (normalised * scale + bias).astype(x.dtype)


class FlaxTokenEmbedding(nn.Module):
    """spec.Embedding: a token's learned embedding plus its position's, in float32. Its token
    table is also the output layer's weight (`attend`): one parameter, whose gradient sums both
    uses."""
    layer: spec.Embedding

    def setup(self):
        settings = {"features": self.layer.width, "dtype": KEPT_FLOAT32,
                    "param_dtype": jnp.float32}
        self.token = nn.Embed(self.layer.vocab, **settings)
        self.position = nn.Embed(self.layer.context, **settings)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.token(tokens) + self.position(jnp.arange(tokens.shape[1]))

    def attend(self, x: jax.Array, dtype: jnp.dtype) -> jax.Array:
        """spec.TiedLogits: (B, T, width) -> (B, T, vocab) through the token table transposed,
        computed in `dtype` (nn.Embed.attend would compute in the table's float32)."""
        return jnp.dot(x.astype(dtype), self.token.embedding.astype(dtype).T)


class FlaxTransformerBlock(nn.Module):
    """spec.Block as pt_backend.models.TorchTransformerBlock computes it: x + proj(causal
    self-attention(ln1(x))), then x + out(gelu(fc(ln2(x)))), exact-erf GELU, PyTorch's
    LayerNorm (epsilon 1e-5, the variance in two passes). The residual stream stays float32;
    the linear layers and attention compute in `dtype`."""
    layer: spec.Block
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, tokens, width = x.shape
        heads = self.layer.heads
        dense = partial(nn.Dense, dtype=self.dtype, param_dtype=jnp.float32)
        norm = partial(nn.LayerNorm, epsilon=LAYERNORM_EPSILON, dtype=KEPT_FLOAT32,
                       use_fast_variance=False)
        query, key, value = (part.reshape(batch, tokens, heads, width // heads)
                             for part in jnp.split(dense(3 * width, name="qkv")(
                                 norm(name="ln1")(x)), 3, axis=-1))
        attended = jax.nn.dot_product_attention(query, key, value, is_causal=True)
        x = x + dense(width, name="proj")(attended.reshape(batch, tokens, width)).astype(x.dtype)
        hidden = jax.nn.gelu(dense(4 * width, name="fc")(norm(name="ln2")(x)), approximate=False)
        return x + dense(width, name="out")(hidden).astype(x.dtype)


class SpecLayers(nn.Module):
    """A sequence of spec layers (a whole model, or a residual block's body or shortcut), each
    holding its variables under its unit's name (`unit_names`). Called as
    `module.apply(variables, x, train=..., mutable=[...])` on NHWC float32 images or int32 token
    ids; `train` picks BatchNorm's batch statistics (and updates the running ones: mutable
    "batch_stats") or its running statistics."""
    layers: tuple
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        embeddings = {}
        for unit, layer in unit_names(self.layers):
            if isinstance(layer, spec.Conv):
                # PyTorch pads by k // 2 on every side, strided too; "SAME" would pad a stride-2
                # convolution on the bottom and right only
                pad = layer.kernel // 2
                x = nn.Conv(layer.out_channels, (layer.kernel, layer.kernel),
                            (layer.stride, layer.stride), padding=((pad, pad), (pad, pad)),
                            use_bias=layer.bias, dtype=self.dtype, param_dtype=jnp.float32,
                            name=unit)(x)
            elif isinstance(layer, spec.BatchNorm):
                x = FlaxBatchNormAsTorch(name=unit)(x, train)
            elif isinstance(layer, spec.MaxPool):
                x = nn.max_pool(x, (layer.size, layer.size), (layer.size, layer.size))
            elif isinstance(layer, spec.GlobalAvgPool):
                x = x.mean(axis=(1, 2))
            elif isinstance(layer, spec.Flatten):
                x = x.reshape(x.shape[0], -1)  # (H, W, C) order: channels_last orders the rows
            elif isinstance(layer, spec.Dense):
                x = nn.Dense(layer.out_features, dtype=self.dtype, param_dtype=jnp.float32,
                             name=unit)(x)
            elif isinstance(layer, spec.Residual):
                x = FlaxResidualBlock(layer, self.dtype, name=unit)(x, train=train)
            elif isinstance(layer, spec.Embedding):
                embeddings[unit] = FlaxTokenEmbedding(layer, name=unit)
                x = embeddings[unit](x)
            elif isinstance(layer, spec.Block):
                x = FlaxTransformerBlock(layer, self.dtype, name=unit)(x)
            elif isinstance(layer, spec.LayerNorm):
                x = nn.LayerNorm(epsilon=LAYERNORM_EPSILON, dtype=KEPT_FLOAT32,
                                 use_fast_variance=False, name=unit)(x)
            else:  # TiedLogits
                x = embeddings[EMBEDDING_UNIT].attend(x, self.dtype)
            if getattr(layer, "relu", False):
                x = nn.relu(x)
        return x


class FlaxResidualBlock(nn.Module):
    """spec.Residual: relu(body(x) + shortcut(x)), the empty shortcut the identity; their
    layers' variables under "body" and "shortcut"."""
    layer: spec.Residual
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        body = SpecLayers(self.layer.body, self.dtype, name="body")(x, train=train)
        return nn.relu(body + SpecLayers(self.layer.shortcut, self.dtype,
                                         name="shortcut")(x, train=train))


def weight_units(layers: tuple, prefix: tuple = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """(the path of its variables, layer) of every layer that holds weights, in the spec's order
    (initial_weights' and channels_last's: a residual block's body, then its shortcut)."""
    for unit, layer in unit_names(layers):
        if isinstance(layer, spec.Residual):
            yield from weight_units(layer.body, (*prefix, unit, "body"))
            yield from weight_units(layer.shortcut, (*prefix, unit, "shortcut"))
        elif isinstance(layer, (spec.Conv, spec.BatchNorm, spec.Dense, spec.Embedding,
                                spec.Block, spec.LayerNorm)):
            yield (*prefix, unit), layer


def tensor_names(layer) -> list[tuple[str, ...]]:
    """A layer's trainable tensors in PyTorch's order, as Flax names them below its unit."""
    if isinstance(layer, spec.Conv):
        return [("kernel",), ("bias",)] if layer.bias else [("kernel",)]
    if isinstance(layer, spec.Dense):
        return [("kernel",), ("bias",)]
    if isinstance(layer, (spec.BatchNorm, spec.LayerNorm)):
        return [("scale",), ("bias",)]
    if isinstance(layer, spec.Embedding):
        return [("token", "embedding"), ("position", "embedding")]
    # a block's: PyTorch's "ln1.weight" is ln1's scale, "qkv.weight" qkv's kernel
    return [(sublayer, "bias" if kind == "bias" else "scale" if sublayer.startswith("ln")
             else "kernel") for sublayer, kind in (tensor.split(".") for tensor in BLOCK_TENSORS)]


@cache
def tensor_paths(name: str) -> tuple[tuple[str, ...], ...]:
    """The path in params of every trainable tensor of model `name`, in the spec's order."""
    return tuple((*unit, *tensor) for unit, layer in weight_units(MODELS[name].layers)
                 for tensor in tensor_names(layer))


@cache
def batchnorm_units(name: str) -> tuple[tuple[str, ...], ...]:
    """The path in batch_stats of every BatchNorm of model `name`, in the spec's order."""
    return tuple(unit for unit, layer in weight_units(MODELS[name].layers)
                 if isinstance(layer, spec.BatchNorm))


def model_of(params: dict) -> str:
    """The model of MODELS that `params` are: variables carry no name, but their paths (the units
    conv1, bn1, block1 ... and the tensors below them) tell the models apart."""
    paths = set(traverse_util.flatten_dict(params))
    matches = [name for name in MODELS if set(tensor_paths(name)) == paths]
    if len(matches) != 1:
        raise ValueError(f"the parameters are those of {len(matches)} models, not one: {matches}")
    return matches[0]


def example_input(name: str, batch: int = 1) -> jax.Array:
    """Zeros shaped as `batch` samples of the model's input: NHWC float32 images, or int32
    token ids."""
    model = MODELS[name]
    if model.input_kind == TOKENS:
        return jnp.zeros((batch, *model.input_shape()), jnp.int32)
    channels, height, width = model.input_shape()
    return jnp.zeros((batch, height, width, channels), jnp.float32)


def build_model(name: str, seed: int = 0, compute_dtype: str | None = None
                ) -> tuple[nn.Module, dict]:
    """The model `name` and its variables {"params": ..., "batch_stats": ...} ("batch_stats"
    where it has BatchNorm: running mean 0, variance 1), its parameters the initial weights every
    backend starts from (SpecModel.initial_weights) in the channels-last layout, so
    that it follows PyTorch's and Keras' trajectory. `compute_dtype` ("bfloat16", "float16"; None:
    float32) is a mixed-precision cell's lower type: the parameters stay float32, the
    convolutions, dense layers, attention and output layer compute in it (KEPT_FLOAT32)."""
    module = SpecLayers(MODELS[name].layers, jnp.dtype(compute_dtype or "float32"))
    params = {}
    for (unit, layer), values in zip(weight_units(MODELS[name].layers),
                                     channels_last(name, MODELS[name].initial_weights(seed)),
                                     strict=True):
        for tensor, value in zip(tensor_names(layer), values, strict=True):
            params[(*unit, *tensor)] = jnp.asarray(value)
    variables = {"params": traverse_util.unflatten_dict(params)}
    if units := batchnorm_units(name):
        variables["batch_stats"] = traverse_util.unflatten_dict(
            {(*unit, kind): make(params[(*unit, "scale")].shape, jnp.float32)
             for unit in units for kind, make in (("mean", jnp.zeros), ("var", jnp.ones))})
    # the module names its variables as these paths do, and shapes them alike
    expected = jax.eval_shape(partial(module.init, train=False), jax.random.key(0),
                              example_input(name))
    assert shapes_of(expected) == shapes_of(variables), name
    return module, variables


def shapes_of(tree) -> dict:
    """(shape, dtype) of every array of a tree of variables."""
    return jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), tree)


def parameter_count(params: dict) -> int:
    """Trainable values in `params` (the tied token table once: it is one parameter)."""
    return sum(int(np.size(leaf)) for leaf in jax.tree.leaves(params))


def leaf_arrays(variables: dict) -> list[np.ndarray]:
    """Every trainable tensor of `variables` as numpy, in the spec's order (PyTorch's parameter
    order, Keras' trainable_leaf_weights'): what a replica's weights digest is taken of."""
    params = traverse_util.flatten_dict(variables["params"])
    return [np.asarray(params[path]) for path in tensor_paths(model_of(variables["params"]))]


def batchnorm_arrays(variables: dict) -> list[np.ndarray]:
    """Every BatchNorm's running mean and variance as numpy, in the spec's order (none without
    BatchNorm)."""
    statistics = traverse_util.flatten_dict(variables.get("batch_stats", {}))
    return [np.asarray(statistics[(*unit, kind)])
            for unit in batchnorm_units(model_of(variables["params"]))
            for kind in ("mean", "var")]


def torch_stepping(learning_rate, name: str, momentum: float, weight_decay: float
                   ) -> optax.GradientTransformation:
    """torch.optim.Adam or torch.optim.SGD as optax chains. Weight decay is L2 added to the
    gradient before the update (add_decayed_weights first), as PyTorch's weight_decay is; Adam
    adds epsilon to the bias-corrected sqrt(v) (optax's eps, eps_root 0), as PyTorch does; SGD's
    momentum buffer is b = momentum * b + g (b = g at the first step) and p -= lr * b (optax's
    trace, then the learning rate), as PyTorch's, also while the rate changes."""
    decay = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    if name == "sgd":
        return optax.chain(*decay, optax.sgd(learning_rate, momentum=momentum or None))
    return optax.chain(*decay, optax.adam(learning_rate, b1=ADAM["beta_1"], b2=ADAM["beta_2"],
                                          eps=ADAM["epsilon"], eps_root=0.0))


def build_optimizer(name: str = "adam", lr: float = ADAM["learning_rate"], momentum: float = 0.0,
                    weight_decay: float = 0.0) -> optax.GradientTransformation:
    """The optimizer of every backend (common.grids.grid's settings), stepping as PyTorch's does
    (`torch_stepping`). Its learning rate is a float32 array in its state, not a constant of the
    compiled step, so a schedule changes it between steps (`set_learning_rate`)."""
    return optax.inject_hyperparams(torch_stepping, static_args=("name", "momentum",
                                                                 "weight_decay"),
                                    hyperparam_dtype=jnp.float32)(
        learning_rate=lr, name=name, momentum=momentum, weight_decay=weight_decay)


def set_learning_rate(opt_state: optax.OptState, value) -> optax.OptState:
    """`opt_state` (of `build_optimizer`) with learning rate `value` for the next steps: it lives
    in opt_state.hyperparams["learning_rate"], a float32 array (a jax.Array keeps its
    placement)."""
    return opt_state._replace(hyperparams={**opt_state.hyperparams,
                                           "learning_rate": jnp.asarray(value, jnp.float32)})


def describe(name: str) -> dict:
    """Parameters counted on the built variables, and the forward FLOPs of one sample as XLA's
    cost analysis counts them (float32, evaluation mode, batch 1, compiled for the CPU so that
    it is one number on every machine). XLA counts what SpecModel.flops_per_sample
    does not: the elementwise ops (bias adds, BatchNorm, activations, softmax, pooling) add to
    it; and it counts a convolution's multiply-accumulates on the input only, not on its
    zero padding, which takes from it where feature maps are small (VGG-19's last 2 x 2 maps:
    4 of a 3 x 3 kernel's 9 taps per output on average)."""
    with jax.default_device(jax.devices("cpu")[0]):
        module, variables = build_model(name)
        forward = jax.jit(partial(module.apply, train=False))
        analysis = forward.lower(variables, example_input(name)).compile().cost_analysis()
    return {"framework": f"JAX {_major_minor(jax.__version__)} / "
                         f"Flax {_major_minor(flax.__version__)}",
            "params": parameter_count(variables["params"]),
            "flops_per_sample": int(analysis["flops"])}


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])
