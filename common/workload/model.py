"""A model as one object: what xbench asks of a model, whichever kind it is.

Two kinds answer it: one of xbench's own (`common.workload.models.SpecModel`, its numbers
computed from its layers) and a user's model file (`common.workload.model_file.ModelFile`, its
numbers what each framework counted on the model it built). `common.workload.resolve` turns a
model's name into one; everything else holds the object and asks it, never which kind it is.

Where a model file's model differs per framework (Keras' images channels last, each framework's
own count), a method takes the framework's name (the rows' `framework`: "torch", "tensorflow",
"jax"); None: the first framework's that built it. A spec model is the same in every framework.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

# What a model's samples are.
IMAGES, TOKENS, OTHER = "images", "tokens", "other"


class Model(Protocol):
    """What xbench knows of a model before it is built, and how a framework builds it."""

    name: str      # as cells and rows name it: a spec's name, or a model file's `path@digest`
    dataset: str   # the dataset it takes: mnist, cifar10, shakespeare; "model": its file's own

    @property
    def input_kind(self) -> str:
        """IMAGES, TOKENS (int64 ids) or OTHER."""

    @property
    def predicts_sequence(self) -> bool:
        """Whether its targets are a sequence per sample (a language model's next tokens)."""

    def input_shape(self, framework: str | None = None) -> tuple[int, ...]:
        """One sample's input as `framework`'s model takes it."""

    def parameters(self, framework: str | None = None) -> int:
        """Its trainable parameters."""

    def flops_per_sample(self, framework: str | None = None) -> int:
        """Forward-pass FLOPs of one sample (2 per multiply-accumulate)."""

    def has_batchnorm(self, framework: str | None = None) -> bool:
        """Whether it keeps BatchNorm's running statistics."""

    def tensor_shapes(self, framework: str | None = None) -> list[tuple[int, ...]]:
        """Every trainable tensor's shape (one gradient each), in the framework's order."""

    def gradient_bytes(self, framework: str | None = None, bytes_per_value: int = 4) -> int:
        """Bytes its gradients move per step: one value of `bytes_per_value` per parameter."""

    def output_values(self) -> int:
        """Values of one sample's output (its logits)."""

    def activations_per_sample(self) -> int:
        """Values one sample's forward pass keeps for the backward pass (0: not counted)."""

    def why_not_served(self, framework: str, own_models_only: str = "") -> str | None:
        """Why a backend of `framework` cannot train it, or None where it can; `own_models_only`:
        why the backend trains only xbench's own models, where it does."""

    def check_data(self, data: str, layouts: Mapping[str, str]) -> None:
        """A UserError where it cannot take the samples of `data` (a --data value); `layouts`:
        each framework's image layout (common.workload.layouts), by framework name."""

    def network(self, from_spec: Callable, from_file: Callable) -> object:
        """A framework's network of it: `from_spec(spec model)` builds a spec's layers,
        `from_file(model file)` calls the file's function: each kind picks its own."""

    def carried(self) -> dict | None:
        """What a job carries of it to its worker, which `resolve` takes back (None: nothing)."""

    def row_record(self) -> dict:
        """What a row's backend details record of it beyond its name."""

    def files(self) -> tuple[str, ...]:
        """The files of the user's that its cells read (a command never writes over them)."""
