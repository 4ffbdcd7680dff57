"""The Keras networks and optimizer, built from common.workload.models' specs (channels last: NHWC,
"same" padding), starting from the same initial weights as the PyTorch networks. Keras' own ops
only (keras.ops), so that the same code runs on TensorFlow (tf_backend) and on JAX (keras-jax).
"""
import math

import keras
import numpy as np
from keras import ops

from xbench.common.workload import layers as spec
from xbench.common.workload.layers import BATCHNORM, EMBEDDING_UNIT, LAYERNORM_EPSILON
from xbench.common.workload.layouts import channels_last as keras_layout
from xbench.common.workload.model import Model
from xbench.common.workload.model_file import ModelFile
from xbench.common.workload.models import ADAM, MODELS, SpecModel


class KerasBatchNormAsTorch(keras.layers.BatchNormalization):
    """BatchNormalization as torch.nn.BatchNorm2d computes it (momentum 0.1 there is 0.9 here,
    epsilon 1e-5 in both): training normalises with the batch's biased variance, as Keras does,
    but the running variance is updated with its unbiased estimate (n / (n - 1), n the values per
    channel), as PyTorch does; Keras would use the biased one."""

    def __init__(self, **settings):
        # its weights read as float32 under a mixed policy too: it computes in float32, as
        # Keras' own BatchNormalization and torch.autocast's batch_norm do
        super().__init__(momentum=1 - BATCHNORM["torch_momentum"],
                         epsilon=BATCHNORM["epsilon"], autocast=False, **settings)

    def call(self, inputs, training=None):
        compute = keras.backend.standardize_dtype(inputs.dtype)
        if compute != "float32":  # bf16 or fp16 activations: normalised in float32
            return ops.cast(self.call(ops.cast(inputs, "float32"), training), compute)
        if not training:
            return super().call(inputs, training=False)
        mean, variance = self._moments(inputs, None)
        values = ops.cast(ops.size(inputs) // ops.shape(inputs)[-1], variance.dtype)
        self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1 - self.momentum))
        self.moving_variance.assign(self.moving_variance * self.momentum
                                    + variance * values / (values - 1) * (1 - self.momentum))
        return ops.batch_normalization(inputs, mean, variance, axis=self.axis, offset=self.beta,
                                       scale=self.gamma, epsilon=self.epsilon)


class KerasTokenEmbedding(keras.layers.Layer):
    """spec.Embedding: a token's learned embedding plus its position's. `token_table` is also the
    output layer's weight (KerasTiedLogits)."""

    def __init__(self, layer: spec.Embedding, **settings):
        super().__init__(**settings)
        self.vocab, self.context, self.width = layer.vocab, layer.context, layer.width

    def build(self, input_shape):
        # PyTorch's order (token, then position); the values are loaded after building
        self.token_table = self.add_weight(shape=(self.vocab, self.width),
                                           initializer="zeros", name="token")
        self.position_table = self.add_weight(shape=(self.context, self.width),
                                              initializer="zeros", name="position")

    def call(self, tokens):
        # under a mixed policy Keras reads both tables in the compute dtype (autocast)
        positions = self.position_table[:ops.shape(tokens)[1]]
        return ops.take(self.token_table, tokens, axis=0) + positions


class KerasTransformerBlock(keras.layers.Layer):
    """spec.Block as pt_backend.models.TorchTransformerBlock computes it: x + proj(causal
    self-attention(ln1(x))), then x + out(gelu(fc(ln2(x)))), exact-erf GELU. Its sublayers are
    assigned in PyTorch's parameter order, which is the order of its weights."""

    def __init__(self, layer: spec.Block, **settings):
        super().__init__(**settings)
        self.width, self.heads = layer.width, layer.heads
        self.tokens = None  # the window it is built for: its attention's FLOPs depend on it
        norm = {"epsilon": LAYERNORM_EPSILON, "dtype": RESIDUAL_DTYPE}
        linear = {"kernel_initializer": "zeros"}  # the global policy: mixed, or float32
        self.ln1 = keras.layers.LayerNormalization(name="ln1", **norm)
        self.qkv = keras.layers.Dense(3 * layer.width, name="qkv", **linear)
        self.proj = keras.layers.Dense(layer.width, name="proj", **linear)
        self.ln2 = keras.layers.LayerNormalization(name="ln2", **norm)
        self.fc = keras.layers.Dense(4 * layer.width, name="fc", **linear)
        self.out = keras.layers.Dense(layer.width, name="out", **linear)

    def build(self, input_shape):
        self.tokens = input_shape[1]
        for sublayer in (self.ln1, self.qkv, self.proj, self.ln2, self.fc):
            sublayer.build(input_shape)
        self.out.build((*input_shape[:-1], 4 * self.width))

    def call(self, x):
        tokens, head_width = ops.shape(x)[1], self.width // self.heads
        query, key, value = (ops.reshape(part, (-1, tokens, self.heads, head_width))
                             for part in ops.split(self.qkv(self.ln1(x)), 3, axis=-1))
        attended = ops.dot_product_attention(query, key, value, is_causal=True)
        # the sublayers' outputs (in the lower type under a mixed policy) added in float32
        x = x + ops.cast(self.proj(ops.reshape(attended, (-1, tokens, self.width))), x.dtype)
        return x + ops.cast(self.out(ops.gelu(self.fc(self.ln2(x)), approximate=False)), x.dtype)

    def forward_flops(self) -> int:
        """One window's: 2 x multiply-accumulates of the four linear layers per token, and of
        attention's two products over every pair of positions (spec.layer_flops' count)."""
        linear = sum(math.prod(dense.kernel.shape) for dense in (self.qkv, self.proj, self.fc,
                                                                 self.out))
        return 2 * self.tokens * linear + 2 * 2 * self.tokens ** 2 * self.width


