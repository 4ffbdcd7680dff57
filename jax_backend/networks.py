"""What a JAX loop trains (jax_backend.train.JaxLoop): a network as pure functions over a state of
arrays, on a one-axis mesh of the cell's devices. Flax's (the spec's model in Flax, stepped by
Optax) is the JAX backends' own; Keras 3's on JAX, under keras.distribution.DataParallel, is
keras-jax's. Frameworks are imported in the workers that build one."""
from __future__ import annotations

import abc
from collections.abc import Callable

import flax
import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xbench.common.errors import Unsupported
from xbench.common.grids.cell import Cell
from xbench.common.workload.precision import lower_dtype
from xbench.common.workload.resolve import resolve_model
from xbench.jax_backend import models as flax_models
from xbench.jax_backend.mesh import AXIS, one_axis_mesh


class Network(abc.ABC):
    """A model and its optimizer as pure functions: the state is (trainable, others,
    optimizer), each a tree of arrays (others: BatchNorm's running statistics)."""

    mesh: Mesh  # the one-axis mesh (AXIS) of the cell's devices

    @abc.abstractmethod
    def initial_state(self, replicate: Callable[[np.ndarray], jax.Array]) -> tuple:
        """(trainable, others, optimizer) at the start, the spec's initial weights replicated on
        every device of the mesh (`replicate` places a host array so)."""

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

    def batch_sharding(self, shape: tuple[int, ...]) -> NamedSharding:
        """How a batch of `shape` lies on the mesh: its first dimension split over AXIS."""
        return NamedSharding(self.mesh, P(AXIS))

    def parameter_count(self, trainable) -> int:
        return flax_models.parameter_count(trainable)


class FlaxNetwork(Network):
    """The spec's model in Flax (jax_backend.models), stepped by Optax as PyTorch steps."""

    def __init__(self, cell: Cell, devices: list):
        self.mesh = one_axis_mesh(devices)
        self.module, self.variables = flax_models.build_model(cell.model, cell.seed,
                                                              lower_dtype(cell.precision))
        self.optimizer = flax_models.build_optimizer(cell.optimizer, cell.lr, cell.momentum,
                                                     cell.weight_decay)
        # the parameters' paths, which name the model's tensors (no values kept)
        self.paths = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype),
                                  self.variables["params"])

    def initial_state(self, replicate):
        variables, self.variables = self.variables, None  # the state holds them from here on
        params = variables["params"]
        state = params, variables.get("batch_stats", {}), self.optimizer.init(params)
        return jax.tree.map(lambda leaf: replicate(np.asarray(leaf)), state)

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
        return flax_models.set_learning_rate(optimizer, value)

    def weights(self, trainable):
        return flax_models.leaf_arrays({"params": trainable})

    def batchnorm(self, others):
        return (flax_models.batchnorm_arrays({"params": self.paths, "batch_stats": others})
                if others else [])

    def details(self):
        return {"model_library": f"Flax {flax.__version__} (linen)",
                "optimizer_library": f"Optax {optax.__version__}"}


class KerasNetwork(Network):
    """The spec's model as Keras builds it, or a model file's keras() (keras_models.models's
    build_model, Keras seeded with the cell's seed before the file's), stepped by xbench's Keras
    optimizers (Adam and SGD as PyTorch steps them), under keras.distribution.DataParallel: its
    DeviceMesh is the mesh, it lays out the variables (replicated) and each batch (split over
    the mesh's axis). The state is the values of the model's trainable and non-trainable
    variables and of the optimizer's, in Keras' order, as DataParallel placed them; the step is
    the model's `stateless_call` and the optimizer's `stateless_apply`, as Keras' own JAX
    trainer compiles them in `fit`."""

    def __init__(self, cell: Cell, devices: list):
        # Keras here, not at the top: the Flax backends never load it, and keras-jax sets
        # KERAS_BACKEND before its first import (jax_backend.keras)
        import keras

        from xbench.keras_models.models import batchnorm_statistics, build_model, build_optimizer
        if keras.config.backend() != "jax":
            raise Unsupported(f"keras-jax needs Keras on its JAX backend, but Keras was loaded "
                              f"on {keras.config.backend()} before KERAS_BACKEND was set")
        mesh = keras.distribution.DeviceMesh((len(devices),), [AXIS], devices)
        self.distribution = keras.distribution.DataParallel(device_mesh=mesh)
        keras.distribution.set_distribution(self.distribution)
        self.mesh = mesh.backend_mesh
        lower = lower_dtype(cell.precision)
        keras.mixed_precision.set_global_policy(f"mixed_{lower}" if lower else "float32")
        self.model = build_model(resolve_model(cell.model), cell.seed)
        self.optimizer = build_optimizer(cell.optimizer, cell.lr, cell.momentum,
                                         cell.weight_decay)
        self.optimizer.build(self.model.trainable_variables)
        kept = [id(v) for v in self.model.non_trainable_variables]
        self.statistics = [kept.index(id(v)) for v in batchnorm_statistics(self.model)]
        self.rate = [v.path for v in self.optimizer.variables].index(
            self.optimizer._learning_rate.path)
        self.keras_version = keras.__version__

    def initial_state(self, replicate):
        """The variables' own arrays, as DataParallel laid them out (the first step takes them
        over: Keras' variables are not read again)."""
        return tuple([v.value for v in variables] for variables in (
            self.model.trainable_variables, self.model.non_trainable_variables,
            self.optimizer.variables))

    def forward(self, trainable, others, inputs, training):
        return self.model.stateless_call(trainable, others, inputs, training=training)

    def update(self, grads, optimizer, trainable):
        trainable, optimizer = self.optimizer.stateless_apply(optimizer, grads, trainable)
        return trainable, optimizer

    def set_learning_rate(self, optimizer, value):
        return [value if index == self.rate else variable
                for index, variable in enumerate(optimizer)]

    def batch_sharding(self, shape):
        return self.distribution.get_data_layout(shape).backend_layout

    def weights(self, trainable):
        return [np.asarray(value) for value in trainable]

    def batchnorm(self, others):
        return [np.asarray(others[index]) for index in self.statistics]

    def details(self):
        return {"model_library": f"Keras {self.keras_version} on JAX",
                "optimizer_library": f"Keras {self.keras_version} (xbench's TorchAdam and "
                                     f"TorchSGD, stepping as PyTorch's)",
                "distribution": "keras.distribution.DataParallel: its DeviceMesh, variable and "
                                "batch layouts"}
