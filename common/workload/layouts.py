"""Image layouts (channels first or last: a framework's traits say which its loop uses), and the
initial weights (common.workload.models.SpecModel.initial_weights, PyTorch's layout) in the
channels-last layout of Keras and Flax, framework-free so that both backends convert them one
way."""
from itertools import islice

import numpy as np

from xbench.common.workload import layers as spec
from xbench.common.workload.layers import BLOCK_TENSORS, tensor_shapes_of
from xbench.common.workload.models import MODELS

# How a framework's loop lays out an image sample (its traits' `image_layout`).
CHANNELS_FIRST, CHANNELS_LAST = "channels first", "channels last"


def image_shape(layout: str, channels: int, height: int, width: int) -> tuple[int, int, int]:
    """One image sample's shape in `layout`: (C, H, W) channels first, (H, W, C) channels last."""
    return (channels, height, width) if layout == CHANNELS_FIRST else (height, width, channels)


def channels_last(name: str, tensors: list[np.ndarray]) -> list[list[np.ndarray]]:
    """PyTorch-layout weights of model `name` in the layout of Keras and Flax, one list per layer
    that holds weights, in the spec's order: conv kernels OIHW -> HWIO, dense kernels (out, in)
    -> (in, out), and for the dense layer after the flatten the rows reordered from PyTorch's
    (C, H, W) flatten order to the channels-last (H, W, C); BatchNorm's scale and shift as they
    are. A transformer's embedding tables and LayerNorms stay as they are, a block's linear
    weights are transposed (a block: one list of its 12 tensors in BLOCK_TENSORS' order)."""
    converted, values = [], iter(tensors)
    flattened = None
    for layer, shape in MODELS[name].layer_shapes():
        if isinstance(layer, spec.Flatten):
            flattened = shape
        if isinstance(layer, spec.BatchNorm):
            converted.append([next(values), next(values)])
        elif isinstance(layer, spec.Conv):
            kernel = next(values).transpose(2, 3, 1, 0)
            converted.append([np.ascontiguousarray(kernel)]
                             + ([next(values)] if layer.bias else []))
        elif isinstance(layer, spec.Dense):
            weight, bias = next(values), next(values)
            if flattened is not None:
                c, h, w = flattened
                kernel = weight.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1)
                flattened = None
            else:
                kernel = weight.T
            converted.append([np.ascontiguousarray(kernel), bias])
        elif isinstance(layer, (spec.Embedding, spec.LayerNorm)):
            converted.append([next(values) for _ in tensor_shapes_of(layer)])
        elif isinstance(layer, spec.Block):
            # .T turns the linear weights (out, in) into kernels (in, out) and leaves the 1-D
            # tensors (biases, LayerNorm scales and shifts) as they are
            converted.append([np.ascontiguousarray(value.T)
                              for value in islice(values, len(BLOCK_TENSORS))])
    return converted
