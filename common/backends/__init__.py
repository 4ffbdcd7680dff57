"""The backends: the registry of names, each backend's traits (readable without a framework),
the contract a backend's ranks follow, how a cell's processes talk (collectives), and what the
Horovod backends share.

May import: workload (and, for type annotations only, the rooms above).
"""
