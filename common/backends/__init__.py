"""The backends: the registry of names, each backend's traits (readable without a framework),
how a cell's processes start (launch_scopes), the contract a backend's ranks follow, how a cell's
processes talk (collectives), what the Horovod backends share, and each framework's building of
a user's model file (model_files).

May import: workload (and, for type annotations only, the rooms above).
"""
