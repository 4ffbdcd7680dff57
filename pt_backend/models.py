"""The PyTorch networks, built from common.workload.models' specs."""
from collections import OrderedDict

import torch
from torch import nn

from xbench.common.workload import models as spec
from xbench.common.workload.models import (
    ADAM,
    BATCHNORM,
    initial_weights,
    input_shape,
    named_layers,
)


class ResidualBlock(nn.Module):
    """relu(body(x) + shortcut(x)); an empty shortcut is the identity."""

    def __init__(self, body: nn.Sequential, shortcut: nn.Sequential):
        super().__init__()
        self.body, self.shortcut = body, shortcut

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def torch_layer(layer) -> nn.Module:
    """One spec layer as a module (a ReLU after it where the spec says so)."""
    if isinstance(layer, spec.Residual):
        return ResidualBlock(nn.Sequential(*map(torch_layer, layer.body)),
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


def build_model(name, seed=0) -> nn.Sequential:
    """The model `name`, one named module per top-level spec layer (conv1, bn1, block1 ...), with
    the initial weights every backend starts from (common.workload.models)."""
    model = nn.Sequential(OrderedDict((unit, torch_layer(layer))
                                      for unit, layer, _ in named_layers(name)))
    with torch.no_grad():
        for parameter, value in zip(model.parameters(), initial_weights(name, seed), strict=True):
            assert parameter.shape == value.shape, (name, parameter.shape, value.shape)
            parameter.copy_(torch.from_numpy(value))
    return model


def batchnorm_statistics(model: nn.Module) -> list[torch.Tensor]:
    """Every BatchNorm's running mean and variance, in order."""
    return [tensor for module in model.modules() if isinstance(module, nn.BatchNorm2d)
            for tensor in (module.running_mean, module.running_var)]


def build_optimizer(parameters, name="adam", lr=ADAM["learning_rate"], momentum=0.0,
                    weight_decay=0.0):
    """The optimizer of every backend (common.grids.grid's settings; weight decay is L2, added to
    the gradient)."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.Adam(parameters, lr=lr, betas=(ADAM["beta_1"], ADAM["beta_2"]),
                            eps=ADAM["epsilon"], weight_decay=weight_decay)


def describe(name):
    """Parameters counted on the built module and forward FLOPs counted by torch's
    FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(name).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, *input_shape(name)))
    return {"framework": "PyTorch " + torch.__version__,
            "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "flops_per_sample": counter.get_total_flops()}
