"""PyTorch backends: pt-dp (DataParallel), pt-ddp (DistributedDataParallel), hvd-torch (Horovod).

Modules here import torch only inside functions that run in a launched worker, so the runner can
list and launch these backends without importing torch.
"""
