"""PyTorch's backends: the classes the traits table's rows of framework torch name
(common/backends/traits/pytorch.py and horovod.py; `xbench backends` lists them).

Modules here import torch only inside functions that run in a launched worker, so the runner can
list and launch these backends without importing torch.
"""
