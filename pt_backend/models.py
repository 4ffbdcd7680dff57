"""The PyTorch networks, built from common.workload.models' specs."""
import random
from collections import OrderedDict

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from xbench.common.workload import layers as spec
from xbench.common.workload.layers import BATCHNORM, EMBEDDING_UNIT, LAYERNORM_EPSILON
from xbench.common.workload.model import TOKENS, Model
from xbench.common.workload.model_file import ModelFile
from xbench.common.workload.models import ADAM, MODELS, SpecModel


class TorchResidualBlock(nn.Module):
    """relu(body(x) + shortcut(x)); an empty shortcut is the identity."""

    def __init__(self, body: nn.Sequential, shortcut: nn.Sequential):
        super().__init__()
        self.body, self.shortcut = body, shortcut

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


class TorchTokenEmbedding(nn.Module):
    """A token's embedding plus its position's (spec.Embedding); `token` is also the output
    layer's weight."""

    def __init__(self, layer: spec.Embedding):
        super().__init__()
        self.token = nn.Embedding(layer.vocab, layer.width)
        self.position = nn.Embedding(layer.context, layer.width)

    def forward(self, tokens):
        return self.token(tokens) + self.position(torch.arange(tokens.shape[1],
                                                               device=tokens.device))


class TorchTransformerBlock(nn.Module):
    """spec.Block: pre-LayerNorm causal self-attention and a 4x GELU MLP, each added to the
    residual stream. Attention is torch's scaled_dot_product_attention (its fused kernels on a
    GPU; FlopCounterMode counts its two products under the math kernel)."""

    def __init__(self, layer: spec.Block):
        super().__init__()
        width, self.heads = layer.width, layer.heads
        self.ln1 = nn.LayerNorm(width, eps=LAYERNORM_EPSILON)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width, eps=LAYERNORM_EPSILON)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        batch, tokens, width = x.shape
        q, k, v = (part.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)
                   for part in self.qkv(self.ln1(x)).split(width, dim=2))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.out(functional.gelu(self.fc(self.ln2(x))))


class TorchTiedLogits(nn.Module):
    """The next token's logits through the token embedding's table (spec.TiedLogits). It holds
    no parameter: the embedding is referenced, not registered, so the weight is one parameter
    (counted, all-reduced and stepped once) and is read where it lives at each call (a
    DataParallel replica passes its own: `TiedSequential`)."""

    def __init__(self, embedding: TorchTokenEmbedding):
        super().__init__()
        object.__setattr__(self, "embedding", embedding)

    def forward(self, x, table=None):
        return functional.linear(x, self.embedding.token.weight if table is None else table)


class TiedSequential(nn.Sequential):
    """A language model's units in order, the output layer given the embedding table of this
    module (a DataParallel replica's own; under FSDP the gathered one)."""

    def forward(self, x):
        for unit in self:
            x = (unit(x, self.get_submodule(EMBEDDING_UNIT).token.weight)
                 if isinstance(unit, TorchTiedLogits) else unit(x))
        return x


def torch_layer(layer, units=None) -> nn.Module:
    """One spec layer as a module (a ReLU after it where the spec says so); `units`: the modules
    built before it (the tied output layer's embedding)."""
    if isinstance(layer, spec.Embedding):
        return TorchTokenEmbedding(layer)
    if isinstance(layer, spec.Block):
        return TorchTransformerBlock(layer)
    if isinstance(layer, spec.LayerNorm):
        return nn.LayerNorm(layer.width, eps=LAYERNORM_EPSILON)
    if isinstance(layer, spec.TiedLogits):
        return TorchTiedLogits(units[EMBEDDING_UNIT])
    if isinstance(layer, spec.Residual):
        return TorchResidualBlock(nn.Sequential(*map(torch_layer, layer.body)),
                                  nn.Sequential(*map(torch_layer, layer.shortcut)))
    if isinstance(layer, spec.Conv):
        module = nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel, layer.stride,
                           padding=layer.kernel // 2, bias=layer.bias)
    elif isinstance(layer, spec.BatchNorm):
        module = nn.BatchNorm2d(layer.channels, eps=BATCHNORM["epsilon"],
                                momentum=BATCHNORM["torch_momentum"])
    elif isinstance(layer, spec.MaxPool):
        return nn.MaxPool2d(layer.size)
    elif isinstance(layer, spec.GlobalAvgPool):
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
    elif isinstance(layer, spec.Flatten):
        return nn.Flatten()
    else:  # Dense
        module = nn.Linear(layer.in_features, layer.out_features)
    return nn.Sequential(module, nn.ReLU()) if layer.relu else module


def build_model(model: Model, seed=0) -> nn.Module:
    """The model's network: a spec's, one named module per top-level layer (conv1, bn1, block1
    ...), with the initial weights every backend starts from (common.workload.models); a model
    file's pytorch() model, its weights drawn after seeding torch with `seed` (every rank the
    same)."""
    return model.network(lambda spec_model: spec_network(spec_model, seed),
                         lambda model_file: file_network(model_file, seed))


def spec_network(model: SpecModel, seed: int) -> nn.Module:
    units = OrderedDict()
    for unit, layer, _ in model.named_layers():
        units[unit] = torch_layer(layer, units)
    network = (TiedSequential if model.predicts_sequence else nn.Sequential)(units)
    with torch.no_grad():
        for parameter, value in zip(network.parameters(), model.initial_weights(seed),
                                    strict=True):
            assert parameter.shape == value.shape, (model.name, parameter.shape, value.shape)
            parameter.copy_(torch.from_numpy(value))
    return network


def file_network(model: ModelFile, seed: int) -> nn.Module:
    seed_generators(seed)  # every rank draws the same weights (pt-fsdp broadcasts none)
    return model.build("pytorch")


def seed_generators(seed: int) -> None:
    """What each process seeds before a model file's pytorch() (its describer too, at 0): torch,
    numpy's global generator and Python's `random`, as docs/your-model.md says."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def batchnorm_statistics(model: nn.Module) -> list[torch.Tensor]:
    """Every BatchNorm's running mean and variance, in order."""
    return [tensor for module in model.modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats
            for tensor in (module.running_mean, module.running_var)]


def build_optimizer(parameters, name="adam", lr=ADAM["learning_rate"], momentum=0.0,
                    weight_decay=0.0):
    """The optimizer of every backend (common.grids.grid's settings; weight decay is L2, added to
    the gradient)."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.Adam(parameters, lr=lr, betas=(ADAM["beta_1"], ADAM["beta_2"]),
                            eps=ADAM["epsilon"], weight_decay=weight_decay)


def example_input(model: Model, batch: int = 1) -> torch.Tensor:
    """Zeros shaped as `batch` samples of the model's input (images, or token ids)."""
    return torch.zeros(batch, *model.input_shape("torch"),
                       dtype=torch.int64 if model.input_kind == TOKENS else torch.float32)


def describe(name: str) -> dict:
    """Of xbench's model `name`: parameters counted on the built module and forward FLOPs
    counted by torch's FlopCounterMode (attention through its math kernel, whose products it
    counts)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(MODELS[name]).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(example_input(MODELS[name]))
    return {"framework": "PyTorch " + torch.__version__,
            "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "flops_per_sample": counter.get_total_flops()}
