"""The model specs: small 402,442 and large 4,104,202 parameters (the PyTorch code of the blog post
the grid comes from), and FLOPs counted by torch equal to the spec's."""
import pytest

from common.models import MODELS, flops_per_sample, gradient_bytes, parameter_count
from pt_backend.models import build_model, describe


@pytest.mark.parametrize("name, params", [("small", 402_442), ("large", 4_104_202)])
def test_parameter_counts(name, params):
    assert parameter_count(name) == params
    assert sum(p.numel() for p in build_model(name).parameters()) == params
    assert gradient_bytes(name) == 4 * params


@pytest.mark.parametrize("name", list(MODELS))
def test_torch_flop_counter_agrees_with_the_spec(name):
    described = describe(name)
    assert described["flops_per_sample"] == flops_per_sample(name)
    assert described["params"] == parameter_count(name)


def test_small_model_flops_by_hand():
    # conv: 2 * 9 * 1 * 32 * 28 * 28; dense: 2 * 6272 * 64 + 2 * 64 * 10
    assert flops_per_sample("small") == 2 * 9 * 32 * 784 + 2 * 6272 * 64 + 2 * 640
