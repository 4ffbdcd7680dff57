"""keras-jax: Keras 3 on its JAX backend, `keras.distribution.DataParallel` over this process's
devices: the Keras models xbench's TensorFlow backends train (keras_models: xbench's own, or a
model file's keras(), which the Flax backends do not take), their variables laid out replicated
on DataParallel's mesh and each batch split over it, one jax.jit-compiled step of the model's
`stateless_call` and the optimizer's `stateless_apply` (what Keras' own JAX trainer compiles in
`fit`; jax_backend.networks.KerasNetwork), XLA inserting the gradients' all-reduce.
On a CPU the devices are XLA's host-platform devices, as jax-dp's are."""
import os

from xbench.common.running.framework_import import import_as_installed_alone
from xbench.jax_backend.base import JaxBackend


class KerasDataParallelBackend(JaxBackend):
    name = "keras-jax"

    def set_up(self, cell, threads_per_device):
        os.environ["KERAS_BACKEND"] = "jax"  # read when Keras is first imported
        # as an environment of Keras and JAX alone would import it (pandas and matplotlib hidden)
        import_as_installed_alone("keras", self.traits.framework.not_in_its_install)
        return super().set_up(cell, threads_per_device)

    def network(self, cell, devices):
        from xbench.jax_backend.networks import KerasNetwork
        return KerasNetwork(cell, devices)

    def details(self):
        return self.mesh_details("keras.distribution.DataParallel (Keras 3 on JAX)",
                                 "DataParallel's mesh")
