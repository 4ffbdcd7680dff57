"""How the processes of one cell talk: one interface, and its one-process implementation.

Each framework or library has its own class in its backend package, each with its own name:
`pt_backend.torchrun.TorchDistributedCollectives`, `pt_backend.hvd.HorovodTorchCollectives`, the
TensorFlow ones under `tf_backend.collectives.TensorFlowCollectives` (which adds what only a
TensorFlow loop needs), and `jax_backend.multiprocess.JaxProcesses`.
"""
import abc
from typing import Any


class Collectives(abc.ABC):
    """What a training loop asks of the processes of its cell. Rank 0 reports the measurement."""

    rank: int = 0
    world: int = 1
    # Whether `sum` is the collective the cell's gradients cross in between processes (the same
    # library, process group and link), so that a step's collectives can be replayed through it
    # alone (common.measuring.alone); False where the gradients cross inside a compiled step or
    # a strategy's own ops.
    carries_gradients: bool = False

    @abc.abstractmethod
    def barrier(self) -> None:
        """Wait until every process has got here."""

    def leave(self) -> None:
        """Wait until every process has got here, at the end of the cell: no process may leave
        while another still needs it (a barrier, unless a library's own can let one leave too
        soon)."""
        self.barrier()

    @abc.abstractmethod
    def gather(self, value: Any) -> list[Any]:
        """Every process's `value` (a picklable Python object), as a list in rank order."""

    @abc.abstractmethod
    def sum(self, values: Any) -> Any:
        """A framework tensor (or numpy array) summed over the processes, in the same type."""

    def sum_all(self, buffers: list) -> None:
        """Every buffer summed over the processes in place, launched together as a step's
        gradients are (so that the library queues, or fuses, them as it does then), returning
        when all are done: a step's collectives replayed (common.measuring.alone). One after
        the other where the library launches nothing asynchronously."""
        for buffer in buffers:
            self.sum(buffer)


class OneProcess(Collectives):
    """A cell that runs in one process (pt-dp, tf-mirrored, the single-device references):
    there is no one to wait for or to exchange with."""

    def barrier(self) -> None:
        pass

    def gather(self, value: Any) -> list[Any]:
        return [value]

    def sum(self, values: Any) -> Any:
        return values
