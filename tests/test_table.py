"""The plain-text table a grid prints at its end (common.grids.table)."""
from xbench.common.grids.table import format_rows


def row(backend, devices, status, epochs=(), test_accuracy=None, test_loss=None):
    return {"backend": backend, "model": "small", "dataset_multiple": 1, "global_batch": 128,
            "nodes": 1, "devices": devices, "repeat": 0, "status": status,
            "test_accuracy": test_accuracy, "test_loss": test_loss,
            "epochs": [{"epoch": e, "seconds": s, "rate": 4096 / s} for e, s in epochs]}


def test_header_and_one_aligned_line_per_row():
    lines = format_rows([row("pt-ddp", 2, "ok", [(1, 2.5), (2, 1.024)], 0.91234, 0.28761),
                         row("pt-dp", 2, "unsupported")]).splitlines()
    assert lines[0].split() == ["backend", "model", "mult", "batch", "nodes", "dev", "rep",
                                "status", "ep1", "s", "ep2", "s", "ep2", "samples/s", "test", "acc",
                                "test", "loss"]
    assert lines[1].split() == ["pt-ddp", "small", "1", "128", "1", "2", "0", "ok", "2.50",
                                "1.02", "4,000", "0.9123", "0.2876"]
    assert lines[2].split() == ["pt-dp", "small", "1", "128", "1", "2", "0", "unsupported", "-",
                                "-", "-", "-", "-"]
    assert len({len(line) for line in lines}) == 1  # right-aligned columns of fixed width


def test_no_rows_is_the_header_alone():
    assert format_rows([]).splitlines() == [format_rows([row("x", 1, "ok")]).splitlines()[0]]


def test_settings_the_columns_do_not_show_get_a_column_where_they_differ():
    plain, compressed = row("pt-ddp", 2, "ok"), row("pt-ddp", 2, "ok")
    plain.update(compression="none", inject="none", optimizer="adam")
    compressed.update(compression="fp16", inject="none", optimizer="adam")
    lines = format_rows([plain, compressed]).splitlines()
    assert lines[0].endswith("settings that differ")
    assert lines[1].endswith("compression=none") and lines[2].endswith("compression=fp16")
    assert "inject" not in lines[2] and "optimizer" not in lines[2]  # the same in every row
