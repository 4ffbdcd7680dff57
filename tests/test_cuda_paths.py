"""The CUDA code paths of the PyTorch backends, run on this CPU machine with torch.cuda mocked (as
Lightning tests its strategies): which device each rank takes, which GPUs DataParallel spans, which
process group DDP joins, what DataParallel sends each step, what memory is read per GPU. A CUDA-only
mistake in them fails here, in CI, before it reaches a GPU."""
import pytest
import torch

from xbench.common.errors import Unsupported
from xbench.common.grids.cell import Cell
from xbench.common.workload.models import MODELS
from xbench.pt_backend.ddp import DistributedDataParallelBackend
from xbench.pt_backend.dp import DataParallelBackend
from xbench.pt_backend.single import SingleDeviceTorchBackend
from xbench.reports.step_model.utilisation import against_limits


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
    sent = {item["what"]: item["bytes"]
            for item in backend.traffic(cell("pt-dp", 2), MODELS["small"], "")}
    assert sent == {"parameters and buffers replicated from GPU 0": 6 * 4,  # the Linear(2, 2)
                    "inputs scattered from GPU 0": 64 * 28 * 28 * 4,
                    "outputs gathered on GPU 0": 64 * 10 * 4,
                    "gradients reduced onto GPU 0": MODELS["small"].gradient_bytes()}


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


class FakeEvent:
    """torch.cuda.Event on a fake GPU whose clock is `FakeEvent.now` (ms): where a recorded
    event lands on the device's timeline."""
    now = 0.0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self):
        self.at = FakeEvent.now

    def elapsed_time(self, end):
        return end.at - self.at


def test_on_a_gpu_every_part_is_timed_with_cuda_events(monkeypatch):
    """The loop's moments on a GPU are CUDA events (device time, no host synchronisation), read
    once the epoch is over: the parts come out in the device's seconds."""
    from xbench.common.measuring.attribution import partition
    from xbench.common.measuring.collective_clock import CollectiveClock
    from xbench.common.measuring.step_marks import StepMarks
    from xbench.pt_backend.train import TorchLoop
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    loop = TorchLoop.__new__(TorchLoop)
    loop.cuda = True
    marks, clock = StepMarks(*loop.step_clock()), CollectiveClock(*loop.step_clock())
    marks.start_epoch()
    for part, at in (("begin", 1.0), ("input", 3.0), ("forward", 8.0), ("launch", 15.0),
                     ("complete", 18.0), ("backward", 19.0), ("done", 19.0),
                     ("optimizer", 22.0), ("end", 23.0)):
        FakeEvent.now = at  # milliseconds on the device
        if part == "begin":
            marks.begin()
        elif part == "launch":
            clock.ready(1024)
            op = clock.launch()
        elif part == "complete":  # recorded on the stream the collective's future completes on
            clock.complete(op)
        elif part == "done":
            clock.done()
        elif part == "end":
            marks.collective(*clock.take())
            marks.end()
        else:
            marks.mark(part)
    [step] = marks.steps()
    assert (step.start, step.end) == pytest.approx((0.001, 0.023))
    parts = partition(step, latest_ready=None)
    assert parts["input"] == pytest.approx(0.002) and parts["forward"] == pytest.approx(0.005)
    assert parts["backward"] == pytest.approx(0.007)  # 8..15 ms, then the all-reduce to 19
    assert parts["communication"] == pytest.approx(0.004) and parts["optimizer"] == pytest.approx(
        0.003)
    assert step.collective_bytes == 1024
    assert [span[:2] for span in step.collectives] == [pytest.approx((0.015, 0.018))]
    assert step.gradients == [(pytest.approx(0.015), 1024)]


