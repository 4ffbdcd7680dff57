"""Overlap measured, not inferred: every collective timed from its launch to its completion by
the library that runs it, proven with the bucket size. With one bucket as large as the model's
gradients, a bucket launches only when backward is over and nothing is left to overlap; with
small buckets over a capped link, the collectives of the first buckets run while backward still
computes the rest; TensorFlow's packs, launched in order after backward, are its exposed
communication. Real pt-ddp, hvd-torch and tf-multiworker cells, 2 ranks, the large model (16.4 MB
of gradients), on real MNIST."""
import re

import pytest

from tests.helpers import write_grid, xbench, xbench_here
from xbench.common.backends.traits import TRAITS
from xbench.common.results.store import read_rows
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import rows_frame

ONE_BUCKET, SMALL_BUCKET, CAP = 32.0, 1.0, "link=400mbit"


@pytest.fixture(scope="module")
def bucketed(mnist_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("buckets")
    grid = write_grid(folder, name="buckets", backends=["pt-ddp", "hvd-torch", "tf-multiworker"],
                      models=["large"], devices=[2], max_train_samples=512, max_test_samples=256)
    runs = {}
    for bucket, inject in ((ONE_BUCKET, "none"), (SMALL_BUCKET, CAP)):
        results = folder / f"{bucket:g}.jsonl"
        run = xbench("grid", grid, "--bucket-mb", bucket, "--inject", inject, "--data-dir",
                     mnist_dir, "--results", results, "--contention-limit", "1")
        assert run.returncode == 0, run.stdout + run.stderr
        for row in read_rows(results)[0]:
            runs[(row["backend"], bucket)] = row
    return runs


def overlap_share(row) -> float:
    """The share of the ranks' collectives' time (launch to completion) they also computed, the
    last epoch."""
    collectives = [rank["collective"] for rank in row["attribution"]["epochs"][-1]["ranks"]]
    return (sum(c["overlapped_seconds"] for c in collectives)
            / sum(c["busy_seconds"] for c in collectives))


@pytest.mark.parametrize("backend", ["pt-ddp", "hvd-torch", "tf-multiworker"])
def test_one_bucket_as_large_as_the_model_leaves_nothing_to_overlap(bucketed, backend):
    row = bucketed[(backend, ONE_BUCKET)]
    assert row["status"] == "ok" and row["bucket_mb"] == ONE_BUCKET, row["error"]
    assert overlap_share(row) <= 0.2
    for rank in row["attribution"]["epochs"][-1]["ranks"]:
        assert rank["collective"]["busy_seconds"] > 0  # the collectives were timed


@pytest.mark.parametrize("backend", ["pt-ddp", "hvd-torch"])
def test_small_buckets_over_a_capped_link_overlap_backward(bucketed, backend):
    small, whole = bucketed[(backend, SMALL_BUCKET)], bucketed[(backend, ONE_BUCKET)]
    assert small["status"] == "ok" and small["inject"] == CAP, small["error"]
    assert overlap_share(small) > max(overlap_share(whole), 0.2)
    assert "|bucket1" in small["cell_key"]


def test_tensorflows_small_packs_after_backward_are_its_communication(bucketed):
    """MultiWorkerMirroredStrategy launches its 1 MB packs in the gradients' order, each when the
    one before is done: long after backward's last op, which is when the rank was ready. In
    every traced step (the epoch's 4 steps) the last pack is launched after backward's end; the
    packs' time in flight, all of it after backward (next to none overlapped it), less the wait
    for the slower rank, is communication, not untraced (the update of a reduced pack's
    variables, counted as the optimizer's, may run while the next pack is in flight: hence
    0.8)."""
    row = bucketed[("tf-multiworker", SMALL_BUCKET)]
    assert row["status"] == "ok" and row["inject"] == CAP, row["error"]
    assert "|bucket1" in row["cell_key"]
    assert row["attribution"]["traced_steps"]["every"] == 1
    for rank in row["attribution"]["epochs"][-1]["ranks"]:
        timeline, parts, packs = rank["timeline"], rank["parts"], rank["collective"]
        assert len(timeline["collectives"]) > 1  # several packs
        assert timeline["backward_seconds"] < timeline["collectives"][-1]["launch"]
        assert packs["overlap_share"] < 0.05 and packs["moving_median"] > 0
        assert parts["communication"]["median"] >= 0.8 * packs["moving_median"], (parts, packs)
        whole = sum(part["seconds"] for part in parts.values())
        assert parts["untraced"]["seconds"] < 0.1 * whole, parts


def test_the_backends_without_a_bucket_knob_say_why(mnist_dir, tmp_path):
    results = tmp_path / "r.jsonl"
    run = xbench("grid", write_grid(tmp_path, backends=["pt-single", "pt-fsdp", "tf-mirrored"],
                                    devices=[1]),
                 "--bucket-mb", "4", "--data-dir", mnist_dir, "--results", results)
    assert run.returncode == 0, run.stderr
    reasons = {row["backend"]: row["error"] for row in read_rows(results)[0]}
    assert all(row_error.startswith("bucket_mb 4:") for row_error in reasons.values()), reasons
    assert "no buckets: FSDP2" in reasons["pt-fsdp"]
    dry = xbench_here("grid", write_grid(tmp_path, backends=["pt-single"], devices=[1]),
                      "--bucket-mb", "4", "--dry-run", "--results", tmp_path / "dry.jsonl")
    assert dry.returncode == 0 and "unsupported here" in dry.stdout, dry.stdout


@pytest.mark.parametrize("backend", ["pt-ddp", "hvd-torch"])
def test_the_timeline_shows_one_bucket_after_backward_and_nothing_hidden(bucketed, backend):
    """One bucket as large as the model: one collective, launched once backward is over, with
    every byte of the step; the step waits for all of it (hidden share at most 0.05). With 1 MB
    buckets the first is launched while backward still computes."""
    whole, small = bucketed[(backend, ONE_BUCKET)], bucketed[(backend, SMALL_BUCKET)]
    for rank in whole["attribution"]["epochs"][-1]["ranks"]:
        timeline = rank["timeline"]
        [collective] = timeline["collectives"]
        assert collective["launch"] >= timeline["backward_seconds"]
        assert collective["bytes"] == sum(g["bytes"] for g in timeline["gradients"])
        assert timeline["after_backward"]["bytes"] == collective["bytes"]
    for rank in small["attribution"]["epochs"][-1]["ranks"]:
        timeline = rank["timeline"]
        assert len(timeline["collectives"]) > 1
        assert timeline["collectives"][0]["launch"] < timeline["backward_seconds"]
    [cell] = attributed_cells([whole]).to_dict("records")
    assert 0.0 <= cell["hidden_share"] <= 0.05, cell["hidden_share"]


def attributed_cells(rows):
    """The report's attributed cells of `rows` (reports.numbers.analysis)."""
    return analysis.attribution(analysis.cell_table(rows_frame(rows)))


def test_a_bucket_size_is_whole_bytes_and_the_row_says_what_its_library_was_given(bucketed,
                                                                                   tmp_path):
    """Each library takes whole bytes: bucket_mb is rounded to them before the cell key is made
    (values that differ past 6 significant digits, or by less than a byte, are one cell), a
    positive size under one byte (TensorFlow's 0, its own packing) is refused, and a row records
    the bytes its library was given."""
    for (backend, megabytes), row in bucketed.items():
        assert row["backend_details"]["buckets"] == {
            "bytes": int(megabytes * 2**20), "through": TRAITS[backend].bucket_knob}
    grid = write_grid(tmp_path, backends=["tf-multiworker"], devices=[2])
    dry = xbench_here("grid", grid, "--bucket-mb", "25,25.0000001,0.1,0.1000001", "--dry-run",
                      "--results", tmp_path / "r.jsonl")
    assert dry.returncode == 0, dry.stderr
    assert re.findall(r"\|bucket([0-9.e-]+)\]", dry.stdout) == ["25", "0.1"]
    tiny = xbench_here("grid", grid, "--bucket-mb", "0.0000001", "--dry-run", "--results",
                       tmp_path / "r.jsonl")
    assert tiny.returncode == 2 and "'bucket_mb' 1e-07 is less than one byte" in tiny.stderr
