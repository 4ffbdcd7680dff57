"""The model specs: small 402,442 and large 4,104,202 parameters (the PyTorch code of the blog post
the grid comes from), the CIFAR ResNet-18 11,173,962 and VGG-19/BN 20,040,522
(kuangliu/pytorch-cifar's counts), the GPT-style decoders (nanoGPT's counts), and FLOPs counted
by torch equal to the spec's."""
import numpy as np
import pytest

from xbench.common.workload.models import MODELS
from xbench.pt_backend.models import build_model, describe, example_input


# gpt-small: nanoGPT's shakespeare_char model, which prints 10.65M (it leaves out the 98,304
# position embeddings); gpt-medium: GPT-2 small's 124.4M less its 50,257-token embedding.
@pytest.mark.parametrize("name, params", [("small", 402_442), ("large", 4_104_202),
                                          ("resnet18", 11_173_962), ("vgg19", 20_040_522),
                                          ("gpt-tiny", 809_856), ("gpt-small", 10_770_816),
                                          ("gpt-medium", 85_892_352)])
def test_parameter_counts(name, params):
    assert MODELS[name].parameters() == params
    assert sum(p.numel() for p in build_model(MODELS[name]).parameters()) == params
    assert MODELS[name].gradient_bytes() == 4 * params


@pytest.mark.parametrize("name", list(MODELS))
def test_torch_flop_counter_agrees_with_the_spec(name):
    described = describe(name)
    assert described["flops_per_sample"] == MODELS[name].flops_per_sample()
    assert described["params"] == MODELS[name].parameters()


# gpt-medium is gpt-small's arithmetic, 35x the FLOPs: seconds of CPU for nothing new.
@pytest.mark.parametrize("name", [name for name in MODELS if name != "gpt-medium"])
def test_a_training_steps_flops_are_what_torch_counts_in_one(name):
    """Forward and backward of a batch of 2 under torch's FlopCounterMode (attention through
    the math kernel, whose products it counts): the spec's training FLOPs, which leave out an
    image model's first layer's input gradient (3 x forward would not); a language model's
    first layer is a lookup, so there they are 3 x forward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(MODELS[name]).train()
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(SDPBackend.MATH):
        model(example_input(MODELS[name], 2)).float().sum().backward()
    assert counter.get_total_flops() == 2 * MODELS[name].training_flops_per_sample()
    if MODELS[name].predicts_sequence:
        assert MODELS[name].training_flops_per_sample() == 3 * MODELS[name].flops_per_sample()
    else:
        assert MODELS[name].training_flops_per_sample() < 3 * MODELS[name].flops_per_sample()


def test_gpt_flops_by_hand():
    # gpt-tiny, per window of 64 tokens, width 128, 4 blocks: per block the four linear layers
    # (3 + 1 + 4 + 4) x 128^2 multiply-accumulates a token, attention 2 x 64 x 128 a token;
    # the tied head 128 x 65 a token
    block = 2 * 64 * 12 * 128 ** 2 + 2 * 2 * 64 * 64 * 128
    assert MODELS["gpt-tiny"].flops_per_sample() == 4 * block + 2 * 64 * 128 * 65


def test_small_model_flops_by_hand():
    # conv: 2 * 9 * 1 * 32 * 28 * 28; dense: 2 * 6272 * 64 + 2 * 64 * 10
    assert MODELS["small"].flops_per_sample() == 2 * 9 * 32 * 784 + 2 * 6272 * 64 + 2 * 640
    # 3 x 1,255,680 - the conv's 451,584
    assert MODELS["small"].training_flops_per_sample() == 3_315_456


def test_initial_weights_follow_torch_default_bounds_and_the_seed():
    """U(+-1/sqrt(fan_in)) for weights and biases, as torch's Conv2d and Linear; one draw per
    seed."""
    conv_weight, conv_bias, dense_weight, dense_bias, *_ = MODELS["small"].initial_weights(0)
    for weight, bias, fan_in in ((conv_weight, conv_bias, 9), (dense_weight, dense_bias, 6272)):
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(weight).max() <= bound and np.abs(bias).max() <= bound
        assert weight.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)  # uniform, not Glorot
        assert weight.dtype == np.float32
    assert conv_weight.shape == (32, 1, 3, 3) and dense_weight.shape == (64, 6272)
    again, other = MODELS["small"].initial_weights(0), MODELS["small"].initial_weights(1)
    assert all(np.array_equal(a, b) for a, b in zip(again, MODELS["small"].initial_weights(0)))
    assert not np.array_equal(again[0], other[0])


def test_gpt_initial_weights_are_gpt2s():
    """N(0, 0.02) for the embeddings and the linear layers, N(0, 0.02 / sqrt(2 x blocks)) for the
    projections back into the residual stream, biases 0, LayerNorms at 1 and 0; the token table
    tied to the output layer counted once."""
    tensors = MODELS["gpt-small"].initial_weights(0)
    token, position, ln1_weight, ln1_bias, qkv, qkv_bias, proj, *_ = tensors
    assert token.shape == (65, 384) and position.shape == (256, 384)
    assert qkv.shape == (3 * 384, 384) and qkv.std() == pytest.approx(0.02, rel=0.02)
    assert proj.std() == pytest.approx(0.02 / np.sqrt(2 * 6), rel=0.02)
    assert not qkv_bias.any() and not ln1_bias.any() and (ln1_weight == 1).all()
    model = build_model(MODELS["gpt-tiny"])
    assert model.head1.embedding is model.embed1  # referenced, not a module of its own
    assert len(list(model.parameters())) == len(MODELS["gpt-tiny"].initial_weights(0))
