"""tf-single: TensorFlow with no parallel wrapper on one device (its default strategy): the
reference that tells what tf-mirrored and hvd-tf cost at one device."""
from xbench.tf_backend.base import TensorFlowBackend


class SingleDeviceTensorFlowBackend(TensorFlowBackend):
    name = "tf-single"

    def details(self):
        return {"parallelism": "none (one device, TensorFlow's default strategy)",
                "reduction": "none", "reduction_detail": "no parallel wrapper"}
