"""What a TensorFlow loop asks of its processes besides common.backends.collectives: a start from
rank 0's variables, and gradients combined across processes."""
import abc

from xbench.common.backends.collectives import Collectives, OneProcess


class TensorFlowCollectives(Collectives):
    """The TensorFlow-only operations, declared once (hvd-tf implements them with Horovod)."""

    @abc.abstractmethod
    def broadcast(self, variables) -> None:
        """Make every process start from rank 0's values of `variables` (Keras variables)."""

    @abc.abstractmethod
    def reduce(self, gradients: list) -> list:
        """This replica's `gradients` summed over the processes where the library, not the
        strategy, crosses them (the loss is already divided by the global batch). Keras'
        optimizer then sums them over the strategy's replicas."""


class OneTensorFlowProcess(OneProcess, TensorFlowCollectives):
    """One process (tf-mirrored, whose replicas the strategy itself keeps in step)."""

    def broadcast(self, variables) -> None:
        pass

    def reduce(self, gradients: list) -> list:
        return gradients
