"""tf-mirrored: tf.distribute.MirroredStrategy, one process driving N replicas.

On GPUs the replicas are N GPUs and gradients are all-reduced with NCCL. On a CPU-only machine
they are N logical CPU devices of the one physical CPU (sharing this process's thread pools);
NcclAllReduce has no CPU kernel there, so gradients are summed with ReductionToOneDevice
(reduce on the first device, copy back to the others: not a ring). One device is a one-device
MirroredStrategy, the same machinery as N devices: tf-single is TensorFlow without any strategy.
"""
from xbench.tf_backend.base import TensorFlowBackend


class MirroredBackend(TensorFlowBackend):
    name = "tf-mirrored"

    def make_strategy(self, device_kind):
        import tensorflow as tf
        replicas = self.cell.devices
        if device_kind == "cuda":
            devices = [f"/gpu:{i}" for i in range(replicas)]
            cross_device_ops = tf.distribute.NcclAllReduce()
            reduction = "all-reduce", "NcclAllReduce over the GPUs"
        else:
            if replicas > 1:
                cpu = tf.config.list_physical_devices("CPU")[0]
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
            devices = [f"/cpu:{i}" for i in range(replicas)]
            cross_device_ops = tf.distribute.ReductionToOneDevice()
            reduction = ("reduce-to-one", "ReductionToOneDevice: gradients summed on the first "
                         "logical CPU device, then copied to the others (not a ring)")
        if replicas == 1:
            reduction = "none", "MirroredStrategy over one device: a reduction over one replica"
        self.described = {"parallelism": "tf.distribute.MirroredStrategy",
                          "cross_device_ops": type(cross_device_ops).__name__,
                          "reduction": reduction[0], "reduction_detail": reduction[1]}
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)

    def details(self):
        return self.described
