"""Gradient compression: the bytes each choice puts on the wire (by hand, and against PyTorch's
own PowerSGD rule), the backends that compress doing so in real 2-rank cells with the
bytes they record halved, and the others refusing with the reason (PowerSGD too, on gloo)."""
import math

import pytest

from tests.helpers import write_grid, xbench
from xbench.common.results.store import read_rows
from xbench.common.workload.compression import POWERSGD_MIN_RATE, gradient_wire_bytes, wire_bytes
from xbench.common.workload.models import MODELS
from xbench.reports.page.build import build_report


@pytest.mark.parametrize("shape, compression, rank, expected", [
    ((128, 784), "none", 1, 4 * 128 * 784),
    ((128, 784), "fp16", 1, 2 * 128 * 784),
    ((128, 784), "bf16", 1, 2 * 128 * 784),
    ((128, 784), "powersgd", 1, 4 * (128 + 784)),      # P 128 x 1 and Q 784 x 1
    ((128, 784), "powersgd", 4, 4 * (128 + 784) * 4),
    ((32, 1, 3, 3), "powersgd", 1, 4 * (32 + 9)),      # a conv weight: 32 x 9
    ((32, 1, 3, 3), "powersgd", 8, 4 * 32 * 9),        # 41 x 8 x 2 > 288: not worth it
    ((128,), "powersgd", 1, 4 * 128),                  # a bias: never compressed
])
def test_the_bytes_a_gradient_puts_on_the_wire(shape, compression, rank, expected):
    assert gradient_wire_bytes(shape, compression, rank) == expected


@pytest.mark.parametrize("model", ["small", "resnet18"])
@pytest.mark.parametrize("rank", [1, 4])
def test_powersgd_bytes_follow_pytorchs_own_rule(model, rank):
    """PowerSGD's hook decides per gradient (viewed as its first dimension by the rest) with
    its own _should_compress, which counts the elements before and after: ours agree, for every
    tensor of the models built by PyTorch."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    from xbench.pt_backend.models import build_model
    built = [tuple(p.shape) for p in build_model(MODELS[model]).parameters()]
    assert built == MODELS[model].tensor_shapes()
    elements = 0
    for shape in built:
        rows = shape[0]
        columns = math.prod(shape) // rows
        compress, before, after = _should_compress(rows, columns, min(rows, columns, rank),
                                                   POWERSGD_MIN_RATE)
        elements += after if compress else before
    assert wire_bytes(built, "powersgd", rank) == 4 * elements


def test_compressing_backends_halve_their_bytes_and_the_others_say_why_not(mnist_dir,
                                                                            tmp_path):
    # tested on a tenth of the test set (1,000 images): enough to tell learning from chance
    grid = write_grid(tmp_path, backends=["pt-ddp", "pt-replicate", "hvd-torch", "hvd-tf",
                                          "tf-mirrored"],
                      devices=[2], compression=["fp16", "bf16", "powersgd"],
                      max_train_samples=1024, max_test_samples=1000)
    results = tmp_path / "r.jsonl"
    run = xbench("grid", grid, "--data-dir", mnist_dir, "--results", results)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {(r["backend"], r["compression"]): r for r in read_rows(results)[0]}
    full = MODELS["small"].gradient_bytes()
    # DDP's bf16 hook runs on gloo too (torch 2.13's CPU build): ok on a CPU, not unsupported
    # pt-replicate's: FSDP2's reduce dtype, its gradients cast for the all-reduce
    for backend, compression in [("pt-ddp", "fp16"), ("pt-ddp", "bf16"), ("pt-replicate", "fp16"),
                                 ("pt-replicate", "bf16"), ("hvd-torch", "fp16"),
                                 ("hvd-tf", "fp16")]:
        row = rows[backend, compression]
        assert row["status"] == "ok", row["error"]
        assert f"|compress-{compression}" in row["cell_key"]
        size = wire_bytes(MODELS["small"].tensor_shapes(), compression, 1)
        assert size == full // 2
        [gradients] = [t for t in row["backend_details"]["traffic"] if t["what"] == "gradients"]
        assert gradients["bytes"] == 2 * size  # a ring of 2: each sends 2(N-1)/N of them
        counted = row["attribution"]["epochs"][-1]["ranks"][0]["collective"]["bytes_per_step"]
        if row["framework"] == "torch":  # counted as each gradient's hook fires
            assert counted == size
        assert "compressed" in row["backend_details"]["reduction_detail"]
        assert row["test_accuracy"] > 0.5  # it still learns
    for backend, compression in [("pt-ddp", "powersgd"), ("pt-replicate", "powersgd"),
                                 ("hvd-torch", "powersgd"),
                                 ("hvd-tf", "powersgd"), ("tf-mirrored", "fp16"),
                                 ("tf-mirrored", "powersgd"), ("hvd-torch", "bf16"),
                                 ("hvd-tf", "bf16"), ("tf-mirrored", "bf16")]:
        row = rows[backend, compression]
        assert row["status"] == "unsupported"
    assert "powersgd runs on GPUs (NCCL) only" in rows["pt-ddp", "powersgd"]["error"]
    assert "no communication hook for PowerSGD" in rows["pt-replicate", "powersgd"]["error"]
    assert "Horovod's compressors are hvd.Compression.none and fp16" in rows[
        "hvd-torch", "powersgd"]["error"]
    assert "distribution strategies have no gradient compression" in rows[
        "tf-mirrored", "fp16"]["error"]
    _, summary, written = build_report([results], tmp_path / "out", formats=["csv"])
    table = written["csv"].read_text()
    assert "compressed fp16" in table
