"""tf-multiworker: tf.distribute.MultiWorkerMirroredStrategy, one worker process per device, on one
machine (workers on 127.0.0.1 ports) or on a cluster's nodes: TensorFlow's counterpart of DDP.

Each worker reads its own shard of every global batch (as DDP's ranks do), so the datasets go in
through `distribute_datasets_from_function` (no rebatching, no auto-sharding); the strategy's
collectives sum the gradients over the workers in `apply_gradients` (ring on CPU, NCCL on GPU).
TF_CONFIG is built from the launcher's placement and the worker's task index.
"""
import json
import os
import pickle

import numpy as np

from xbench.common.placement import Placement, local_task_index, task_index
from xbench.tf_backend.base import TensorFlowBackend
from xbench.tf_backend.collectives import TensorFlowCollectives


class MultiWorkerMirroredBackend(TensorFlowBackend):
    name = "tf-multiworker"
    collectives_counted = ("TensorFlow's CollectiveReduceV2 ops in the trace: from the last one's "
                           "launch (this worker's gradients ready) to the end of the last")
    batchnorm_statistics = TensorFlowBackend.mirrored_batchnorm
    spans_nodes = True
    launch_scope = "task"

    def processes(self, cell):
        return cell.devices

    def start_processes(self):
        placement, rank = Placement.from_env(), task_index()
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": placement.worker_addresses(self.cell.devices)},
            "task": {"type": "worker", "index": rank}})
        self.comm = MultiWorkerCollectives(rank, self.cell.world)
        return self.comm

    def local_rank(self):
        return local_task_index()

    def make_strategy(self, device_kind):
        import tensorflow as tf
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
            if device_kind == "cuda" else tf.distribute.experimental.CommunicationImplementation.RING)
        self.comm.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=options)
        self.implementation = options.implementation.name
        return self.comm.strategy

    def distribute(self, strategy, make_dataset):
        """Each worker's pipeline already yields its shard at the per-replica batch."""
        return strategy.distribute_datasets_from_function(lambda context: make_dataset())

    def details(self):
        return {"parallelism": "tf.distribute.MultiWorkerMirroredStrategy",
                "collective_implementation": self.implementation,
                "launcher": "one worker per device, TF_CONFIG", "reduction": "all-reduce",
                "collective_library": f"tensorflow {self.implementation.lower()}",
                "reduction_detail": f"MultiWorkerMirroredStrategy's collective all-reduce "
                                    f"({self.implementation.lower()}) in apply_gradients"}


class MultiWorkerCollectives(TensorFlowCollectives):
    """The workers' own collective ops (through the strategy, once it exists): every worker must
    call them in the same order, as the training loop does."""
    strategy = None

    def __init__(self, rank, world):
        self.rank, self.world = rank, world

    def _per_worker(self, value):
        import tensorflow as tf
        return self.strategy.run(lambda: tf.constant(value))

    def barrier(self):
        self.sum(np.zeros(1))

    def sum(self, values):
        import tensorflow as tf
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, self._per_worker(values),
                                    axis=None).numpy()

    def gather(self, value):
        """Pickled, padded as int32 words to the power of two above the longest (so that the
        strategy's gather function is traced for a few shapes, not for every length: each new
        shape is a new trace of a collective), all-gathered, unpickled."""
        data = pickle.dumps(value)
        lengths = self.strategy.gather(self._per_worker(np.array([len(data)], np.int64)),
                                       axis=0).numpy()
        padded = np.zeros(max(4, 1 << (int(lengths.max()) - 1).bit_length()), np.uint8)
        padded[:len(data)] = np.frombuffer(data, np.uint8)
        words = self.strategy.gather(self._per_worker(padded.view(np.int32)[None]), axis=0).numpy()
        return [pickle.loads(words[k].view(np.uint8)[:int(lengths[k])].tobytes())
                for k in range(self.world)]

    def broadcast(self, variables):
        """Nothing to do: the strategy gives every worker worker 0's initial values when it
        creates the variables."""

    def gradients(self, tape, loss, variables):
        return tape.gradient(loss, variables)
