"""What every number carries, with real processes: the samples each replica actually trained on
(a deliberately wrong order is caught), and the other load on the machine while it was timed (a
busy loop beside a cell marks it contended; a quiet cell is not; a busy loop on the core of one
pinned rank marks that rank, which all the machine's cores together would dilute)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO, SLOW, SMOKE_SLICE, XBENCH, write_grid
from xbench.common.measuring.contention import taken_share
from xbench.common.measuring.evidence import sample_evidence
from xbench.common.results.store import read_rows
from xbench.common.running.placement import rank_cores
from xbench.common.workload.samples import rank_indices
from xbench.reports.page.build import build_report

SAMPLES = 1024
# In every process (sitecustomize runs at start-up): each rank is dealt rank 0's shard, the bug of
# a sampler that was never told its rank.
WRONG_ORDER = '''import xbench.common.workload.samples as samples

real_rank_indices = samples.rank_indices


def every_rank_takes_rank_0s_shard(samples, global_batch, seed, epoch, rank, world, replicas=1):
    return real_rank_indices(samples, global_batch, seed, epoch, 0, world, replicas)


samples.rank_indices = every_rank_takes_rank_0s_shard
'''


def grid(mnist_dir, folder, *options, env=None, **settings):
    """Run a small grid in `folder`; (rows, stdout, results file). No test here reads a test
    accuracy: its cells evaluate on a tenth of the test set (1,000 images, not 10,000)."""
    folder.mkdir(exist_ok=True)
    results = folder / "results.jsonl"
    done = subprocess.run([*XBENCH, "grid", str(write_grid(folder, max_test_samples=1000,
                                                           **settings)),
                           "--data-dir", str(mnist_dir), "--results", str(results), *options],
                          cwd=REPO, capture_output=True, text=True, timeout=SLOW, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return read_rows(results)[0], done.stdout, results


def correct_global_digests(samples, global_batch, epochs=2):
    order = [[rank_indices(samples, global_batch, 0, e, 0, 1) for e in range(1, epochs + 1)]]
    return sample_evidence(order, samples // global_batch)["global_batches_digests"]


@pytest.mark.parametrize("backend", ["pt-ddp", "hvd-tf"])
def test_a_wrong_sample_order_is_seen_in_the_evidence(backend, mnist_dir, tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(WRONG_ORDER)
    env = {**os.environ, "PYTHONPATH": f"{hook}:{REPO}"}
    [row], _, results = grid(mnist_dir, tmp_path, env=env, backends=[backend], devices=[2],
                             max_train_samples=SAMPLES)
    assert row["status"] == "ok", row["error"]
    evidence = row["evidence"]
    assert evidence["shard_overlap"] == [SAMPLES // 2, SAMPLES // 2]  # both ranks: one shard
    assert evidence["samples_trained"] == [SAMPLES // 2] * 2
    assert evidence["global_batches_digests"] != correct_global_digests(SAMPLES, 128)
    notices, _, _ = build_report([results], tmp_path / "out", formats=["md"])
    assert any(f"EVIDENCE: {row['cell_key']}: {SAMPLES // 2} samples were trained by more than one "
               f"replica" in n for n in notices)


def test_a_right_sample_order_matches_the_order_every_backend_is_dealt(smoke):
    row = smoke.rows[("pt-ddp", 2)]
    assert row["evidence"]["global_batches_digests"] == correct_global_digests(SMOKE_SLICE, 128)
    assert row["evidence"]["shard_overlap"] == [0, 0]


def skip_unless_quiet(quiet, printed):
    """Where the machine was busy beside the test (another suite, a build), the quiet run could
    not be quiet, and the mark said so: the test skips, saying what it measured."""
    shares = [taken_share(rank) for e in quiet["epochs"] for rank in e["contention"]["per_rank"]]
    assert ("CONTENDED" in printed) == quiet["contended"]
    if quiet["contended"]:
        pytest.skip(f"no quiet core here: other processes, interrupts and the like took "
                    f"{max(shares):.0%} of a rank's cores "
                    f"during the quiet run (limit {quiet['contention_limit']:.0%})")


def busy_loops(count):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


@pytest.mark.alone
def test_a_busy_loop_beside_a_cell_marks_it_contended_and_a_quiet_cell_is_not(mnist_dir, tmp_path):
    settings = {"backends": ["pt-single"], "max_train_samples": 2048, "repeats": 1}
    [quiet], quiet_out, _ = grid(mnist_dir, tmp_path / "quiet", **settings)
    loops = busy_loops(2)  # two of this machine's cores, or a share of a larger machine's
    try:
        [busy], busy_out, busy_results = grid(mnist_dir, tmp_path / "busy", **settings)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert quiet["status"] == busy["status"] == "ok"
    skip_unless_quiet(quiet, quiet_out)
    for epoch in quiet["epochs"]:
        assert epoch["contention"]["other_cpu_share"] < quiet["contention_limit"]
    assert busy["contended"] is True and "CONTENDED: rank 0 (" in busy_out
    assert "other processes used" in busy_out
    shares = [e["contention"]["other_cpu_share"] for e in busy["epochs"]]
    assert max(shares) > busy["contention_limit"]
    assert all(0 < r < 4 for e in busy["epochs"] for r in e["contention"]["cpu_per_wall_per_rank"])
    assert np.isfinite(busy["epochs"][0]["contention"]["load_1m"])
    _, summary, written = build_report([busy_results], tmp_path / "report", formats=["csv"])
    assert "1 run(s) were contended" in "\n".join(summary)
    assert "No verdict: no cell has a usable run." in "\n".join(summary)


@pytest.mark.alone
def test_a_busy_loop_on_one_pinned_ranks_cores_marks_that_rank_alone(mnist_dir, tmp_path):
    """pt-ddp on 2 ranks pinned to their halves of the cores; busy loops on rank 1's cores take
    them from rank 1 alone. Rank 1 is marked and rank 0 is not (over all the machine's cores,
    the judgement before per-rank watching, rank 1's loss was diluted by rank 0's quiet
    cores)."""
    allowed = sorted(os.sched_getaffinity(0))
    mine = [rank_cores(allowed, 2, rank) for rank in (0, 1)]
    settings = {"backends": ["pt-ddp"], "devices": [2], "max_train_samples": 2048,
                "pin_ranks": True}  # judged at the default limit
    [quiet], quiet_out, _ = grid(mnist_dir, tmp_path / "quiet", **settings)
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                              preexec_fn=lambda core=core: os.sched_setaffinity(0, [core]))
             for core in mine[1]]
    try:
        [busy], busy_out, _ = grid(mnist_dir, tmp_path / "busy", **settings)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert quiet["status"] == busy["status"] == "ok" and busy["pin_ranks"] is True
    assert busy["contention_limit"] == 0.10
    assert "|pin-ranks" in busy["cell_key"]
    skip_unless_quiet(quiet, quiet_out)
    for epoch in quiet["epochs"] + busy["epochs"]:
        assert [rank["cores"] for rank in epoch["contention"]["per_rank"]] == mine
    for epoch in busy["epochs"]:  # the loops took rank 1's cores in every epoch
        ranks = epoch["contention"]["per_rank"]
        assert ranks[1]["other_cpu_share"] > busy["contention_limit"]
    last = busy["epochs"][-1]["contention"]  # past the first epoch's start-up noise
    assert last["contended_ranks"] == [1] and last["most_contended_rank"] == 1
    assert last["other_cpu_share"] == last["per_rank"][1]["other_cpu_share"]
    assert busy["contended"] is True and "CONTENDED: rank 1 (" in busy_out
