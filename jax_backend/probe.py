"""JAX's part of `xbench probe` (common.measuring.peaks): matmul rates with XLA's own kernels
(jax.jit, as training runs them), and all-reduce times across jax-multiprocess's processes
(its collectives' sum: an all-reduce compiled over a mesh of every process's device; each timed
call also places the buffer from the host and reads the sum back, which the other frameworks'
probes, timing a tensor already on the device, do not)."""
import os

import jax
import jax.numpy as jnp
import numpy as np

from xbench.common.measuring.peaks import matmul_record, time_all_reduce, time_matmul
from xbench.common.running.env import cpu_name
from xbench.jax_backend.mesh import MATMUL_PRECISION, has_tf32

SIZE = {"cpu": 2048, "cuda": 8192}  # n of the n x n matmul, as pt_backend.probe


def probe(backend, comm, kind, request):
    """Rank 0's probe record (None on the other ranks); `request` as Backend.probe's."""
    devices = backend.mesh_devices(kind)
    if "matmul" in request:
        if comm.rank != 0:
            return None
        return {"framework": "jax", "framework_version": jax.__version__, "device_type": kind,
                "device_name": devices[0].device_kind if kind == "cuda" else cpu_name(),
                "matmul": matmul_rates(kind, devices[0])}
    records = time_all_reduce(comm, lambda size: np.zeros(size // 4, np.float32),
                              lambda: None, request["all_reduce"]["sizes"])
    if records is None:
        return None
    return {"backend": backend.name, "library": backend.details()["collective_library"],
            "device_type": kind, "all_reduce": records}


def matmul_rates(kind, device):
    """fp32 (XLA's highest precision: no TF32) and bf16, at this process's cores on a CPU; on a
    GPU also tf32 (where the device has it) and fp16. Each timed call waits for its result."""
    size = SIZE[kind]
    threads = len(os.sched_getaffinity(0)) if kind == "cpu" else None
    a, b = (jax.device_put(np.random.default_rng(k).standard_normal((size, size), np.float32),
                           device) for k in range(2))
    records = []
    for precision, dtype, math in (("fp32", jnp.float32, MATMUL_PRECISION["fp32"]),
                                   ("tf32", jnp.float32, MATMUL_PRECISION["tf32"]),
                                   ("bf16", jnp.bfloat16, "default"),
                                   ("fp16", jnp.float16, "default")):
        if ((precision == "tf32" and not has_tf32(kind, device))
                or (precision == "fp16" and kind == "cpu")):
            continue
        multiply = jax.jit(lambda x, y, dtype=dtype, math=math: jnp.matmul(
            x.astype(dtype), y.astype(dtype), precision=math))
        records.append(matmul_record(precision, size, threads,
                                     time_matmul(lambda m=multiply: m(a, b).block_until_ready(),
                                                 lambda: None)))
    return records
