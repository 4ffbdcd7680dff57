"""PyTorch's part of `xbench probe` (common.measuring.peaks): matmul rates with torch's own
kernels, and all-reduce times through a PyTorch backend's collectives (gloo or nccl for pt-ddp,
Horovod for hvd-torch)."""
import torch

from xbench.common.measuring.peaks import matmul_record, time_all_reduce, time_matmul
from xbench.common.running.env import cpu_name

SIZE = {"cpu": 2048, "cuda": 8192}  # n of the n x n matmul: large enough to reach the peak


def probe(backend, comm, device, request):
    """Rank 0's probe record (None on the other ranks); `request` as Backend.probe's."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if "matmul" in request:
        if comm.rank != 0:
            return None
        return {"framework": "torch", "framework_version": torch.__version__,
                "device_type": device.type, "device_name": device_name(device),
                "matmul": matmul_rates(device, sync)}
    records = time_all_reduce(comm, lambda size: torch.zeros(size // 4, device=device), sync,
                              request["all_reduce"]["sizes"])
    if records is None:
        return None
    return {"backend": backend.name, "library": backend.details()["collective_library"],
            "device_type": device.type, "all_reduce": records}


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def matmul_rates(device, sync):
    """fp32 (torch's default, no TF32) and bf16, at this process's threads on a CPU; on a GPU
    also fp16, and tf32 and bf16 where the device has them. Not fp16 on a CPU: torch's took 64 s
    for one 2048 x 2048 matmul here (0.3 GFLOP/s, against bf16's 813)."""
    size = SIZE[device.type]
    threads = torch.get_num_threads() if device.type == "cpu" else None
    a, b = (torch.randn(size, size, device=device) for _ in range(2))
    records = [matmul_record("fp32", size, threads, time_matmul(lambda: a @ b, sync))]
    cuda = device.type == "cuda"
    if cuda and torch.cuda.get_device_capability(device) >= (8, 0):
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            records.append(matmul_record("tf32", size, None, time_matmul(lambda: a @ b, sync)))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if (precision == "fp16" and not cuda) or (precision == "bf16" and cuda
                                                  and not torch.cuda.is_bf16_supported()):
            continue
        a16, b16 = a.to(dtype), b.to(dtype)
        records.append(matmul_record(precision, size, threads,
                                     time_matmul(lambda a16=a16, b16=b16: a16 @ b16, sync)))
    return records
