"""The plain-text table a grid prints at its end (common.table)."""
from xbench.common.table import format_rows


def row(backend, devices, status, epochs=(), test_accuracy=None):
    return {"backend": backend, "model": "small", "dataset_multiple": 1, "global_batch": 128,
            "nodes": 1, "devices": devices, "repeat": 0, "status": status, "test_accuracy": test_accuracy,
            "epochs": [{"epoch": e, "seconds": s, "rate": 4096 / s} for e, s in epochs]}


def test_header_and_one_aligned_line_per_row():
    lines = format_rows([row("pt-ddp", 2, "ok", [(1, 2.5), (2, 1.024)], 0.91234),
                         row("pt-dp", 2, "unsupported")]).splitlines()
    assert lines[0].split() == ["backend", "model", "mult", "batch", "nodes", "dev", "rep",
                                "status", "ep1", "s", "ep2", "s", "ep2", "samples/s", "test", "acc"]
    assert lines[1].split() == ["pt-ddp", "small", "1", "128", "1", "2", "0", "ok", "2.50",
                                "1.02", "4,000", "0.9123"]
    assert lines[2].split() == ["pt-dp", "small", "1", "128", "1", "2", "0", "unsupported", "-",
                                "-", "-", "-"]
    assert len({len(line) for line in lines}) == 1  # right-aligned columns of fixed width


def test_no_rows_is_the_header_alone():
    assert format_rows([]).splitlines() == [format_rows([row("x", 1, "ok")]).splitlines()[0]]
