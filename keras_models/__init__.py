"""Keras, the framework two runtimes share: the networks and optimizers built from the spec
(common.workload.models), which TensorFlow's backends run with TensorFlow underneath and keras-jax
with JAX underneath. Imports only common/; the backends that train these models import it."""
