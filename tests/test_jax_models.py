"""The Flax models are PyTorch's: the spec's parameters, drawn in common; the same logits from the
same weights (BatchNorm with batch and with running statistics, strided convolutions padded as
PyTorch pads them, causal attention and the tied output layer); the same losses and weights after
Adam and SGD steps (momentum, L2 weight decay, a learning rate changed between steps); the same
running statistics; bfloat16 compute on float32 parameters; and XLA's FLOPs beside the spec's.
On the CPU, small batches of random images and token windows."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from torch.nn import functional

from xbench.common.workload.layouts import channels_last
from xbench.common.workload.models import MODELS, NUM_CLASSES, VOCAB
from xbench.jax_backend import models as jax_models
from xbench.pt_backend import models as pt_models

SGD = {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}


def random_batch(name: str, batch: int, seed: int) -> tuple:
    """`batch` random samples and targets of the model: (torch x, torch y, flax x, flax y);
    images N(0, 1), NCHW for PyTorch and NHWC for Flax, or token windows and their next
    tokens."""
    rng = np.random.default_rng(seed)
    if MODELS[name].predicts_sequence:
        tokens = rng.integers(0, VOCAB, (batch, MODELS[name].input_shape()[0] + 1))
        x, y = tokens[:, :-1], tokens[:, 1:]
        return (torch.from_numpy(x), torch.from_numpy(y),
                jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32))
    images = rng.normal(size=(batch, *MODELS[name].input_shape())).astype(np.float32)
    classes = rng.integers(0, NUM_CLASSES, batch)
    return (torch.from_numpy(images), torch.from_numpy(classes),
            jnp.asarray(images.transpose(0, 2, 3, 1)), jnp.asarray(classes, jnp.int32))


def torch_loss(model, x, y) -> torch.Tensor:
    """Mean cross-entropy over the samples (a language model's: over every token)."""
    logits = model(x)
    return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def flax_loss(module, variables, x, y) -> tuple[jax.Array, dict]:
    """The mean cross-entropy of a training forward pass (in float32 at least), and the
    BatchNorm statistics it updated (none without BatchNorm)."""
    logits, updated = module.apply(variables, x, train=True, mutable=["batch_stats"])
    logits = logits.reshape(-1, logits.shape[-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.promote_types(logits.dtype, jnp.float32)), y.reshape(-1))
    return losses.mean(), updated


def flattened(layers: list[list[np.ndarray]]) -> list[np.ndarray]:
    return [tensor for layer in layers for tensor in layer]


def largest_difference(mine: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(mine, theirs, strict=True))


@pytest.mark.parametrize("name", list(MODELS))
def test_the_parameters_are_the_specs_drawn_in_common(name):
    module, variables = jax_models.build_model(name, seed=5)
    assert jax_models.parameter_count(variables["params"]) == MODELS[name].parameters()
    held = jax_models.leaf_arrays(variables)
    assert all(value.dtype == np.float32 for value in held)
    drawn = flattened(channels_last(name, MODELS[name].initial_weights(5)))
    assert all(np.array_equal(a, b) for a, b in zip(held, drawn, strict=True))
    statistics = jax_models.batchnorm_arrays(variables)
    assert ("batch_stats" in variables) == bool(statistics)
    for mean, variance in zip(statistics[::2], statistics[1::2], strict=True):  # PyTorch's start
        assert not mean.any() and (variance == 1).all()
    units = {unit for unit, _, _ in MODELS[name].named_layers()}
    if MODELS[name].predicts_sequence:  # the output layer reads the token table: no weights
        assert set(variables["params"]) == units - {"head1"}


def test_variables_of_no_model_are_refused():
    with pytest.raises(ValueError, match="0 models"):
        jax_models.leaf_arrays({"params": {"conv1": {"kernel": np.zeros((3, 3, 1, 8))}}})


# batch, and the largest difference allowed from PyTorch's logits (BatchNorm models' in training
# mode). vgg19 normalises its last four BatchNorms (2 x 2 maps) over 16 values each: the worst
# conditioned of these.
@pytest.mark.parametrize("name, batch, tolerance", [
    ("small", 8, 2e-6),      # measured: at most 2.4e-7 over input seeds 0-3 (logits up to 0.5)
    ("large", 4, 5e-7),      # 4.7e-8 (logits up to 0.06)
    ("resnet18", 4, 1e-5),   # 1.8e-6 (logits up to 1.1)
    ("vgg19", 4, 1e-4),      # 1.8e-5 (logits up to 1.7)
    ("gpt-tiny", 4, 5e-6),   # 7.2e-7 (logits up to 1.7)
])
def test_same_weights_give_pytorchs_logits(name, batch, tolerance):
    """BatchNorm models in training mode (batch statistics), then with the running statistics
    that pass updated: PyTorch's too, the running variance the unbiased one, and in evaluation
    mode the same logits. ResNet-18's strided convolutions would miss by O(1) with "SAME"
    padding (bottom and right only)."""
    torch_model = pt_models.build_model(MODELS[name], 0)
    module, variables = jax_models.build_model(name, 0)
    torch_x, _, flax_x, _ = random_batch(name, batch, seed=1)
    training = "batch_stats" in variables
    torch_logits = torch_model.train(training)(torch_x).detach().numpy()
    logits, updated = module.apply(variables, flax_x, train=training, mutable=["batch_stats"])
    assert logits.shape == torch_logits.shape
    assert np.abs(np.asarray(logits) - torch_logits).max() < tolerance
    if training:
        variables = {**variables, **updated}
        # measured: at most 2.4e-7 over input seeds 0-3 (the biased variance: 1.2e-3)
        assert largest_difference(jax_models.batchnorm_arrays(variables), [
            tensor.numpy() for tensor in pt_models.batchnorm_statistics(torch_model)]) < 1e-6
        evaluated = np.asarray(module.apply(variables, flax_x, train=False))
        # measured: at most 4.5e-8 (logits up to 0.05; the biased variance: 3.4e-6)
        assert np.abs(evaluated - torch_model.eval()(torch_x).detach().numpy()).max() < 5e-7


def train_both(name: str, optimizer: str, settings: dict, batch: int, steps: int):
    """`steps` steps of each framework's model and optimizer from the same weights on one batch,
    the learning rate raised before each step (a warm-up: rate x step / steps). Returns the
    largest difference of the losses, the trained PyTorch model and the Flax variables."""
    torch_model = pt_models.build_model(MODELS[name], 0)
    torch_optimizer = pt_models.build_optimizer(torch_model.parameters(), optimizer, **settings)
    module, variables = jax_models.build_model(name, 0)
    flax_optimizer = jax_models.build_optimizer(optimizer, **settings)
    opt_state = flax_optimizer.init(variables["params"])
    torch_x, torch_y, flax_x, flax_y = random_batch(name, batch, seed=2)

    @jax.jit
    def flax_step(variables, opt_state):
        (loss, updated), grads = jax.value_and_grad(
            lambda params: flax_loss(module, {**variables, "params": params}, flax_x, flax_y),
            has_aux=True)(variables["params"])
        updates, opt_state = flax_optimizer.update(grads, opt_state, variables["params"])
        return ({**variables, **updated,
                 "params": optax.apply_updates(variables["params"], updates)}, opt_state, loss)

    loss_differences = []
    for step in range(steps):
        rate = settings.get("lr", 1e-3) * (step + 1) / steps
        for group in torch_optimizer.param_groups:
            group["lr"] = rate
        opt_state = jax_models.set_learning_rate(opt_state, rate)
        torch_optimizer.zero_grad()
        torch_side = torch_loss(torch_model, torch_x, torch_y)
        torch_side.backward()
        torch_optimizer.step()
        variables, opt_state, loss = flax_step(variables, opt_state)
        loss_differences.append(abs(torch_side.item() - float(loss)))
    return max(loss_differences), torch_model, variables


# the largest differences allowed of the losses and of the weights after 3 steps, where Adam's
# g / (sqrt(v) + 1e-7) makes a few % of a step of float32 rounding in a tiny gradient
@pytest.mark.parametrize("name, batch", [("small", 8), ("gpt-tiny", 4)])
@pytest.mark.parametrize("optimizer, settings, losses_within, weights_within", [
    # measured over input seeds 0-3: losses 5.7e-6, weights 1.0e-5 (moved 2e-3)
    ("adam", {}, 3e-5, 5e-5),
    # measured: losses 4.8e-7, weights 6e-8 (moved 0.011 to 0.14)
    ("sgd", SGD, 3e-6, 5e-7),
])
def test_same_losses_and_weights_after_three_steps(name, batch, optimizer, settings,
                                                    losses_within, weights_within):
    loss_difference, torch_model, variables = train_both(name, optimizer, settings, batch, 3)
    assert loss_difference < losses_within
    trained = [p.detach().numpy() for p in torch_model.parameters()]
    assert largest_difference(jax_models.leaf_arrays(variables),
                              flattened(channels_last(name, trained))) < weights_within
    assert largest_difference(trained, MODELS[name].initial_weights(0)) > 1e-3  # real steps


def test_resnet18_running_statistics_after_two_steps_are_pytorchs():
    """Two SGD steps (momentum, L2) on 16 images: the running means and unbiased running
    variances of all 20 BatchNorms, and the weights, as PyTorch's, to the rounding of float32
    gradients (each framework's about 1e-3 from float64's here, in its own way), which the first
    step carries into the second step's statistics; in float64 the two are one function
    (test_resnet18_gradients_in_float64_are_pytorchs)."""
    _, torch_model, variables = train_both("resnet18", "sgd", SGD, batch=16, steps=2)
    statistics = jax_models.batchnorm_arrays(variables)
    assert len(statistics) == 40
    # measured: at most 3.0e-4 over input seeds 0-3 (1.2e-7 for one of them)
    assert largest_difference(statistics, [tensor.numpy() for tensor in
                                           pt_models.batchnorm_statistics(torch_model)]) < 1e-3
    trained = [p.detach().numpy() for p in torch_model.parameters()]
    # measured: at most 5.4e-4 (moved up to 0.017)
    assert largest_difference(jax_models.leaf_arrays(variables),
                              flattened(channels_last("resnet18", trained))) < 2e-3


def test_resnet18_gradients_in_float64_are_pytorchs():
    """In float64 (jax's x64 mode, compute_dtype float64, BatchNorm computing in it too) the
    Flax ResNet-18 is PyTorch's function to the last bits: its gradients in training mode
    (BatchNorm's batch statistics, strided convolutions, shortcuts) are PyTorch's."""
    torch_x, torch_y, flax_x, flax_y = random_batch("resnet18", 4, seed=3)
    torch_model = pt_models.build_model(MODELS["resnet18"], 0).double()
    torch_loss(torch_model, torch_x.double(), torch_y).backward()
    reference = flattened(channels_last("resnet18", [p.grad.numpy()
                                                     for p in torch_model.parameters()]))
    with jax.enable_x64(True):
        module, variables = jax_models.build_model("resnet18", 0, "float64")
        variables = jax.tree.map(lambda value: value.astype(jnp.float64), variables)
        grads = jax.jit(jax.grad(lambda params: flax_loss(
            module, {**variables, "params": params}, flax_x.astype(jnp.float64), flax_y)[0]))(
            variables["params"])
        gradients = jax_models.leaf_arrays({"params": grads})
    assert gradients[0].dtype == np.float64
    worst = max(float(np.linalg.norm(mine - theirs) / np.linalg.norm(theirs))
                for mine, theirs in zip(gradients, reference, strict=True))
    assert worst < 1e-10  # measured: 1.5e-14 (2.1e-14 at a batch of 8; in float32, 1e-3)


def bfloat16_step(logits: np.ndarray) -> float:
    """The spacing of bfloat16 values (8 significant bits) at the largest of `logits`."""
    return 2.0 ** (np.floor(np.log2(np.abs(logits).max())) - 7)


@pytest.mark.parametrize("name, kept_float32", [
    ("gpt-tiny", {"embed1", "block1", "block2", "block3", "block4", "ln1"}),
    ("small", set()),
])
def test_bfloat16_compute_keeps_float32_parameters_and_pytorchs_autocast(name, kept_float32):
    """Under compute_dtype bfloat16 the parameters (and their gradients) stay float32, the
    GPT's embeddings, residual stream and LayerNorms float32 as torch.autocast keeps them, the
    convolutions, dense layers, attention and output layer bfloat16; the logits are float32's
    and PyTorch's under autocast to within bfloat16 rounding."""
    torch_x, _, flax_x, flax_y = random_batch(name, 4, seed=4)
    reference_module, reference_variables = jax_models.build_model(name, 0)
    reference = np.asarray(reference_module.apply(reference_variables, flax_x, train=False))
    module, variables = jax_models.build_model(name, 0, "bfloat16")
    logits, captured = module.apply(variables, flax_x, train=False,
                                    capture_intermediates=True, mutable=["intermediates"])
    assert logits.dtype == jnp.bfloat16
    outputs = {unit: values["__call__"][0].dtype
               for unit, values in captured["intermediates"].items() if unit != "__call__"}
    assert {unit for unit, dtype in outputs.items() if dtype == jnp.float32} == kept_float32
    assert {dtype for unit, dtype in outputs.items() if unit not in kept_float32} \
        <= {jnp.dtype(jnp.bfloat16)}
    grads = jax.eval_shape(jax.grad(lambda params: flax_loss(
        module, {**variables, "params": params}, flax_x, flax_y)[0]), variables["params"])
    assert {leaf.dtype for leaf in jax.tree.leaves((variables, grads))} == {jnp.dtype("float32")}
    step = bfloat16_step(reference)  # gpt-tiny: 2^-7 (logits up to 1.6); small: 2^-9
    # measured: at most 1.0 step from float32 over input seeds 0-4, both models
    assert np.abs(np.asarray(logits, np.float32) - reference).max() < 3 * step
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch_logits = pt_models.build_model(MODELS[name], 0).eval()(torch_x)
    assert torch_logits.dtype == torch.bfloat16
    # measured: 1 step from PyTorch's, both models, input seeds 0-4
    assert np.abs(np.asarray(logits, np.float32)
                  - torch_logits.float().detach().numpy()).max() < 3 * step


def test_xla_counts_more_than_the_specs_flops_and_not_the_padding():
    """describe's FLOPs are XLA's cost analysis of a forward pass: the spec's products plus the
    elementwise ops (gpt-tiny: 1.09 x the spec's); a convolution's multiply-accumulates on its
    zero padding are not counted (the small model's 3 x 3 convolution over 28 x 28 images:
    82 x 82 of its 84 x 84 taps, per filter)."""
    small, gpt_tiny = jax_models.describe("small"), jax_models.describe("gpt-tiny")
    for name, described in (("small", small), ("gpt-tiny", gpt_tiny)):
        assert described["params"] == MODELS[name].parameters()
        assert described["framework"].startswith("JAX 0.") and "/ Flax 0." in described["framework"]
    products = 2 * 32 * 82 * 82 + 2 * 14 * 14 * 32 * 64 + 2 * 64 * NUM_CLASSES
    # measured: 1,303,562 (the convolution's ReLU, bias adds, max pool ... 5.6% more)
    assert products < small["flops_per_sample"] < 1.1 * products
    # measured: 120,087,104 (softmax, GELU, LayerNorms, residual adds ...)
    assert MODELS["gpt-tiny"].flops_per_sample() < gpt_tiny["flops_per_sample"] \
        < 1.15 * MODELS["gpt-tiny"].flops_per_sample()
