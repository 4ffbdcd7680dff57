"""jax-single: one device, no mesh to speak of: JAX's single-device reference, the same compiled
step as the other JAX backends over a mesh of one."""
from xbench.jax_backend.base import JaxBackend


class SingleDeviceJaxBackend(JaxBackend):
    name = "jax-single"

    def details(self):
        return {"parallelism": "none (one device)", "reduction": "none",
                "reduction_detail": "one device: no gradients cross between devices"}
