"""tf-multiworker: tf.distribute.MultiWorkerMirroredStrategy, one worker process per device, on one
machine (workers on 127.0.0.1 ports) or on a cluster's nodes: TensorFlow's counterpart of DDP.

Each worker reads its own shard of every global batch (as DDP's ranks do), so the datasets go in
through `distribute_datasets_from_function` (no rebatching, no auto-sharding); the strategy's
collectives sum the gradients over the workers in `apply_gradients` (ring on CPU, NCCL on GPU).
TF_CONFIG is built from the launcher's placement and the worker's task index.

What crashes a worker now and then ("malloc assertion failure in _int_malloc", "munmap_chunk():
invalid pointer", "free(): invalid size", a segfault) is TensorFlow's profiler, which the loop's
tracer stops after each traced step (tf_backend/trace.py): a core dump of a rank shows it dying in
tsl's TraceMeRecorder::Consume (SplitEventTracker::FindStartAndMerge). For a profiler activity
that ends on another thread than began it, Consume keeps a pointer to the end's event among one
thread's events, copies those elsewhere as its vector of threads grows (libstdc++'s deque moves
are not noexcept, so the vector copies) and frees the originals, then writes the start's name
through the pointer into freed memory; whether a thread's events come before the other's is the
order of a hash map, so it happens at random. Such activities are
`CollectiveExecutor::CompleteParams` in a worker that is not the group leader: each collective
asks the leader for its parameters and ends on the RPC's thread (2 a step of the small model on
2 workers; none in the leader). The step's own cannot be kept out of the step's trace; the
tracer's barrier, which it passes once the profiler has started, goes through the coordination
service's key-value store (MultiWorkerCollectives.barrier), which starts no activity, so that it
adds none (a third of them, as the sum it was). A crash that still comes is a crash: the cell
runs again (the `retries` setting), on one machine and under Slurm alike.
"""
import base64
import json
import os
import pickle
import sys

from xbench.common.running.placement import Placement, local_task_index, task_index
from xbench.tf_backend.base import TensorFlowBackend
from xbench.tf_backend.collectives import TensorFlowCollectives

# How long worker 0, whose process holds the coordination service, waits at the end of a cell
# for the others to say they no longer need it (they need milliseconds).
LEAVE_WAIT_MS = 60_000

class MultiWorkerMirroredBackend(TensorFlowBackend):
    name = "tf-multiworker"

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
        implementation = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=implementation.NCCL if device_kind == "cuda" else implementation.RING,
            bytes_per_pack=self.cell.bucket_bytes)  # 0: TensorFlow's own packing
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
    """The workers' own collective ops (sum through the strategy, once it exists; barrier,
    gather and leave through the coordination service): every worker must call them in the same
    order, as the training loop does."""
    strategy = None

    def __init__(self, rank, world):
        self.rank, self.world, self.gathers = rank, world, 0

    def _per_worker(self, value):
        import tensorflow as tf
        return self.strategy.run(lambda: tf.constant(value))

    def barrier(self):
        """A gather of nothing: through the coordination service, not a collective, so that the
        tracer's barrier adds no activity to the profiler that ends on another thread (the
        module's docstring says why that matters)."""
        self.gather(None)

    def leave(self):
        """Through the coordination service, not a collective: a worker past the last collective
        barrier could exit while another still fetched its part of it ("Collective ops is
        aborted by: Socket closed", seen in tf-multiworker cells on a loaded machine). Every
        worker says it has arrived and waits for the others; then every worker but worker 0
        says it is past the wait, and worker 0, whose process holds the service, waits for
        that (at most LEAVE_WAIT_MS), so it leaves last. Once here a worker's collectives have
        all returned: a service it can no longer reach (seen once under load: "Connection reset
        by peer" on the last word) leaves nothing of the cell undone, so it says so and leaves."""
        import tensorflow as tf
        from tensorflow.python.eager import context
        store = context.context()
        try:
            store.set_config_key_value(f"xbench/leave/arrived/{self.rank}", "1")
            for rank in range(self.world):
                store.get_config_key_value(f"xbench/leave/arrived/{rank}")
            if self.rank:
                store.set_config_key_value(f"xbench/leave/past/{self.rank}", "1")
                return
            for rank in range(1, self.world):
                store.get_config_key_value(f"xbench/leave/past/{rank}", LEAVE_WAIT_MS)
        except tf.errors.OpError as lost:
            print(f"xbench worker {os.getpid()}: left without the other workers' word "
                  f"({type(lost).__name__}); its collectives had all returned", file=sys.stderr)

    def sum(self, values):
        import tensorflow as tf
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, self._per_worker(values),
                                    axis=None).numpy()

    def gather(self, value):
        """Through the coordination service's key-value store, the cluster's side channel for
        small data, not a collective (a CollectiveGatherV2, traced anew for each shape, was seen
        in the heap corruption the module's docstring explains). Each value is pickled under
        a key of its own; every worker reads every worker's key,
        waiting until it is set (or the cell's timeout ends the cell), then drops its key of the
        gather before, which every worker has read by then (they set this one after it)."""
        from tensorflow.python.eager import context
        store = context.context()
        self.gathers += 1
        store.set_config_key_value(self._key(self.gathers, self.rank),
                                   base64.b64encode(pickle.dumps(value)).decode("ascii"))
        values = [pickle.loads(base64.b64decode(store.get_config_key_value(self._key(
            self.gathers, k)))) for k in range(self.world)]
        if self.gathers > 1:
            store.delete_config_key_value(self._key(self.gathers - 1, self.rank))
        return values

    @staticmethod
    def _key(gather: int, rank: int) -> str:
        return f"xbench/gather/{gather}/{rank}"

    def broadcast(self, variables):
        """Nothing to do: the strategy gives every worker worker 0's initial values when it
        creates the variables."""

    def reduce(self, gradients):
        """As they are: the strategy's all-reduce crosses them."""
        return gradients
