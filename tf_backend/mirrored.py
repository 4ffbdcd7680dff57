"""tf-mirrored: tf.distribute.MirroredStrategy, one process driving N replicas.

On GPUs the replicas are N GPUs and gradients are all-reduced with NCCL. On a CPU-only machine
they are N logical CPU devices of the one physical CPU (sharing this process's thread pools);
NcclAllReduce has no CPU kernel there, so gradients are summed with ReductionToOneDevice
(reduce on the first device, copy back to the others). One device is the plain device (CPU or
GPU) under TensorFlow's default strategy, with no MirroredStrategy: that is the 1-device baseline a
user compares 2 and 4 devices against (a one-device MirroredStrategy doubled the step time of the
small model on CPU).
"""
from tf_backend.base import TensorFlowBackend


class MirroredBackend(TensorFlowBackend):
    name = "tf-mirrored"

    def train(self, job):
        import tensorflow as tf

        from tf_backend import train as loop

        loop.set_threads(job.threads)
        replicas = job.cell.devices
        on_gpus = loop.device_kind(job.cell.device, replicas) == "cuda"
        if on_gpus:
            tf.config.set_visible_devices(tf.config.list_physical_devices("GPU")[:replicas], "GPU")
        if replicas == 1:  # the plain device: the baseline that 2 and 4 devices must beat
            return loop.train(job, tf.distribute.get_strategy(), loop.Collectives(),
                              {"parallelism": "none (one device, TensorFlow's default strategy)",
                               "cross_device_ops": None})
        if on_gpus:
            devices = [f"/gpu:{i}" for i in range(replicas)]
            cross_device_ops = tf.distribute.NcclAllReduce()
        else:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
            devices = [f"/cpu:{i}" for i in range(replicas)]
            cross_device_ops = tf.distribute.ReductionToOneDevice()
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)
        return loop.train(job, strategy, loop.Collectives(), {
            "parallelism": "tf.distribute.MirroredStrategy",
            "cross_device_ops": type(cross_device_ops).__name__})
