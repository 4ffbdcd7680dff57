"""Gradient compression on the wire (the `compression` setting): what each choice sends, written
once for the backends that compress, the traffic they record and the bandwidth reports derive.

- fp16, bf16: each float32 gradient is cast to 16 bits for the all-reduce and back after it (DDP's
  fp16_compress_hook and bf16_compress_hook, Horovod's Compression.fp16): half the bytes.
- powersgd: DDP's PowerSGD hook (Vogels et al., 2019) all-reduces, for each gradient viewed as an
  n x m matrix (its first dimension by the rest), two factors P (n x r) and Q (m x r) of rank
  r = min(n, m, powersgd_rank) in float32, with error feedback; a matrix whose factors would not
  be less than half its size (every bias among them) goes uncompressed, as the hook decides.
"""
import math
from collections.abc import Iterable

COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
POWERSGD_MIN_RATE = 2  # PowerSGDState's min_compression_rate, its default
# The hook all-reduces plainly while its step count is below this: the first 2 steps (the least
# it allows with error feedback; DDP needs one plain step to settle its buckets).
POWERSGD_START_STEP = 2


def gradient_wire_bytes(shape: tuple[int, ...], compression: str, powersgd_rank: int) -> int:
    """Bytes one float32 gradient of `shape` puts into the all-reduce under `compression`."""
    values = math.prod(shape)
    if compression in ("fp16", "bf16"):
        return 2 * values
    if compression == "powersgd" and shape:  # a scalar goes as it is
        rows = shape[0]
        columns = values // rows
        rank = min(rows, columns, powersgd_rank)
        if (rows + columns) * rank * POWERSGD_MIN_RATE < rows * columns:
            return 4 * (rows + columns) * rank
    return 4 * values


def wire_bytes(shapes: Iterable[tuple[int, ...]], compression: str, powersgd_rank: int) -> int:
    """Bytes all-reduced per step for gradients of `shapes`."""
    return sum(gradient_wire_bytes(shape, compression, powersgd_rank) for shape in shapes)


def label(compression: str, powersgd_rank: int) -> str:
    """'powersgd rank 2', 'fp16', 'none'."""
    return f"powersgd rank {powersgd_rank}" if compression == "powersgd" else compression
