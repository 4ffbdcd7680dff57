"""The CUDA code paths of the PyTorch backends, run on this CPU machine with torch.cuda mocked (as
Lightning tests its strategies): which device each rank takes, which GPUs DataParallel spans, which
process group DDP joins, what DataParallel sends each step, what memory is read per GPU. A CUDA-only
mistake in them fails here, in CI, before it reaches a GPU."""
import pytest
import torch

from xbench.common.cell import Cell
from xbench.common.errors import Unsupported
from xbench.common.models import gradient_bytes
from xbench.pt_backend.ddp import DistributedDataParallelBackend
from xbench.pt_backend.dp import DataParallelBackend
from xbench.pt_backend.single import SingleDeviceTorchBackend


def cell(backend, devices, device="cuda"):
    return Cell(grid="cuda", backend=backend, model="small", multiple=1, batch=128,
                devices=devices, epochs=2, batch_mode="global", seed=0, max_train_samples=512,
                data="synthetic", device=device, timeout=60)


@pytest.fixture
def gpus(monkeypatch):
    """A machine whose torch sees 4 GPUs; returns the devices set_device was given."""
    chosen = []
    monkeypatch.setattr(torch, "set_num_threads", lambda count: None)  # the test process's own
    monkeypatch.setattr(torch, "set_num_interop_threads", lambda count: None)  # settable once
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


def test_pt_dp_takes_the_first_gpu_and_spans_as_many_as_the_cell_has(gpus, monkeypatch):
    backend = DataParallelBackend()
    comm, device = backend.set_up(cell("pt-dp", 2), threads_per_device=1)
    assert device == torch.device("cuda", 0) and gpus == [device] and comm.world == 1
    spans = []
    monkeypatch.setattr(torch.nn, "DataParallel",
                        lambda model, device_ids: spans.append(device_ids) or model)
    backend.wrap_model(torch.nn.Linear(2, 2), device)
    assert spans == [[0, 1]]
    assert backend.details()["reduction"] == "reduce-to-one"
    sent = {item["what"]: item["bytes"] for item in backend.traffic(cell("pt-dp", 2), "")}
    assert sent == {"parameters and buffers replicated from GPU 0": 6 * 4,  # the Linear(2, 2)
                    "inputs scattered from GPU 0": 64 * 28 * 28 * 4,
                    "outputs gathered on GPU 0": 64 * 10 * 4,
                    "gradients reduced onto GPU 0": gradient_bytes("small")}


def test_each_ddp_rank_takes_its_local_gpu_and_joins_nccl(gpus, monkeypatch):
    import torch.distributed as dist
    groups = []
    monkeypatch.setattr(dist, "init_process_group", groups.append)
    monkeypatch.setattr(dist, "get_rank", lambda: 5)
    monkeypatch.setattr(dist, "get_world_size", lambda: 8)
    monkeypatch.setenv("LOCAL_RANK", "1")
    comm, device = DistributedDataParallelBackend().set_up(cell("pt-ddp", 4), 1)
    assert groups == ["nccl"] and device == torch.device("cuda", 1) and gpus == [device]
    assert (comm.rank, comm.world) == (5, 8)


def test_a_cell_asking_for_more_gpus_than_there_are_is_unsupported(gpus):
    with pytest.raises(Unsupported, match="needs 8 CUDA devices; torch sees 4"):
        DataParallelBackend().set_up(cell("pt-dp", 8), 1)
    with pytest.raises(Unsupported, match="single-device reference"):
        SingleDeviceTorchBackend().set_up(cell("pt-single", 2), 1)


def test_no_gpu_and_a_cuda_cell_is_unsupported_not_silently_cpu(gpus, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(Unsupported, match="sees no CUDA device"):
        DataParallelBackend().set_up(cell("pt-dp", 1), 1)
    assert DataParallelBackend().set_up(cell("pt-dp", 1, "auto"), 1)[1].type == "cpu"


def test_peak_memory_is_read_per_gpu_that_was_used(monkeypatch):
    from xbench.pt_backend.train import TorchLoop
    peaks = {0: 3 * 2**30, 1: 2 * 2**30, 2: 0, 3: 0}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", peaks.__getitem__)
    loop = TorchLoop.__new__(TorchLoop)
    loop.cuda = True
    assert loop.peak_memory() == [3 * 2**30, 2 * 2**30]
