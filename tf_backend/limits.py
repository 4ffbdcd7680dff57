"""TensorFlow's part of `xbench probe` (common.limits): matmul rates with TensorFlow's own kernels
(in a tf.function, as training runs them), and all-reduce times through tf-multiworker's
collectives."""
import tensorflow as tf

from xbench.common.limits import matmul_record, time_all_reduce, time_matmul
from xbench.tf_backend.train import device_name

SIZE = {"cpu": 2048, "cuda": 8192}  # n of the n x n matmul, as pt_backend.limits


def probe(backend, comm, kind, request):
    """Rank 0's probe record (None on the other ranks); `request` as Backend.probe's."""
    if "matmul" in request:
        if comm.rank != 0:
            return None
        return {"framework": "tensorflow", "framework_version": tf.__version__,
                "device_type": kind, "device_name": device_name(kind),
                "matmul": matmul_rates(kind)}
    records = time_all_reduce(comm, lambda size: tf.zeros(size // 4), lambda: None,
                              request["all_reduce"]["sizes"])
    if records is None:
        return None
    return {"backend": backend.name, "library": backend.details()["collective_library"],
            "device_type": kind, "all_reduce": records}


def matmul_rates(kind):
    """fp32 (on GPUs TensorFlow's default, which uses TF32 where the device has it), and bf16 on
    GPUs that have it. Each timed call ends by reading one number of the result back to the host,
    so that it waits for the device."""
    size = SIZE[kind]
    records = []
    for precision, dtype in (("fp32", tf.float32), ("bf16", tf.bfloat16)):
        if precision == "bf16" and (kind == "cpu" or not _has_bf16()):
            continue
        a, b = (tf.cast(tf.random.normal((size, size)), dtype) for _ in range(2))
        multiply = tf.function(lambda: tf.linalg.matmul(a, b)[0, 0])
        threads = tf.config.threading.get_intra_op_parallelism_threads() if kind == "cpu" else None
        records.append(matmul_record(precision if kind == "cpu" or precision == "bf16"
                                     else "fp32 (TF32 allowed)" if _has_tf32() else "fp32",
                                     size, threads,
                                     time_matmul(lambda: multiply().numpy(), lambda: None)))
    return records


def _capability():
    gpu = tf.config.get_visible_devices("GPU")[0]
    return tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))


def _has_tf32():
    return tf.config.experimental.tensor_float_32_execution_enabled() and _capability() >= (8, 0)


def _has_bf16():
    return _capability() >= (8, 0)
