"""The frameworks xbench trains in, as the backends' traits read them (common.backends.traits):
what each imports and installs, what its processes hold, what forms its batches, what a model file
defines for it, how it builds and counts xbench's own models, the precisions its loop runs,
what --compile does to its step and whether --omp-wait acts on its threads."""
from __future__ import annotations

from dataclasses import dataclass

from xbench.common.workload.layouts import CHANNELS_FIRST, CHANNELS_LAST


@dataclass(frozen=True)
class Framework:
    """What every backend of one framework shares: what it imports, how to install it, what a
    process holds before training, and what forms its batches."""
    name: str            # the rows' `framework`
    title: str           # its name in prose
    module: str          # importable when it is installed
    install_hint: str
    memory_mb: int       # a process's framework, libraries and data before training
    input: str           # what forms its batches
    uses_dataloader: bool  # whether that is PyTorch's DataLoader (host_memory, loader_workers)
    image_layout: str    # how its loop lays out an image sample (CHANNELS_FIRST, CHANNELS_LAST)
    # What a user's model file defines for it (common.workload.model_file) and the module that
    # builds such a file's model and says what it counted.
    model_function: str
    describer: str
    # xbench's own models as it builds them (`xbench models` counts them): whose models they are
    # ("Keras": TensorFlow's backends train Keras'), the function that counts one
    # ("module:function") and the modules whose installed versions (with that function's
    # package's source and common/'s) decide whether a kept count still holds.
    models_built_by: str
    models_counter: str
    models_versions: tuple[str, ...]
    # The mixed precisions its loop runs, and why it runs no other.
    mixed_precisions: tuple[str, ...] = ("bf16", "fp16")
    no_mixed_precision: str = ""
    units_timed: bool = True  # whether `xbench profile` times its model's units
    # What --compile on does to its step, what its step is with --compile off, or why it has no
    # choice (it always compiles).
    compiler: str | None = None
    uncompiled: str = ""
    always_compiled: str = ""
    # Why --omp-wait cannot act on its processes ("": it can, its CPU kernels' threads are
    # OpenMP's), whose cells then make one configuration whatever its value
    # (common.grids.grid.normalised).
    no_omp_wait: str = ""
    # The packages of xbench's environment that an environment holding only this framework
    # lacks (the other frameworks, its reports' libraries): hidden while the framework is
    # imported, so that its optional imports of them find nothing, as they would there
    # (common.running.framework_import).
    not_in_its_install: tuple[str, ...] = ()


# Each framework's own packages, and those of xbench's reports (none among the frameworks'
# requirements but SciPy, which JAX requires)
TORCH_PACKAGES = ("torch",)
TENSORFLOW_PACKAGES = ("tensorflow", "keras")
JAX_PACKAGES = ("jax", "jaxlib", "flax", "optax")
REPORT_LIBRARIES = ("pandas", "matplotlib", "scipy")


# Peak RSS of the small model's smoke cells on CPU: 420-460 MB with PyTorch, 625-680 MB with
# TensorFlow (830-870 MB while its import also loaded JAX, pandas, matplotlib and SciPy).
TORCH = Framework(
    "torch", "PyTorch", "torch",
    "install PyTorch with `make setup` (or `pip install torch` into the environment)",
    memory_mb=450, input="torch.utils.data.DataLoader", uses_dataloader=True,
    image_layout=CHANNELS_FIRST, model_function="pytorch",
    describer="xbench.pt_backend.user_model", models_built_by="PyTorch",
    models_counter="xbench.pt_backend.models:describe", models_versions=("torch",),
    compiler="torch.compile of the model (TorchDynamo and Inductor)",
    uncompiled="eager: each operation dispatched as Python reaches it",
    not_in_its_install=TENSORFLOW_PACKAGES + JAX_PACKAGES + REPORT_LIBRARIES)
TENSORFLOW = Framework(
    "tensorflow", "TensorFlow", "tensorflow",
    "install TensorFlow with `make setup`, or `pip install -e '.[tf]'` into the environment "
    "(the CPU wheel, tensorflow-cpu)",
    memory_mb=800, input="tf.data", uses_dataloader=False, image_layout=CHANNELS_LAST,
    model_function="keras", describer="xbench.tf_backend.user_model", models_built_by="Keras",
    models_counter="xbench.keras_models.models:describe", models_versions=("keras", "tensorflow"),
    compiler="the step's tf.function with jit_compile=True (XLA)",
    uncompiled="the step's tf.function graph, without XLA",
    no_omp_wait="TensorFlow's CPU kernels run on its own thread pools (Eigen's, which its oneDNN "
                "kernels use too), not OpenMP's: no library of TensorFlow 2.21 (or of Horovod's "
                "TensorFlow extension) holds an OpenMP runtime, so OMP_WAIT_POLICY changes "
                "nothing in its processes",
    not_in_its_install=TORCH_PACKAGES + JAX_PACKAGES + REPORT_LIBRARIES)
# Peak RSS of the small model's smoke cells on CPU with JAX: 485-555 MB with Flax, 555 MB with
# keras-jax (640-685 MB while Keras' import also loaded pandas and matplotlib).
JAX = Framework(
    "jax", "JAX", "jax",
    "install JAX, Flax and Optax with `make setup`, or `pip install -e '.[jax]'` into the "
    "environment",
    memory_mb=700, input="numpy batches placed on the devices (jax.device_put, "
                         "jax.make_array_from_process_local_data)",
    uses_dataloader=False, image_layout=CHANNELS_LAST,
    # keras-jax's: the Flax backends take no model file (Traits.own_models_only)
    model_function="keras", describer="xbench.jax_backend.user_model",
    models_built_by="JAX", models_counter="xbench.jax_backend.models:describe",  # in Flax
    models_versions=("jax", "jaxlib", "flax"),
    mixed_precisions=("bf16",),
    no_mixed_precision="fp16 trains only under a dynamic loss scale, and JAX has none of its own "
                       "(optax has no loss scaler; DeepMind's jmp is archived): xbench's JAX "
                       "step (keras-jax's too) runs fp32 and bf16",
    units_timed=False,
    uncompiled="jax.jit (XLA): compiled ahead of the first step, as every JAX step is",
    always_compiled="JAX compiles every step with jax.jit (XLA), keras-jax's too (what Keras' "
                    "fit does on JAX): there is no eager step to compare, and its --compile off "
                    "cells are compiled, which their rows record",
    no_omp_wait="XLA's CPU runtime runs on its own thread pool (Eigen's), not OpenMP's: no "
                "library of jaxlib 0.10 holds an OpenMP runtime, so OMP_WAIT_POLICY changes "
                "nothing in its processes",
    # keras-jax's Keras is imported under the same (jax_backend.keras)
    not_in_its_install=TORCH_PACKAGES + ("tensorflow", "pandas", "matplotlib"))
FRAMEWORKS = (TORCH, TENSORFLOW, JAX)