class KerasTiedLogits(keras.layers.Layer):
    """spec.TiedLogits: the next token's logits through the token embedding's table, read where
    it lives at each call. The embedding is referenced past Keras' attribute tracking, so the
    table is one variable of the model (counted, all-reduced and stepped once) whose gradient
    sums both of its uses."""

    def __init__(self, embedding: KerasTokenEmbedding, **settings):
        super().__init__(**settings)
        object.__setattr__(self, "embedding", embedding)
        self.tokens = None

    def build(self, input_shape):
        self.tokens = input_shape[1]

    def call(self, x):
        # the table is autocast to this layer's compute dtype, as a weight of its own would be
        return ops.matmul(x, ops.transpose(self.embedding.token_table))

    def forward_flops(self) -> int:
        """One window's: 2 x (tokens x width x vocab)."""
        return 2 * self.tokens * math.prod(self.embedding.token_table.shape)


# The residual stream, the embeddings and the LayerNorms stay float32 under a mixed policy, as
# torch.autocast keeps them (an embedding lookup, an add and layer_norm are not autocast to the
# lower type there); the linear layers, attention and the output layer compute in it.
RESIDUAL_DTYPE = "float32"


def language_unit(name: str, layer, built: dict[str, keras.layers.Layer]
                  ) -> keras.layers.Layer:
    """One top-level layer of a language model as a Keras layer named as in the spec (embed1,
    block1 ... ln1, head1): the unit `xbench profile` times. `built`: the units made before it
    by name (the output layer reads the embedding's table)."""
    if isinstance(layer, spec.Embedding):
        return KerasTokenEmbedding(layer, name=name, dtype=RESIDUAL_DTYPE)
    if isinstance(layer, spec.Block):
        return KerasTransformerBlock(layer, name=name, dtype=RESIDUAL_DTYPE)
    if isinstance(layer, spec.LayerNorm):
        return keras.layers.LayerNormalization(epsilon=LAYERNORM_EPSILON, name=name,
                                               dtype=RESIDUAL_DTYPE)
    return KerasTiedLogits(built[EMBEDDING_UNIT], name=name)


