"""How the processes of one cell talk, in the one shape both training loops use.

`SingleProcess` is the cell that runs in one process (pt-dp, tf-mirrored): nothing to exchange.
Multi-process backends (pt-ddp, Horovod) subclass it with their framework's collectives.
"""


class SingleProcess:
    rank, world = 0, 1

    def barrier(self):
        """Wait until every process has got here."""

    def gather(self, value):
        """Every process's `value` (a picklable Python object), as a list in rank order."""
        return [value]

    def sum(self, values):
        """A framework tensor or numpy array, summed over the processes."""
        return values
