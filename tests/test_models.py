"""The model specs: small 402,442 and large 4,104,202 parameters (the PyTorch code of the blog post
the grid comes from), the CIFAR ResNet-18 11,173,962 and VGG-19/BN 20,040,522
(kuangliu/pytorch-cifar's counts), and FLOPs counted by torch equal to the spec's."""
import numpy as np
import pytest

from xbench.common.workload.models import (
    MODELS,
    flops_per_sample,
    gradient_bytes,
    initial_weights,
    input_shape,
    parameter_count,
    training_flops_per_sample,
)
from xbench.pt_backend.models import build_model, describe


@pytest.mark.parametrize("name, params", [("small", 402_442), ("large", 4_104_202),
                                          ("resnet18", 11_173_962), ("vgg19", 20_040_522)])
def test_parameter_counts(name, params):
    assert parameter_count(name) == params
    assert sum(p.numel() for p in build_model(name).parameters()) == params
    assert gradient_bytes(name) == 4 * params


@pytest.mark.parametrize("name", list(MODELS))
def test_torch_flop_counter_agrees_with_the_spec(name):
    described = describe(name)
    assert described["flops_per_sample"] == flops_per_sample(name)
    assert described["params"] == parameter_count(name)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_steps_flops_are_what_torch_counts_in_one(name):
    """Forward and backward of a batch of 2 under torch's FlopCounterMode: the spec's training
    FLOPs, which leave out the first layer's input gradient (3 x forward would not)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(name).train()
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.zeros(2, *input_shape(name))).sum().backward()
    assert counter.get_total_flops() == 2 * training_flops_per_sample(name)
    assert training_flops_per_sample(name) < 3 * flops_per_sample(name)


def test_small_model_flops_by_hand():
    # conv: 2 * 9 * 1 * 32 * 28 * 28; dense: 2 * 6272 * 64 + 2 * 64 * 10
    assert flops_per_sample("small") == 2 * 9 * 32 * 784 + 2 * 6272 * 64 + 2 * 640
    assert training_flops_per_sample("small") == 3_315_456  # 3 x 1,255,680 - the conv's 451,584


def test_initial_weights_follow_torch_default_bounds_and_the_seed():
    """U(+-1/sqrt(fan_in)) for weights and biases, as torch's Conv2d and Linear; one draw per
    seed."""
    conv_weight, conv_bias, dense_weight, dense_bias, *_ = initial_weights("small", seed=0)
    for weight, bias, fan_in in ((conv_weight, conv_bias, 9), (dense_weight, dense_bias, 6272)):
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(weight).max() <= bound and np.abs(bias).max() <= bound
        assert weight.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)  # uniform, not Glorot
        assert weight.dtype == np.float32
    assert conv_weight.shape == (32, 1, 3, 3) and dense_weight.shape == (64, 6272)
    again, other = initial_weights("small", seed=0), initial_weights("small", seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(again, initial_weights("small", 0)))
    assert not np.array_equal(again[0], other[0])
