"""What TensorFlow runs on here: the float32 math it may use (TF32 or not), the device's name
and capability, and its out-of-memory error."""
import tensorflow as tf

from xbench.common.running.env import cpu_name


def use_float32_math(precision: str) -> None:
    """TF32 off (in matmuls and convolutions alike) for fp32, on for tf32; under the others
    TensorFlow's default for what stays float32."""
    if precision in ("fp32", "tf32"):
        tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")


def math_allowed(kind) -> dict[str, str]:
    """The precision TensorFlow lets float32 matmuls and convolutions run in here: TF32 in both
    where the GPU has it (compute capability 8.0 on) and TensorFlow allows it (its default),
    else fp32."""
    tf32 = (kind == "cuda" and tf.config.experimental.tensor_float_32_execution_enabled()
            and gpu_capability() >= (8, 0))
    return dict.fromkeys(("matmul", "convolution"), "tf32" if tf32 else "fp32")


def gpu_capability() -> tuple[int, int]:
    """The first visible GPU's compute capability."""
    gpu = tf.config.get_visible_devices("GPU")[0]
    return tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))


def device_name(kind):
    """The first visible GPU's name, or the CPU's."""
    if kind == "cuda":
        gpu = tf.config.get_visible_devices("GPU")[0]
        return tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
    return cpu_name()


def is_out_of_memory(error):
    return isinstance(error, (MemoryError, tf.errors.ResourceExhaustedError))
