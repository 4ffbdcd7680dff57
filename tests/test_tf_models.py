"""The Keras models are PyTorch's models: equal parameters and FLOPs, the same initial weights, and
the same logits, loss and optimizer steps (Adam, SGD with momentum and weight decay, under a
changing learning rate) on real MNIST batches."""
import numpy as np
import pytest
import tensorflow as tf
import torch

from xbench.common.workload.models import MODELS

MNIST_MODELS = [name for name, spec in MODELS.items() if spec.dataset == "mnist"]
from xbench.keras_models import models as keras_nets
from xbench.pt_backend import models as pt_models
from xbench.pt_backend import train as pt_train
from xbench.tf_backend import pipeline as tf_pipeline
from xbench.tf_backend import step as tf_step
from xbench.tf_backend.collectives import OneTensorFlowProcess

BATCH = 64


@pytest.mark.parametrize("name, params", [("small", 402_442), ("large", 4_104_202),
                                          ("resnet18", 11_173_962), ("vgg19", 20_040_522)])
def test_parameter_counts_equal_across_frameworks(name, params):
    keras_model = keras_nets.build_model(MODELS[name])
    assert keras_nets.parameter_count(keras_model) == params == MODELS[name].parameters()
    assert sum(p.numel() for p in pt_models.build_model(MODELS[name]).parameters()) == params


@pytest.mark.parametrize("name", list(MODELS))
def test_keras_flops_equal_torch_flops_and_the_spec(name):
    keras_side, torch_side = keras_nets.describe(name), pt_models.describe(name)
    assert (keras_side["flops_per_sample"] == torch_side["flops_per_sample"]
            == MODELS[name].flops_per_sample())
    assert keras_side["params"] == torch_side["params"]
    assert keras_side["framework"].startswith("Keras 3.")
    assert keras_side["framework"].endswith("on tensorflow")


@pytest.mark.parametrize("name", list(MODELS))
def test_both_frameworks_start_from_the_weights_drawn_in_common(name):
    """Every tensor of the torch model is common.workload.models.initial_weights'; the Keras model
    holds the same values in its layout, so both compute the same function from the first step."""
    torch_model = pt_models.build_model(MODELS[name], seed=5)
    keras_model = keras_nets.build_model(MODELS[name], 5)
    drawn = MODELS[name].initial_weights(5)
    for parameter, value in zip(torch_model.parameters(), drawn, strict=True):
        assert np.array_equal(parameter.detach().numpy(), value)
    for held, values in zip(keras_nets.trainable_leaf_weights(keras_model),
                            keras_nets.keras_layout(name, drawn), strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(held, values, strict=True))


@pytest.mark.parametrize("name", MNIST_MODELS)
def test_same_weights_give_the_same_logits_loss_and_adam_step(name, mnist):
    torch_model = pt_models.build_model(MODELS[name], seed=0)
    keras_model = keras_nets.build_model(MODELS[name], 0)
    images, labels = mnist.train_images[:BATCH].copy(), mnist.train_labels[:BATCH]
    torch_images = pt_train.normalise(torch.from_numpy(images), mnist.mean, mnist.std)
    torch_labels = torch.from_numpy(labels.astype(np.int64))
    keras_images = tf_pipeline.normalise(images, mnist.mean, mnist.std)
    keras_labels = tf.constant(labels.astype(np.int32))

    def torch_loss():
        return torch.nn.functional.cross_entropy(torch_model(torch_images), torch_labels)

    def keras_loss():
        return float(tf.reduce_mean(tf_step.cross_entropy(keras_labels,
                                                          keras_model(keras_images))))

    torch_logits = torch_model(torch_images).detach().numpy()
    assert np.abs(torch_logits - keras_model(keras_images).numpy()).max() < 1e-4
    loss_before = torch_loss()
    assert abs(loss_before.item() - keras_loss()) < 1e-4

    # One Adam step from the same weights, each with its backend's optimizer and step code.
    torch_optimizer = pt_models.build_optimizer(torch_model.parameters())
    torch_optimizer.zero_grad()
    loss_before.backward()
    torch_optimizer.step()
    totals = tf_step.EpochTotals(tf.distribute.get_strategy())
    tf_step.make_replica_step(keras_model, keras_nets.build_optimizer(), OneTensorFlowProcess(),
                              BATCH, totals)(keras_images, keras_labels, tf.range(BATCH))
    loss_after = torch_loss().item()
    # The issue asks for 1e-3; they agree to ~1e-7. Keras' stock Adam (epsilon placed before
    # the bias correction) misses by 1.3e-3, so 1e-4 keeps that difference out.
    assert abs(loss_after - keras_loss()) < 1e-4
    assert loss_after < loss_before.item()  # the step was a real step
    assert totals.read()[0] / BATCH == pytest.approx(loss_before.item(), abs=1e-4)
    assert totals.read()[1] == (torch_logits.argmax(1) == labels).sum()


@pytest.mark.parametrize("optimizer, settings", [
    ("sgd", {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}),
    ("adam", {"lr": 1e-3, "momentum": 0.0, "weight_decay": 5e-4}),
])
def test_sgd_momentum_weight_decay_and_a_changing_rate_step_alike(optimizer, settings, mnist):
    """Five steps on real MNIST with the learning rate changed before each (a warm-up), from the
    same weights: PyTorch's SGD (momentum, L2 weight decay) and Adam (L2) and their Keras
    counterparts end with the same weights. Keras' own SGD (v = m v - lr g) and decoupled
    weight decay would not: their steps differ once lr changes or decay is on."""
    torch_model = pt_models.build_model(MODELS["small"], 0)
    keras_model = keras_nets.build_model(MODELS["small"], 0)
    torch_optimizer = pt_models.build_optimizer(torch_model.parameters(), optimizer, **settings)
    keras_optimizer = keras_nets.build_optimizer(optimizer, **settings)
    totals = tf_step.EpochTotals(tf.distribute.get_strategy())
    keras_step = tf_step.make_replica_step(keras_model, keras_optimizer, OneTensorFlowProcess(),
                                           BATCH, totals)
    for step in range(5):
        images = mnist.train_images[step * BATCH:(step + 1) * BATCH].copy()
        labels = mnist.train_labels[step * BATCH:(step + 1) * BATCH]
        rate = settings["lr"] * (step + 1) / 5
        for group in torch_optimizer.param_groups:
            group["lr"] = rate
        keras_optimizer.learning_rate.assign(rate)
        torch_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(
            torch_model(pt_train.normalise(torch.from_numpy(images), mnist.mean, mnist.std)),
            torch.from_numpy(labels.astype(np.int64))).backward()
        torch_optimizer.step()
        keras_step(tf_pipeline.normalise(images, mnist.mean, mnist.std),
                   tf.constant(labels.astype(np.int32)),
                   tf.range(BATCH))
    trained = [p.detach().numpy() for p in torch_model.parameters()]
    moved = max(float(np.abs(w - w0).max())
                for w, w0 in zip(trained, MODELS["small"].initial_weights(0)))
    for mine, theirs in zip(keras_nets.trainable_leaf_weights(keras_model),
                            keras_nets.keras_layout("small", trained), strict=True):
        assert max(np.abs(a - b).max() for a, b in zip(mine, theirs, strict=True)) < 1e-5
    assert moved > 1e-3  # the steps were real steps
