"""What a JAX loop trains (jax_backend.train.JaxLoop): a network as pure functions over a state of
arrays, and the mesh it runs on. Flax's (this module) is the JAX backends' own; Keras 3's on JAX
is keras-jax's (jax_backend.keras)."""
from __future__ import annotations

import abc

import flax
import jax
import numpy as np
import optax
from jax.sharding import Mesh

from xbench.common.grids.cell import Cell
from xbench.common.workload.precision import lower_dtype
from xbench.jax_backend.models import (
    batchnorm_arrays,
    build_model,
    build_optimizer,
    leaf_arrays,
    parameter_count,
    set_learning_rate,
)

AXIS = "batch"  # the mesh's one axis, the batch's first dimension sharded over it


class Network(abc.ABC):
    """A model and its optimizer as pure functions: the state is (trainable, others,
    optimizer), each a tree of arrays (others: BatchNorm's running statistics)."""

    mesh: Mesh  # the one-axis mesh (AXIS) of the cell's devices

    @abc.abstractmethod
    def initial_state(self) -> tuple:
        """(trainable, others, optimizer) at the start: the spec's initial weights."""

    @abc.abstractmethod
    def forward(self, trainable, others, inputs, training: bool) -> tuple:
        """(logits, others as the forward pass leaves them)."""

    @abc.abstractmethod
    def update(self, grads, optimizer, trainable) -> tuple:
        """(trainable, optimizer) after one optimizer step on `grads`."""

    @abc.abstractmethod
    def set_learning_rate(self, optimizer, value: jax.Array):
        """The optimizer's state with learning rate `value` (placed as the state is)."""

    @abc.abstractmethod
    def weights(self, trainable) -> list[np.ndarray]:
        """Every trainable tensor, on the host, in the spec's order."""

    @abc.abstractmethod
    def batchnorm(self, others) -> list[np.ndarray]:
        """Every BatchNorm's running mean and variance, on the host (none without BatchNorm)."""

    @abc.abstractmethod
    def details(self) -> dict:
        """What the row records of the libraries that build and step it."""

    def parameter_count(self, trainable) -> int:
        return sum(int(np.size(leaf)) for leaf in jax.tree.leaves(trainable))


class FlaxNetwork(Network):
    """The spec's model in Flax (jax_backend.models), stepped by Optax as PyTorch steps."""

    def __init__(self, cell: Cell, devices: list):
        self.mesh = Mesh(np.asarray(devices), (AXIS,))
        self.module, self.variables = build_model(cell.model, cell.seed,
                                                  lower_dtype(cell.precision))
        self.optimizer = build_optimizer(cell.optimizer, cell.lr, cell.momentum,
                                         cell.weight_decay)

    def initial_state(self):
        params = self.variables["params"]
        return params, self.variables.get("batch_stats", {}), self.optimizer.init(params)

    def forward(self, trainable, others, inputs, training):
        variables = {"params": trainable, **({"batch_stats": others} if others else {})}
        if not training:
            return self.module.apply(variables, inputs, train=False), others
        logits, updated = self.module.apply(variables, inputs, train=True,
                                            mutable=["batch_stats"] if others else [])
        return logits, updated.get("batch_stats", others)

    def update(self, grads, optimizer, trainable):
        updates, optimizer = self.optimizer.update(grads, optimizer, trainable)
        return optax.apply_updates(trainable, updates), optimizer

    def set_learning_rate(self, optimizer, value):
        return set_learning_rate(optimizer, value)

    def weights(self, trainable):
        return leaf_arrays({"params": trainable})

    def batchnorm(self, others):
        return batchnorm_arrays({"params": self.variables["params"], "batch_stats": others}
                                ) if others else []

    def parameter_count(self, trainable):
        return parameter_count(trainable)

    def details(self):
        return {"model_library": f"Flax {flax.__version__} (linen)",
                "optimizer_library": f"Optax {optax.__version__}"}
