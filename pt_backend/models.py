"""The PyTorch networks, built from common.models' specs."""
import torch
from torch import nn

from common.models import ADAM, MODELS, Conv, Dense, Flatten, MaxPool, initial_weights


def build_model(name, seed=0):
    """The model `name` with the initial weights every backend starts from (common.models)."""
    layers = []
    for layer in MODELS[name]:
        if isinstance(layer, Conv):
            layers += [nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel,
                                 padding=layer.kernel // 2), nn.ReLU()]
        elif isinstance(layer, MaxPool):
            layers.append(nn.MaxPool2d(layer.size))
        elif isinstance(layer, Flatten):
            layers.append(nn.Flatten())
        elif isinstance(layer, Dense):
            layers.append(nn.Linear(layer.in_features, layer.out_features))
            if layer.relu:
                layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    with torch.no_grad():
        for parameter, value in zip(model.parameters(), initial_weights(name, seed), strict=True):
            assert parameter.shape == value.shape, (name, parameter.shape, value.shape)
            parameter.copy_(torch.from_numpy(value))
    return model


def build_optimizer(parameters, name="adam", lr=ADAM["learning_rate"], momentum=0.0,
                    weight_decay=0.0):
    """The optimizer of every backend (common.grid's settings; weight decay is L2, added to the
    gradient)."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.Adam(parameters, lr=lr, betas=(ADAM["beta_1"], ADAM["beta_2"]),
                            eps=ADAM["epsilon"], weight_decay=weight_decay)


def describe(name):
    """Parameters counted on the built module and forward FLOPs counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(name)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, 1, 28, 28))
    return {"framework": "PyTorch " + torch.__version__,
            "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "flops_per_sample": counter.get_total_flops()}
