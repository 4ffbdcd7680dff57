"""What the two TensorFlow backends have in common (kept free of a TensorFlow import at module level)."""
from common.backend import Backend


class TensorFlowBackend(Backend):
    framework = "tensorflow"
    requires = ("tensorflow",)
    install_hint = ("install TensorFlow with `make setup`, or `pip install -e '.[tf]'` into the "
                    "environment (the CPU wheel, tensorflow-cpu)")

    def is_out_of_memory(self, error):
        from tf_backend.train import is_out_of_memory
        return is_out_of_memory(error)
