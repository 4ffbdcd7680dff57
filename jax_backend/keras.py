"""keras-jax: Keras 3 on its JAX backend, `keras.distribution.DataParallel` over this process's
devices: the Keras models xbench's TensorFlow backends train (keras_models), their variables laid
out replicated on DataParallel's mesh and each batch sharded over it, one jax.jit-compiled step of
the model's `stateless_call` and the optimizer's `stateless_apply` (what Keras' own JAX trainer
compiles in `fit`), XLA inserting the gradients' all-reduce. On a CPU the devices are XLA's
host-platform devices, as jax-dp's are."""
from __future__ import annotations

import os

import numpy as np

from xbench.common.errors import Unsupported
from xbench.jax_backend.base import JaxBackend
from xbench.jax_backend.networks import AXIS, Network


class KerasDataParallelBackend(JaxBackend):
    name = "keras-jax"

    def set_up(self, cell, threads_per_device):
        os.environ["KERAS_BACKEND"] = "jax"  # read when Keras is first imported, in `network`
        return super().set_up(cell, threads_per_device)

    def network(self, cell, devices):
        return KerasNetwork(cell, devices)

    def details(self):
        devices = self.cell.devices
        return {"parallelism": "keras.distribution.DataParallel (Keras 3 on JAX)",
                "reduction": "all-reduce" if devices > 1 else "none",
                "reduction_detail": (f"XLA's all-reduce over the {devices} devices of "
                                     f"DataParallel's mesh, inserted by its SPMD partitioner"
                                     if devices > 1 else "a mesh of one device: nothing to "
                                     "reduce")}


class KerasNetwork(Network):
    """The spec's model as Keras builds it (keras_models.models), under DataParallel, stepped by
    xbench's Keras optimizers (Adam and SGD as PyTorch steps them). The state's three parts are
    the values of the model's trainable and non-trainable variables and of the optimizer's, in
    Keras' order."""

    def __init__(self, cell, devices):
        import keras

        from xbench.common.workload.precision import lower_dtype
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
        self.model = build_model(cell.model, cell.seed)
        self.optimizer = build_optimizer(cell.optimizer, cell.lr, cell.momentum,
                                         cell.weight_decay)
        self.optimizer.build(self.model.trainable_variables)
        kept = [id(v) for v in self.model.non_trainable_variables]
        self.statistics = [kept.index(id(v)) for v in batchnorm_statistics(self.model)]
        self.rate = [v.path for v in self.optimizer.variables].index(
            self.optimizer._learning_rate.path)
        self.keras_version = keras.__version__

    def initial_state(self):
        return tuple([np.asarray(v.value) for v in variables] for variables in (
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

    def weights(self, trainable):
        return [np.asarray(value) for value in trainable]

    def batchnorm(self, others):
        return [np.asarray(others[index]) for index in self.statistics]

    def details(self):
        return {"model_library": f"Keras {self.keras_version} on JAX",
                "optimizer_library": f"Keras {self.keras_version} (xbench's TorchAdam and "
                                     f"TorchSGD, stepping as PyTorch's)",
                "distribution": "keras.distribution.DataParallel"}
