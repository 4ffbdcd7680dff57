"""What a cell computes, apart from how it is parallelised: the data (MNIST, CIFAR-10, Tiny
Shakespeare, a model file's own), the model specs and what is known of a user's model file, and
the knobs that change what is computed or sent (precision, gradient compression, the
faults injected on purpose).

May import: common's errors and machine.
"""
