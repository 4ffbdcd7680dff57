"""hvd-tf: Horovod over TensorFlow/Keras 3, N processes started by horovodrun.

The Keras model of tf-mirrored in the same custom loop (under tf.function), one replica per
process, gradients summed by Horovod's all-reduce of each (as `hvd.DistributedGradientTape` sums
them, but for any micro-batch's gradients). Never `horovod.tensorflow.keras`: with
Keras 3 its DistributedOptimizer runs without error but does not average, and replicas silently
diverge. Horovod's TensorFlow ops want the `tf.Variable` under each Keras variable (`.value`).
"""

from xbench.common.backends import horovod_support
from xbench.tf_backend.base import TensorFlowBackend
from xbench.tf_backend.collectives import TensorFlowCollectives


class HorovodTensorFlowBackend(TensorFlowBackend):
    name = "hvd-tf"

    def start_processes(self):
        import horovod.tensorflow as hvd
        import tensorflow as tf
        horovod_support.init(hvd, self.cell.bucket_bytes)
        self.hvd = hvd
        return HorovodTensorFlowCollectives(
            hvd, tf, horovod_support.compressor(hvd, self.cell.compression), self.cell.bucket_mb)

    def local_rank(self):
        return self.hvd.local_rank()

    def details(self):
        return {"parallelism": "hvd.allreduce of each gradient",
                **horovod_support.details(self.hvd, self.cell.compression)}


class HorovodTensorFlowCollectives(horovod_support.HorovodGather, TensorFlowCollectives):
    carries_gradients = True  # hvd.allreduce: what `reduce` crosses the gradients in

    def __init__(self, hvd, tf, compression, bucket_mb: float):
        super().__init__(hvd)
        self.tf, self.compression, self.bucket_mb = tf, compression, bucket_mb

    def barrier(self):
        """horovod.tensorflow has no barrier: a tiny all-reduce waits for every process."""
        self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum)

    def sum(self, array):
        return self.hvd.allreduce(self.tf.constant(array), op=self.hvd.Sum).numpy()

    def sum_all(self, buffers):
        """As the step crosses its gradients: `reduce`, inside a tf.function (traced on the first
        call, a replay's warm-up), where Horovod fuses them as it does in the step's."""
        if not hasattr(self, "_reduce_in_graph"):
            self._reduce_in_graph = self.tf.function(self.reduce)
        self._reduce_in_graph(list(buffers))

    def broadcast(self, variables):
        self.hvd.broadcast_variables([v.value for v in variables], root_rank=0)

    def reduce(self, gradients):
        """Summed, not averaged: each replica's loss is already divided by the global batch.
        One Horovod all-reduce per gradient, as DistributedGradientTape launches them (Horovod
        fuses them), so a micro-batch's can be launched without a tape; with the cell's
        bucket_mb, one grouped all-reduce per bucket, launched whole once its gradients are all
        ready, as hvd-torch's DistributedOptimizer groups them (horovod_support.buckets); with
        one process, none (DistributedGradientTape reduces nothing at size 1 either)."""
        if self.hvd.size() == 1:
            return list(gradients)
        if not self.bucket_mb:
            return [self.hvd.allreduce(gradient, op=self.hvd.Sum, compression=self.compression)
                    for gradient in gradients]
        reduced = list(gradients)
        sizes = [gradient.shape.num_elements() * gradient.dtype.size for gradient in gradients]
        for group in horovod_support.buckets(sizes, self.bucket_mb):
            summed = self.hvd.grouped_allreduce([gradients[index] for index in group],
                                                op=self.hvd.Sum, compression=self.compression)
            for index, value in zip(group, summed, strict=True):
                reduced[index] = value
        return reduced
