"""The plain-text table a grid prints at its end (common.grids.table), sized to its content
within the terminal's width (common.terminal): no word cut, a contended column, a model file by
its name."""
from xbench.common.grids.table import format_rows
from xbench.common.terminal import table
from xbench.common.workload.model_file import short_name

MODEL_FILE = "/a/very/long/path/to/the/models/of/someone/vit_mnist.py@1a2b3c4d5e6f"


def row(backend, devices, status, epochs=(), test_accuracy=None, test_loss=None, **fields):
    return {"backend": backend, "model": "small", "dataset_multiple": 1, "global_batch": 128,
            "nodes": 1, "devices": devices, "repeat": 0, "status": status,
            "test_accuracy": test_accuracy, "test_loss": test_loss,
            "contended": None if status != "ok" else False,
            "epochs": [{"epoch": e, "seconds": s, "rate": 4096 / s} for e, s in epochs], **fields}


def test_what_every_row_shares_is_said_once_and_the_rest_aligned():
    lines = format_rows([row("pt-ddp", 2, "ok", [(1, 2.5), (2, 1.024)], 0.91234, 0.28761),
                         row("pt-dp", 2, "unsupported")], 200).splitlines()
    assert lines[0] == "every row: model small, mult 1, batch 128, nodes 1, dev 2, rep 0"
    assert lines[1].split() == ["backend", "status", "ep1", "s", "ep2", "s", "ep2", "samples/s",
                                "test", "acc", "test", "loss"]
    assert set(lines[2]) == {"-", " "}  # the rule under the header
    assert lines[3].split() == ["pt-ddp", "ok", "2.50", "1.02", "4,000", "0.9123", "0.2876"]
    assert lines[4].split() == ["pt-dp", "unsupported", "-", "-", "-", "-", "-"]
    assert len({len(line) for line in lines[1:]}) == 1  # numbers right-aligned: equal lines
    assert "contended" not in "\n".join(lines)  # no row was


def test_settings_the_columns_do_not_show_get_a_column_where_they_differ():
    plain, compressed = row("pt-ddp", 2, "ok"), row("pt-ddp", 2, "ok")
    plain.update(compression="none", inject="none", optimizer="adam")
    compressed.update(compression="fp16", inject="none", optimizer="adam")
    lines = format_rows([plain, compressed], 200).splitlines()
    assert lines[1].endswith("settings that differ")
    assert lines[3].endswith("compression=none") and lines[4].endswith("compression=fp16")
    assert "inject" not in lines[4] and "optimizer" not in lines[4]  # the same in every row


def test_a_contended_row_is_flagged_and_the_reports_choice_named():
    lines = format_rows([row("pt-ddp", 1, "ok", [(1, 2.0), (2, 1.0)], contended=True),
                         row("pt-single", 1, "ok", [(1, 2.0), (2, 1.0)]),
                         row("pt-dp", 2, "unsupported")], 200).splitlines()
    assert lines[1].split()[-1] == "contended"
    assert lines[3].split()[0] == "pt-ddp" and lines[3].split()[-1] == "yes"
    assert lines[4].split()[-1] == "no" and lines[5].split()[-1] == "-"  # not ok: not judged
    assert lines[-1] == ("1 of 3 rows contended (other work took their cores): reports leave "
                         "them out unless --include-contended")


def test_long_names_neither_widen_every_column_nor_pass_the_width():
    """A model file's path, jax-multiprocess and gpt-tiny: every line within 80 columns, the
    model file by its file name and digest's start, and every word whole."""
    rows = [row("jax-multiprocess", 2, "ok", [(1, 2.0), (2, 1.0)], 0.5, 1.5, model=MODEL_FILE,
                contended=True),
            row("pt-single", 1, "ok", [(1, 2.0), (2, 1.0)], 0.5, 1.5, model="gpt-tiny"),
            row("pt-dp", 2, "unsupported", model="gpt-tiny")]
    for columns in (80, 60):
        text = format_rows(rows, columns)
        assert max(len(line) for line in text.splitlines()) <= columns, text
        words = text.split()
        assert {"jax-multiprocess", "vit_mnist.py@1a2b3c4d", "gpt-tiny", "unsupported",
                "--include-contended"} <= set(words), text
        assert MODEL_FILE not in text
    assert short_name(MODEL_FILE) == "vit_mnist.py@1a2b3c4d" and short_name("small") == "small"


def test_a_table_too_wide_for_its_words_leaves_out_optional_columns_then_shows_blocks():
    headings = ["name", "reason", "extra"]
    rows = [["pt-dp", "DataParallel has no multi-device CPU mode", "x" * 30]]
    assert table(headings, rows, 200).splitlines()[2].endswith("x" * 30)
    dropped = table(headings, rows, 40, optional=("extra",)).splitlines()
    assert dropped[-1] == "(left out to fit 40 columns: extra)"
    assert all(len(line) <= 40 for line in dropped) and "multi-device" in " ".join(dropped)
    blocks = table(headings, rows, 30).splitlines()  # 30 x's cannot share a line of 30
    assert blocks[:2] == ["name: pt-dp", "reason: DataParallel has no"]
    assert blocks[-1] == "    " + "x" * 30  # a word longer than the line stays whole
