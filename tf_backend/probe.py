"""TensorFlow's part of `xbench probe` (common.measuring.peaks): matmul rates with TensorFlow's own
kernels (in a tf.function, as training runs them), and all-reduce times through tf-multiworker's
collectives."""
import tensorflow as tf

from xbench.common.measuring.peaks import matmul_record, time_all_reduce, time_matmul
from xbench.tf_backend.device import device_name, gpu_capability

SIZE = {"cpu": 2048, "cuda": 8192}  # n of the n x n matmul, as pt_backend.probe


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
    """fp32 (TF32 turned off for it) and bf16, at this process's threads on a CPU; on a GPU also
    fp16, and tf32 and bf16 where the device has them (TensorFlow's default allows TF32); fp16
    on GPUs only, as pt_backend.probe. Each timed call ends by reading one number of the result
    back to the host, so that it waits for the device."""
    size = SIZE[kind]
    threads = tf.config.threading.get_intra_op_parallelism_threads() if kind == "cpu" else None
    modern = kind == "cuda" and gpu_capability() >= (8, 0)
    allowed = tf.config.experimental.tensor_float_32_execution_enabled()
    records = []
    for precision, dtype, tf32 in (("fp32", tf.float32, False), ("tf32", tf.float32, True),
                                   ("bf16", tf.bfloat16, allowed), ("fp16", tf.float16, allowed)):
        if ((precision == "tf32" or (precision == "bf16" and kind == "cuda")) and not modern
                or (precision == "fp16" and kind == "cpu")):
            continue
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        try:
            a, b = (tf.cast(tf.random.normal((size, size)), dtype) for _ in range(2))
            records.append(matmul_record(precision, size, threads,
                                         time_matmul(first_of_product(a, b), lambda: None)))
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(allowed)
    return records


def first_of_product(a, b):
    """A call that runs a @ b in a tf.function and reads the product's first number back to the
    host (so that it waits for the device)."""
    multiply = tf.function(lambda: tf.linalg.matmul(a, b)[0, 0])
    return lambda: multiply().numpy()
