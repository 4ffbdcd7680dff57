"""tf-mirrored: tf.distribute.MirroredStrategy, one process driving N replicas.

On GPUs the replicas are N GPUs and gradients are all-reduced with NCCL. On a CPU-only machine
they are N logical CPU devices of the one physical CPU (sharing this process's thread pools);
NcclAllReduce has no CPU kernel there, so gradients are summed with ReductionToOneDevice
(reduce on the first device, copy back to the others). One device is the plain device (CPU or
GPU) under TensorFlow's default strategy, with no MirroredStrategy.
"""
from tf_backend.base import TensorFlowBackend


class MirroredBackend(TensorFlowBackend):
    name = "tf-mirrored"

    def make_strategy(self, device_kind):
        import tensorflow as tf
        replicas = self.cell.devices
        if replicas == 1:
            self.described = {"parallelism": "none (one device, TensorFlow's default strategy)",
                              "cross_device_ops": None}
            return tf.distribute.get_strategy()
        if device_kind == "cuda":
            devices = [f"/gpu:{i}" for i in range(replicas)]
            cross_device_ops = tf.distribute.NcclAllReduce()
        else:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
            devices = [f"/cpu:{i}" for i in range(replicas)]
            cross_device_ops = tf.distribute.ReductionToOneDevice()
        self.described = {"parallelism": "tf.distribute.MirroredStrategy",
                          "cross_device_ops": type(cross_device_ops).__name__}
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)

    def details(self):
        return self.described