@pytest.mark.parametrize("compression, value_bytes", [("none", 4), ("fp16", 2)])
def test_ddp_times_each_bucket_from_launch_to_its_futures_completion(compression, value_bytes):
    """The gradients' hooks tell the clock when each is ready and the bytes it sends (float32,
    or 16 bits under fp16 compression); DDP's communication hook, wrapped, tells when each
    bucket's collective was launched and when its future completed; backward's return ends the
    wait."""
    import dataclasses
    import types

    from xbench.common.measuring.collective_clock import CollectiveClock
    moments = iter([1.0, 2.0, 2.5, 4.0, 5.0])
    clock = CollectiveClock(stamp=lambda: next(moments))
    model = torch.nn.Linear(3, 2)
    backend = DistributedDataParallelBackend()
    backend.cell = dataclasses.replace(cell("pt-ddp", 2, "cpu"), compression=compression)
    backend.watch_collectives(model, model, None, clock)
    model(torch.ones(4, 3)).sum().backward()  # 1.0, 2.0: bias, then weight ready
    future = torch.futures.Future()
    bucket = types.SimpleNamespace(buffer=lambda: torch.zeros(3 * 2 + 2))  # its flat gradients
    reduced = backend.timed(lambda state, bucket: future)(None, bucket)  # 2.5: launched
    future.set_result(torch.ones(2))  # 4.0: completed, in the future's callback
    assert reduced.wait().tolist() == [1.0, 1.0]
    backend.wait_for_gradients(None, clock)  # 5.0
    sent = (3 * 2 + 2) * value_bytes
    assert clock.take() == (2.0, 5.0, [(2.5, 4.0, sent, False)], sent,
                            [(1.0, 2 * value_bytes), (2.0, 3 * 2 * value_bytes)], [])


# --- MFU on a GPU: the peak of the math the framework ran ---------------------------------------

H100 = "NVIDIA H100 80GB HBM3"


def test_the_row_says_which_math_each_framework_allowed_on_an_h100(monkeypatch):
    """PyTorch allows TF32 in cuDNN's convolutions, not in matmuls (its defaults); TensorFlow in
    both; neither on a GPU before compute capability 8.0, nor on a CPU."""
    import torch

    from xbench.pt_backend.train import math_allowed
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert math_allowed(torch.device("cuda", 0)) == {"matmul": "fp32", "convolution": "tf32"}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    assert math_allowed(torch.device("cuda", 0)) == {"matmul": "fp32", "convolution": "fp32"}
    assert math_allowed(torch.device("cpu")) == {"matmul": "fp32", "convolution": "fp32"}
    from xbench.tf_backend import device as tf_device
    monkeypatch.setattr(tf_device, "gpu_capability", lambda: (9, 0))
    assert tf_device.math_allowed("cuda") == {"matmul": "tf32", "convolution": "tf32"}
    assert tf_device.math_allowed("cpu") == {"matmul": "fp32", "convolution": "fp32"}


def gpu_row(backend, framework, rate, math_allowed):
    from tests.report_fixtures import make_row
    row = make_row(backend=backend, framework=framework, model="resnet18", rates=(80, rate))
    row.update(device_type="cuda", device_name=H100)
    row["backend_details"]["math"] = math_allowed
    return row


def test_mfu_on_an_h100_is_against_the_tf32_peak_and_the_data_sheet(tmp_path):
    """resnet18 (convolutions do most of its FLOPs) on a mocked H100: PyTorch's and TensorFlow's
    MFU against the probe's TF32 matmul and against the data sheet's dense TF32 peak (494.7
    TFLOP/s); a rate that would be 120% of the data sheet is SUSPECT, not a result."""
    from tests.report_fixtures import write_rows
    from xbench.common.workload.models import MODELS
    from xbench.reports.numbers import analysis
    from xbench.reports.numbers.rows import load
    from xbench.reports.rendering.tables import limits_table
    flops = MODELS["resnet18"].training_flops_per_sample()
    forced = 1.2 * 494.7e12 / flops
    results = write_rows(tmp_path / "r.jsonl", [
        gpu_row("pt-single", "torch", 20_000, {"matmul": "fp32", "convolution": "tf32"}),
        gpu_row("tf-single", "tensorflow", 20_000, {"matmul": "tf32", "convolution": "tf32"}),
        gpu_row("pt-ddp", "torch", forced, {"matmul": "fp32", "convolution": "tf32"})])
    frame, _ = load([results])
    cells = analysis.cell_table(frame)
    probe = {"matmul": [
        {"framework": framework, "device_type": "cuda", "precision": precision, "threads": None,
         "gflops": gflops} for framework in ("torch", "tensorflow")
        for precision, gflops in (("fp32", 50_000.0), ("tf32", 400_000.0), ("bf16", 700_000.0))],
        "all_reduce": []}
    limits = against_limits(cells, analysis.attribution(cells), {"A": probe})
    limits = limits.set_index("backend")
    for backend in ("pt-single", "tf-single"):
        row = limits.loc[backend]
        assert row["precision"] == "tf32" and "tf32 matmul: 400,000.0 GFLOP/s" in row["peak_basis"]
        assert row["mfu"] == pytest.approx(flops * 20_000 / 400e12, rel=1e-9)
        assert "H100 SXM data sheet, tf32 dense: 494.7" in row["sheet_basis"]
        assert row["sheet_mfu"] == pytest.approx(flops * 20_000 / 494.7e12, rel=1e-9)
        assert not row["mfu_suspect"]
    assert limits.loc["pt-ddp", "sheet_mfu"] == pytest.approx(1.2, rel=1e-6)
    assert limits.loc["pt-ddp", "mfu_suspect"]
    shown = limits_table(limits.reset_index()).set_index("backend")
    assert shown.loc["pt-ddp", "MFU of the data sheet"].startswith("SUSPECT: 120.0%")
    assert not shown.loc["tf-single", "MFU, 95% CI of the rate"].startswith(("—", "SUSPECT"))


