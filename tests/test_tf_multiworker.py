"""tf-multiworker's own traffic between its workers (tf_backend/multiworker.py): the barrier, as
the gather and the leave, goes through the coordination service's key-value store and launches no
collective: the tracer passes it inside a traced window, where a collective's profiler activity,
ended on another thread, is what TensorFlow's profiler corrupts the heap on when it stops (the
module's docstring)."""
import threading

import pytest
from tensorflow.python.eager import context

from xbench.tf_backend.multiworker import MultiWorkerCollectives


class Store:
    """The coordination service's key-value store the workers share: a read waits until the key
    is set, as the service's does."""

    def __init__(self):
        self.values, self.changed = {}, threading.Condition()

    def set_config_key_value(self, key, value):
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def get_config_key_value(self, key, timeout_in_ms=None):
        with self.changed:
            assert self.changed.wait_for(lambda: key in self.values, timeout=60), key
            return self.values[key]

    def delete_config_key_value(self, key):
        with self.changed:
            del self.values[key]


class NoCollectives:
    """A strategy whose every use fails the test: a barrier must launch no collective."""

    def __getattr__(self, name):
        raise AssertionError(f"the barrier used the strategy's {name}")


@pytest.mark.parametrize("world", [2, 3])
def test_a_barrier_waits_for_every_worker_through_the_store_alone(world, monkeypatch):
    """Each worker, a thread here, passes three barriers: none leaves a barrier before every
    worker has come to it, none touches the strategy, and the keys of the barriers before the
    last are dropped."""
    store, lock, happened = Store(), threading.Lock(), []
    monkeypatch.setattr(context, "context", lambda: store)

    def work(rank):
        collectives = MultiWorkerCollectives(rank, world)
        collectives.strategy = NoCollectives()
        for barrier in range(3):
            with lock:
                happened.append(("came", barrier, rank))
            collectives.barrier()
            with lock:
                happened.append(("left", barrier, rank))
    threads = [threading.Thread(target=work, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(happened) == 2 * 3 * world
    for barrier in range(3):
        came = [i for i, (what, b, _) in enumerate(happened) if (what, b) == ("came", barrier)]
        left = [i for i, (what, b, _) in enumerate(happened) if (what, b) == ("left", barrier)]
        assert len(came) == len(left) == world and max(came) < min(left)
    assert len(store.values) == world  # the last barrier's keys alone