def keras_layers(layer, leaves):
    """One spec layer as Keras layers (NHWC), appending those that hold its weights to `leaves`
    in the spec's order. PyTorch pads a strided convolution by k // 2 on every side; Keras'
    "same" pads a stride-2 one on the bottom and right only, so that is padded explicitly."""
    if isinstance(layer, spec.Conv):
        conv = keras.layers.Conv2D(
            layer.out_channels, layer.kernel, layer.stride, use_bias=layer.bias,
            padding="same" if layer.stride == 1 else "valid",
            activation="relu" if layer.relu else None, kernel_initializer="zeros")
        leaves.append(conv)
        if layer.stride > 1 and layer.kernel > 1:
            return [keras.layers.ZeroPadding2D(layer.kernel // 2), conv]
        return [conv]
    if isinstance(layer, spec.BatchNorm):
        norm = KerasBatchNormAsTorch()
        leaves.append(norm)
        return [norm, keras.layers.ReLU()] if layer.relu else [norm]
    if isinstance(layer, spec.MaxPool):
        return [keras.layers.MaxPooling2D(layer.size)]
    if isinstance(layer, spec.GlobalAvgPool):
        return [keras.layers.GlobalAveragePooling2D()]
    if isinstance(layer, spec.Flatten):
        return [keras.layers.Flatten()]
    dense = keras.layers.Dense(layer.out_features, activation="relu" if layer.relu else None,
                               kernel_initializer="zeros")
    leaves.append(dense)
    return [dense]


def keras_unit(name, layer, shape, leaves):
    """One top-level spec layer as a functional Keras model named as in the spec (conv1, bn1,
    block1 ...): the unit `xbench profile` times."""
    inputs = keras.Input((*shape[1:], shape[0]) if len(shape) == 3 else shape)  # NHWC

    def through(layers, tensor):
        for inner in layers:
            for keras_layer in keras_layers(inner, leaves):
                tensor = keras_layer(tensor)
        return tensor

    if isinstance(layer, spec.Residual):
        body = through(layer.body, inputs)
        outputs = keras.layers.ReLU()(keras.layers.Add()([body, through(layer.shortcut, inputs)]))
    else:
        outputs = through([layer], inputs)
    return keras.Model(inputs, outputs, name=name)


def build_model(model: Model, seed=0):
    """The model's network: a spec's, one unit per top-level layer, with the initial weights
    every backend starts from (common.workload.models), converted from PyTorch's layout to
    Keras'; a model file's keras() model, its weights drawn after seeding Keras with `seed`."""
    return model.network(lambda spec_model: spec_network(spec_model, seed),
                         lambda model_file: file_network(model_file, seed))


def file_network(model: ModelFile, seed: int):
    keras.utils.set_random_seed(seed)
    return model.build("keras")


def spec_network(spec_model: SpecModel, seed: int):
    name = spec_model.name
    if spec_model.predicts_sequence:
        built = {}
        for unit, layer, _ in spec_model.named_layers():
            built[unit] = language_unit(unit, layer, built)
        units = list(built.values())
        inputs = keras.Input(spec_model.input_shape(), dtype="int32")
        leaves = [unit for unit in units if not isinstance(unit, KerasTiedLogits)]
    else:
        leaves = []
        units = [keras_unit(unit, layer, shape, leaves)
                 for unit, layer, shape in spec_model.named_layers()]
        channels, height, width = spec_model.input_shape()
        inputs = keras.Input((height, width, channels))
    model = keras.Sequential([inputs, *units], name=name)
    model.spec_leaves = leaves
    for keras_layer, values in zip(leaves, keras_layout(name, spec_model.initial_weights(seed)),
                                   strict=True):
        if isinstance(keras_layer, KerasBatchNormAsTorch):  # running mean 0 and variance 1
            values = [*values, np.zeros_like(values[0]), np.ones_like(values[0])]
        keras_layer.set_weights(values)
    return model


def trainable_leaf_weights(model):
    """Every trainable tensor, layer by layer in the spec's order (keras_layout's order)."""
    return [[w.numpy() for w in leaf.trainable_weights] for leaf in model.spec_leaves]


def batchnorm_statistics(model):
    """Every BatchNorm's moving mean and variance variables, in order (a model file's: its
    BatchNormalization layers')."""
    layers = getattr(model, "spec_leaves", None)
    if layers is None:
        layers = model._flatten_layers(include_self=False, recursive=True)
    return [v for leaf in layers if isinstance(leaf, keras.layers.BatchNormalization)
            for v in (leaf.moving_mean, leaf.moving_variance)]


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
    """The optimizer of every backend (common.grids.grid's settings), stepping as PyTorch's does."""
    if name == "sgd":
        return TorchSGD(learning_rate=lr, momentum=momentum, l2=weight_decay)
    return TorchAdam(**{**ADAM, "learning_rate": lr}, l2=weight_decay)


def parameter_count(model):
    return sum(math.prod(v.shape) for v in model.trainable_variables)


def forward_flops(layer: keras.layers.Layer) -> int:
    """One sample's forward FLOPs through a model or layer: 2 x multiply-accumulates of the conv
    and dense layers and of a transformer's matrix products, from the built layers' kernels and
    shapes (the convention of SpecModel.flops_per_sample); a layer without a count
    of its own sums its sublayers' (a transformer block has one: its linear layers run once per
    token)."""
    if isinstance(layer, keras.layers.Conv2D):
        _, height, width, _ = layer.output.shape
        return 2 * math.prod(layer.kernel.shape) * height * width
    if isinstance(layer, keras.layers.Dense):
        return 2 * math.prod(layer.kernel.shape)
    if isinstance(layer, (KerasTransformerBlock, KerasTiedLogits)):
        return layer.forward_flops()
    return sum(forward_flops(inner)
               for inner in layer._flatten_layers(include_self=False, recursive=False))


def describe(name: str) -> dict:
    """Of xbench's model `name`: parameters and forward FLOPs counted on the built Keras
    model."""
    model = build_model(MODELS[name])
    versions = f"Keras {_major_minor(keras.__version__)} on {keras.config.backend()}"
    return {"framework": versions,
            "params": parameter_count(model), "flops_per_sample": forward_flops(model)}


def _major_minor(version):
    return ".".join(version.split(".")[:2])