# The names torch.cuda.get_device_name and TensorFlow report, each to its own data sheet:
# (name, data sheet, fp32 TFLOP/s, bf16 or fp16 dense TFLOP/s)
GPU_NAMES = [
    ("Tesla V100-PCIE-16GB", "NVIDIA V100 PCIe", 14.0, ("fp16", 112.0)),
    ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2", 15.7, ("fp16", 125.0)),
    ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 PCIe", 19.5, ("bf16", 312.0)),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 PCIe", 19.5, ("bf16", 312.0)),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 SXM", 19.5, ("bf16", 312.0)),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM", 19.5, ("bf16", 312.0)),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 51.0, ("bf16", 756.0)),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 67.0, ("bf16", 989.4)),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 60.0, ("bf16", 835.5)),
    ("NVIDIA H200", "NVIDIA H200 SXM", 67.0, ("bf16", 989.4)),
    ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 60.0, ("bf16", 835.5)),
    ("NVIDIA L4", "NVIDIA L4", 30.3, ("bf16", 121.0)),
    ("NVIDIA L40S", "NVIDIA L40S", 91.6, ("bf16", 362.0)),
    ("Tesla T4", "NVIDIA T4", 8.1, ("fp16", 65.0)),
]


@pytest.mark.parametrize("name, sheet, fp32, lower", GPU_NAMES)
def test_every_gpu_model_gets_its_own_data_sheet(name, sheet, fp32, lower):
    from xbench.common.measuring.datasheets import datasheet_peak
    found = datasheet_peak(name, "fp32")
    assert found["flops"] == pytest.approx(fp32 * 1e12) and found["basis"].startswith(sheet + " ")
    precision, tflops = lower
    assert datasheet_peak(name, precision)["flops"] == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize("name, why", [
    ("Tesla V100-SXM3-32GB", "no GPU model with a data sheet here"),  # no sheet of its own here
    ("NVIDIA L40", "no GPU model with a data sheet here"),  # not the L40S, not the L4
    ("Intel Xeon", "no GPU model with a data sheet here"),
])
def test_a_gpu_not_matched_exactly_gets_no_data_sheet_and_says_so(name, why):
    from xbench.common.measuring.datasheets import datasheet_peak
    found = datasheet_peak(name, "fp32")
    assert found["flops"] is None and why in found["basis"]
    assert datasheet_peak("Tesla T4", "tf32") == {
        "flops": None, "basis": "none: the NVIDIA T4's data sheet has no tf32"}


def test_float32_precision_sets_both_frameworks_alike(monkeypatch):
    """--precision fp32 turns TF32 off in both frameworks (one trajectory on a GPU), tf32 on in
    both; the cell's key says which."""
    import torch

    from xbench.common.grids.cell import Cell
    from xbench.pt_backend import train as pt_train
    from xbench.tf_backend import device as tf_device
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(tf_device, "gpu_capability", lambda: (9, 0))
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             tf_device.tf.config.experimental.tensor_float_32_execution_enabled())
    try:
        for setting in ("fp32", "tf32"):
            pt_train.use_float32_math(setting)
            tf_device.use_float32_math(setting)
            both = {"matmul": setting, "convolution": setting}
            assert pt_train.math_allowed(torch.device("cuda", 0)) == both
            assert tf_device.math_allowed("cuda") == both
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        tf_device.tf.config.experimental.enable_tensor_float_32_execution(saved[2])
    cell = Cell(grid="g", backend="pt-ddp", model="small", multiple=1, batch=128, devices=2,
                epochs=2, batch_mode="global", seed=0, precision="fp32")
    assert cell.key.endswith("|fp32") and "|fp32" not in Cell(
        **{**cell.to_dict(), "precision": "framework-default"}).key
