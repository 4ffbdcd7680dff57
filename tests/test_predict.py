"""xbench predict: the model's arithmetic against hand-computed cases, the links it knows, and
the model run on the smoke grid's rows: every N-device cell predicted from a calibration it is
held out of, and the what-if table out to 512 devices, labelled predicted."""
import math
import re
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import refused, strict_json, xbench_here
from tests.report_fixtures import known_rows, write_rows
from xbench.cli.predict import bucket_sizes_option
from xbench.common.backends.protocol import RING_ALL_REDUCE
from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError
from xbench.common.grids.grid import expand
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load
from xbench.reports.step_model.calibration import (
    ALONE,
    MOVING,
    Wire,
    calibrate,
    calibration_point,
    core_exponents,
    fit_wire,
    rank_spreads,
    sharing_shares,
)
from xbench.reports.step_model.predict import (
    TWINS_AT_ONE,
    calibrating,
    checked,
    held_out,
    parse_link,
    pooled_ones,
    predicted,
    read_links,
    references,
)
from xbench.reports.step_model.published import against_published
from xbench.reports.step_model.step import Link, collective_seconds, expected_largest
from xbench.reports.step_model.utilisation import training_flops

LINK = Link("test", rate=10e9, latency=5e-6, source="by hand")
NODE_LINK = Link("test nodes", rate=25e9, latency=20e-6, source="by hand")


def ring(messages: int, size: float = 1e6, devices: int = 4, nodes: int = 1, link=LINK,
         node_link=LINK, protocol=RING_ALL_REDUCE, reshard="after-forward") -> float:
    return collective_seconds(protocol, size, devices, nodes, link, node_link, messages, reshard)


def test_a_ring_all_reduce_of_known_bytes_on_a_known_link():
    # 100 MB over 4 devices in DDP's buckets, its cap not set: a first bucket of 1 MiB, then
    # 25 MiB ones, 5 messages; each of the two passes moves 3/4 of the bytes at 10 GB/s (7.5 ms)
    # and pays 3 latencies per message
    ddp = TRAITS["pt-ddp"].protocol_on("cpu")
    assert ddp.messages(100e6) == 1 + math.ceil((100e6 - 2**20) / (25 * 2**20)) == 5
    assert ddp.messages(100e6, bucket_bytes=25 * 2**20) == 4  # the cap set: every bucket 25 MiB
    assert ddp.messages(2**20) == 1
    assert ring(ddp.messages(100e6), 100e6, protocol=ddp) == pytest.approx(
        2 * (0.75 * 100e6 / 10e9 + 5 * 3 * 5e-6))
    # one message: Horovod's 64 MiB fusion buffer holds 50 MB
    horovod = TRAITS["hvd-torch"].protocol_on("cpu")
    assert horovod.messages(50e6) == 1
    assert ring(horovod.messages(50e6), 50e6) == pytest.approx(2 * (0.75 * 50e6 / 10e9 + 3 * 5e-6))


def test_across_nodes_the_nodes_link_adds_its_own_pass():
    # 8 devices on each of 4 nodes, one 40 MB message: within the node 7/8 of the bytes, between
    # nodes 3/4 of them through the node's link, twice (reduce-scatter and all-gather)
    seconds = ring(1, 40e6, 8, 4, node_link=NODE_LINK)
    within = 7 / 8 * 40e6 / 10e9 + 7 * 5e-6
    between = 3 / 4 * 40e6 / 25e9 + 3 * 20e-6
    assert seconds == pytest.approx(2 * (within + between))
    assert ring(1, 40e6, 1, 4, node_link=NODE_LINK) == pytest.approx(2 * between)


def test_a_shared_link_a_reduction_to_one_and_fsdps_passes():
    capped = Link("cap", rate=1e6, latency=0.0, source="inject", shared=True)
    # two ranks on one capped loopback: each moves half the bytes at half the cap, twice
    assert ring(1, devices=2, link=capped, node_link=capped) == pytest.approx(2.0)
    # a reduction to one device: 3 copies in, the sum out to 3, through that device's link
    mirrored = TRAITS["tf-mirrored"].protocol_on("cpu")
    assert mirrored.through_one_device and mirrored.link_bytes(1e6, 4, "after-forward") == 6e6
    assert ring(1, protocol=mirrored) == pytest.approx(2 * 3 * (1e6 / 10e9 + 5e-6))
    # FSDP: its two gathers and its reduce-scatter; one gather fewer kept after forward; on a
    # CPU gloo's reduce-scatter is an all-reduce, two passes
    fsdp = TRAITS["pt-fsdp"].protocol_on("cuda")
    assert (fsdp.ring_passes("after-forward"), fsdp.ring_passes("after-backward")) == (3, 2)
    assert ring(1, devices=2, protocol=fsdp) == pytest.approx(3 * (0.5 * 1e6 / 10e9 + 5e-6))
    assert ring(1, devices=2, protocol=fsdp, reshard="after-backward") == pytest.approx(
        2 * (0.5 * 1e6 / 10e9 + 5e-6))
    assert TRAITS["pt-fsdp"].protocol_on("cpu").ring_passes("after-forward") == 4
    assert ring(1, protocol=TRAITS["pt-single"].protocol_on("cpu")) == 0.0
    assert ring(1, devices=1) == 0.0


def test_the_published_record_goes_through_the_same_arithmetic(tmp_path):
    published = tmp_path / "published.toml"
    published.write_text("""[by-hand]
title = "by hand"
backend = "hvd-torch"
per_device_rate = 100
per_device_batch = 50
parameters = 25e6
devices = 1
nodes = 4
link = "pcie4-x16"
node_link = "eth-100g"
efficiency = 0.9
sharing_factor = 1.0
sources = "none"
""")
    # 0.5 s of compute, its backward 2/3 of it (no slowdown beside collectives: sharing_factor
    # 1); 100 MB ready evenly over backward in 64 pieces,
    # 5.2 ms apart, each fused alone by Horovod's 1 ms cycle and done long before the next:
    # across 4 nodes at 12.5 GB/s with 10 us a ring step, two passes of 3/4 of the bytes and,
    # per message, 2 x 3 latencies
    moving = 2 * (0.75 * 100e6 / 12.5e9 + 64 * 3 * 10e-6)
    found = against_published(published).iloc[0]
    assert found["moving"] == pytest.approx(moving)
    assert found["no_overlap"] == pytest.approx(0.5 / (0.5 + moving))
    assert found["full_overlap"] == 1.0
    # the step waits only for the last piece: from the first cycle's tick after backward (at
    # 1/3 s, the tick at 334 ms) to its end
    last = 2 * (0.75 * 100e6 / 64 / 12.5e9 + 3 * 10e-6)
    assert found["predicted"] == pytest.approx(0.5 / (0.5 + 0.334 - 1 / 3 + last))


def test_the_slowest_of_n_ranks():
    assert expected_largest(1) == 0.0
    assert expected_largest(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)  # exact
    assert expected_largest(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)
    assert expected_largest(512) > expected_largest(64) > expected_largest(8)


def test_links_are_named_with_their_source_or_given():
    links = read_links()
    assert {"nvlink4", "nvlink3", "pcie4-x16", "ib-ndr", "ib-hdr", "eth-100g",
            "eth-25g"} <= set(links)
    assert links["ib-ndr"].rate == 50e9 and "per node" in links["ib-ndr"].source
    assert all(link.source and link.rate > 0 for link in links.values())
    given = parse_link("25gbit,5us")
    assert given.rate == pytest.approx(25e9 / 8) and given.latency == pytest.approx(5e-6)
    assert parse_link("12gbps").latency == 0.0
    for bad in ("fast", "25gbit,5 parsecs", "25"):
        with pytest.raises(UserError, match="RATE"):
            parse_link(bad)


def test_what_a_backend_declares_of_its_gradients_is_what_its_rows_record(smoke):
    """The what-if knows how a backend's gradients cross before any N-device cell ran: its
    declaration must be what the smoke grid's 2-device rows recorded (and MirroredStrategy's
    NCCL all-reduce on GPUs, which CI never has)."""
    recorded = {(r["backend"], r["device_type"]): r["backend_details"]["reduction"]
                for r in smoke.all if r["status"] == "ok" and r["devices"] == 2}
    assert len(recorded) >= 6
    for (backend, device_type), reduction in recorded.items():
        assert TRAITS[backend].protocol_on(device_type).reduction == reduction, backend
    assert TRAITS["tf-mirrored"].protocol_on("cuda").reduction == "all-reduce"
    assert TRAITS["pt-single"].protocol_on("cpu").reduction == "none"
    assert TRAITS["pt-ddp"].protocol_on("cpu").message_bytes == 25 * 2**20  # bucket_cap_mb
    assert TRAITS["hvd-torch"].protocol_on("cpu").message_bytes == 128 * 2**20  # fusion buffer


def test_bad_input_is_one_clear_error(smoke):
    for args, message in ((["--link", "warp-drive"], "neither a named link"),
                          (["--devices", "0,2"], "counts from 1"),
                          (["--node-link", "ib-ndr"], "needs --link"),
                          (["--link", "0gbit"], "a link's rate must be above 0"),
                          (["--link", "ib-ndr", "--node-link", "0mbit"], "--node-link '0mbit'"),
                          (["--link", "ib-ndr", "--node-link", "bogus"], "--node-link 'bogus'")):
        run = xbench_here("predict", smoke.results, *args)
        assert run.returncode == 2 and message in run.stderr, run.stderr



def test_every_n_device_cell_of_the_smoke_grid_is_predicted_held_out(smoke):
    run = xbench_here("predict", smoke.results, "--json")
    assert run.returncode == 0, run.stderr
    check = strict_json(run.stdout)["check"]
    usable = {(r["backend"], r["devices"]) for r in smoke.all
              if r["status"] == "ok" and not r["contended"] and r["devices"] > 1}
    assert {(c["backend"], c["devices"]) for c in check} == usable
    # each framework's held-out error apart, JAX's among them
    headline = strict_json(run.stdout)["summary"].split(";")[0]
    assert re.search(r"\(PyTorch \d+% over \d+, TensorFlow \d+% over \d+, JAX \d+% over 3\)",
                     headline), headline
    for cell in check:
        assert cell["calibrated_on"] == len(check) - 1  # every other configuration (one seed)
        if cell["backend"] == "tf-mirrored":  # the one backend copying between devices of one
            # process here (pt-dp's 2 devices need GPUs): nothing else measured such copies
            assert cell["link"] == "not predicted: no other cell measured tf-mirrored copies"
            continue
        assert cell["epoch_seconds"] > 0 and math.isfinite(cell["error"])
        assert cell["step"] == pytest.approx(cell["compute"] + cell["sharing"] + cell["exposed"]
                                             + cell["waiting"])
        assert cell["terms"]["stragglers"]["seconds"] == pytest.approx(cell["waiting"])
        # the trivial predictors beside it, and its error over the runs (one run: one error)
        assert cell["perfect_seconds"] > 0 and cell["one_device_seconds"] > 0
        assert cell["error_low"] <= cell["error"] <= cell["error_high"]
    held_out = strict_json(run.stdout)["held_out"]["uncapped cells on one node (the headline)"]
    assert held_out["best_trivial"] in held_out["predictors"] and "median" in held_out["skill"]
    assert "skill" in headline


def test_a_cell_is_never_calibrated_on_itself(smoke):
    """Changing a cell's own measured communication leaves its prediction as it was, though a
    calibration on all the cells reads it."""
    frame, _ = load([smoke.results], None, False)
    cells = analysis.cell_table(frame)
    attributed = analysis.attribution(cells)
    before = checked(cells, attributed, {})
    target = predicted(before).iloc[0]["cell_key"]
    changed = attributed.copy()
    mine = changed["cell_key"] == target
    for number in ("communication_step", "moving_seconds", "after_seconds", "alone_seconds",
                   "waiting_step", "under_compute_seconds"):
        changed.loc[mine, number] *= 10
    after = checked(cells, changed, {})
    assert after.set_index("cell_key").loc[target, "epoch_seconds"] == \
        pytest.approx(before.set_index("cell_key").loc[target, "epoch_seconds"])
    assert calibrate(references(cells, changed)) != calibrate(references(cells, attributed))


def test_the_what_if_table_to_512_devices_is_labelled_predicted(smoke):
    run = xbench_here("predict", smoke.results, "--link", "nvlink4", "--node-link", "ib-ndr",
                      "--devices", "1,8", "--nodes", "1,8,64", "--device", "H100 SXM",
                      "--utilisation", "0.4", "--format", "md")
    assert run.returncode == 0, run.stderr
    assert "Predicted, not measured: NVLink 4 (H100 SXM) between devices, InfiniBand NDR" in \
        run.stdout
    assert "assumed: 40% of the NVIDIA H100 SXM data sheet" in run.stdout
    assert "| 64 × 8 |" in run.stdout and "predicted rate (samples/s)" in run.stdout
    scaled = strict_json(xbench_here("predict", smoke.results, "--link", "ib-ndr", "--devices",
                                     "1,8", "--nodes", "1,8,64", "--json").stdout)["predicted"]
    ddp = [r for r in scaled if r["backend"] == "pt-ddp"]
    assert max(r["total"] for r in ddp) == 512
    # a one-process backend is never spread over nodes; a single-device reference never at all
    assert max(r["nodes"] for r in scaled if r["backend"] == "tf-mirrored") == 1
    assert not [r for r in scaled if r["backend"] in ("pt-single", "tf-single")]
    for row in ddp:
        if row["note"] != "predicted":  # 128 samples cannot be split over 256 or 512 devices
            assert row["total"] > 128 and "does not split over" in row["note"]
            continue
        assert row["efficiency"] <= 1.0 + 1e-9
        if row["total"] == 1 or "no interval: it needs 3 or more" in run.stdout:
            # the measured device itself, or too few held-out cells: no band, and it says so
            assert row["rate_low"] is None and row["rate_high"] is None
        else:
            assert row["rate_low"] <= row["rate"] <= row["rate_high"]
    assert {r["link"] for r in ddp if r["devices"] == 8} == {"InfiniBand NDR, one port per node"}
    assert all(r["compute_from"].startswith("measured on ") for r in scaled)
    beyond = strict_json(xbench_here("predict", smoke.results, "--link", "ib-ndr", "--devices", "8",
                                     "--nodes", "1024", "--json").stdout)["predicted"]
    assert beyond and all(r["note"] == "not predicted: 8,192 devices in all, beyond the 4,096 "
                          "it predicts for" for r in beyond)


def test_the_report_checks_every_cell_and_predicts_when_given_a_link(smoke, tmp_path):
    run = xbench_here("report", smoke.results, "--out", tmp_path, "--format", "md,png", "--link",
                      "pcie4-x16", "--node-link", "eth-100g")
    assert run.returncode == 0, run.stderr
    text = (tmp_path / "summary.md").read_text()
    assert "## Predicted against measured" in text and (tmp_path / "predicted.png").is_file()
    assert ("### Predicted against measured: uncapped cells on one node (the headline): median "
            "absolute error of the predicted epoch time") in text
    assert "## Predicted on other hardware" in text
    assert "### Predicted, not measured: PCIe 4.0 x16 between devices, 100 Gbit/s Ethernet" in text
    assert "| 64 × 8 |" in text


def test_the_what_if_predicts_each_bucket_size_and_marks_the_best(smoke):
    """`--bucket-mb A,B,...`: each size for the backends whose library takes one, exactly one
    best per setup and count, the others at their own buckets; a size that is no size exits 2."""
    run = xbench_here("predict", smoke.results, "--link", "10gbit,20us", "--devices", "2,8",
                      "--bucket-mb", "1,25,1000", "--json")
    assert run.returncode == 0, run.stderr
    scaled = [r for r in strict_json(run.stdout)["predicted"] if r["note"] == "predicted"]
    ddp = [r for r in scaled if r["backend"] == "pt-ddp"]
    assert {r["bucket_mb"] for r in ddp} == {1.0, 25.0, 1000.0}
    for total in (2, 8):
        rows = [r for r in ddp if r["total"] == total]
        assert sum(r["best_bucket"] for r in rows) == 1
        best = max(rows, key=lambda r: r["rate"])
        assert best["best_bucket"]
        one = next(r for r in rows if r["bucket_mb"] == 1000.0)  # one bucket hides nothing
        assert one["hidden"] == pytest.approx(0.0)
    assert {r["bucket_mb"] for r in scaled if r["backend"] == "tf-mirrored"} == {0.0}
    bad = xbench_here("predict", smoke.results, "--link", "ib-ndr", "--bucket-mb", "0,4")
    assert bad.returncode == 2 and "--bucket-mb '0,4'" in bad.stderr, bad.stderr


def test_a_library_is_calibrated_on_collectives_that_ran_alone():
    """Collectives of two sizes that would take 0.1 and 0.4 s at the nominal link, over 2 ring
    steps, measured 0.155 and 0.53 s: 15 ms a ring step and 80% of the nominal rate. On 2 ranks
    sharing a cap of 10 MB/s, each of an all-reduce's 2 passes moves half the bytes at 5 MB/s:
    3 MB are 0.6 s at the cap."""
    assert fit_wire([(2, 0.1, 0.155), (2, 0.4, 0.53)], ALONE) == Wire(
        pytest.approx(0.015), pytest.approx(0.8), 2, ALONE)
    assert fit_wire([(2, 0.1, 0.125)], ALONE).efficiency == pytest.approx(0.8)  # one point
    pair = {"backend": "pt-ddp", "device_type": "cpu", "reduction": "all-reduce",
            "devices": 2, "reshard": "after-forward", "inject": "link=80mbit",
            "bytes": 4e6, "moving_seconds": 0.6, "communication_step": 0.5, "bucket_mb": 0.0,
            "collective_library": "gloo", "after_bytes": 3e6, "after_seconds": 0.4,
            "after_messages": 1, "accumulate": 1, "accumulate_sync": "last"}
    basis, (steps, nominal, seconds) = calibration_point(pair)
    assert (basis, steps, seconds) == (ALONE, 2, 0.4) and nominal == pytest.approx(0.6)
    # a last small bucket after backward says only its latency: the step's moving time instead
    basis, (steps, nominal, seconds) = calibration_point({**pair, "after_bytes": 1e5})
    assert (basis, seconds) == (MOVING, 0.6) and nominal == pytest.approx(0.8)


def known(tmp_path):
    return write_rows(tmp_path / "r.jsonl", known_rows())


def what_if_json(path, *args) -> list[dict]:
    run = xbench_here("predict", path, "--link", "ib-ndr", "--devices", "1,8", "--json", *args)
    assert run.returncode == 0, run.stderr
    return [r for r in strict_json(run.stdout)["predicted"] if r["note"] == "predicted"]


def test_a_gpu_link_never_carries_this_machines_compute(tmp_path):
    """NVLink 4 joins H100s: CPU rows' compute under its name is refused (exit 2, one line);
    named, the H100's compute is the model's training FLOPs at the utilisation given of its data
    sheet's peak (assumed), or the rate given, and every row says which."""
    path = known(tmp_path)
    refused(xbench_here("predict", path, "--link", "nvlink4"),
            "NVLink 4 (H100 SXM) joins H100 SXM GPUs, and these results were measured on CPU")
    refused(xbench_here("predict", path, "--link", "ib-ndr", "--device-rate", "100"),
            "describe the device of --device")
    refused(xbench_here("predict", path, "--link", "ib-ndr", "--device", "TPU v9",
                        "--utilisation", "0.5"), "no data sheet of that model")
    assumed = what_if_json(path, "--device", "H100 SXM", "--utilisation", "0.4")
    flops = training_flops({"model": "small", "flops_per_sample": 0})
    one = next(r for r in assumed if r["total"] == 1 and r["batch_mode"] == "global")
    assert one["rate"] == pytest.approx(0.4 * 67e12 / flops, rel=1e-6)  # fp32: 67 TFLOP/s
    assert {r["compute_from"] for r in assumed} == {
        "assumed: 40% of the NVIDIA H100 SXM data sheet, fp32 dense: 67 TFLOP/s "
        "(https://www.nvidia.com/en-us/data-center/h100/ (sparse figures halved)), the model's "
        "training FLOPs"}
    given = what_if_json(path, "--device", "H100 SXM", "--device-rate", "5000")
    one = next(r for r in given if r["total"] == 1 and r["batch_mode"] == "global")
    assert one["rate"] == pytest.approx(5000)
    assert one["compute_from"] == "given: 5,000 samples/s a device (--device-rate)"


def test_weak_scaling_at_a_per_device_batch(tmp_path):
    """--per-device-batch 64: every count keeps 64 samples a device (the global batch grows
    with the devices), from the measured cells of either batch mode."""
    rows = what_if_json(known(tmp_path), "--per-device-batch", "64")
    assert rows and {r["per_device_batch"] for r in rows} == {64}
    for setup in ((128, "global"), (32, "per_device")):
        mine = {r["total"]: r for r in rows if (r["batch"], r["batch_mode"]) == setup}
        assert mine[8]["rate"] == pytest.approx(8 * mine[1]["rate"] * mine[8]["efficiency"])
        assert mine[8]["efficiency"] <= 1.0 + 1e-9
    # the measured global batch of 128 split over 8 devices is 16 a device without the option
    plain = what_if_json(known(tmp_path))
    assert {r["per_device_batch"] for r in plain if r["total"] == 8
            and r["batch_mode"] == "global"} == {16}


def test_a_cell_is_held_out_with_its_backend_at_its_bucket_size():
    """Its own configuration and every cell of its backend at its bucket size (any link, any
    count) stay out of its calibration; its backend at another bucket size, and other backends
    at its size, stay in."""
    pairs = pd.DataFrame({"backend": ["pt-ddp", "pt-ddp", "pt-ddp", "hvd-torch", "pt-ddp"],
                          "bucket_mb": [1.0, 1.0, 1000.0, 1.0, None]})
    configuration = pd.Series(["a", "b", "c", "d", "e"])
    assert held_out(pairs, 0, configuration).tolist() == [False, False, True, True, True]
    assert held_out(pairs, 4, configuration).tolist() == [True, True, True, True, False]


def test_what_a_backward_loses_beside_its_collectives_is_calibrated_per_library():
    """Two ranks, each on half the cores of the 1-device cell (cores' exponent 1 from the cell
    whose collectives ran after backward: its compute twice the 1-device cell's); the
    overlapped cell's backward measured 0.05 s longer than that with 0.1 s of collectives under
    it: half of each second beside its collectives lost."""
    one = {"input_step_1": 0.0, "forward_step_1": 0.1, "backward_step_1": 0.2,
           "optimizer_step_1": 0.0, "host_step_1": 0.0, "per_device_batch_1": 64,
           "threads_per_device_1": 2, "cores_1": 2, "devices_per_node_1": 1}
    pair = {**one, "backend": "pt-ddp", "device_type": "cpu", "reduction": "all-reduce",
            "collective_library": "gloo", "per_device_batch": 64, "threads_per_device": 1,
            "cores": 2, "devices_per_node": 2, "input_step": 0.0, "forward_step": 0.2,
            "optimizer_step": 0.0, "host_step": 0.0}
    pairs = pd.DataFrame([{**pair, "backward_step": 0.4, "under_compute_seconds": 0.0},
                          {**pair, "backward_step": 0.45, "under_compute_seconds": 0.1}])
    exponents = core_exponents(pairs)
    assert exponents["cpu"]["pt-ddp"] == pytest.approx(1.0)  # the cell with nothing beside
    assert sharing_shares(pairs, exponents) == {"gloo": (pytest.approx(0.5), 1)}


def test_predict_calibrates_on_the_median_of_a_cells_runs():
    """Three runs of 10, 11 and 30 ms of backward a step: the report's mean 17 ms, predict's
    median 11 ms."""
    cells = analysis.cell_table(load([write_rows(Path(tempfile.mkdtemp()) / "r.jsonl",
                                                 known_rows())])[0])
    cell = cells[cells["n"] == 3].copy()  # the 1-device cell of three runs
    runs = [{**run, "parts": {**run["parts"], "backward": seconds}, "steps": 1}
            for run, seconds in zip(cell["attributions"].iloc[0], (0.010, 0.011, 0.030),
                                    strict=True)]
    cell["attributions"] = [runs]
    assert analysis.attribution(cell)["backward_step"].iloc[0] == pytest.approx(0.017)
    assert calibrating(cell)["backward_step"].iloc[0] == pytest.approx(0.011)


def test_a_1_device_cells_runs_are_pooled_with_its_twins_at_other_bucket_sizes():
    """At one device no gradient crosses, so a bucket size changes nothing it computes: the two
    1-device cells of bucket sizes 0 and 1000 share their four runs; a 2-device cell, and a
    1-device cell of another batch, keep their own."""
    base = {**dict.fromkeys(TWINS_AT_ONE, "same"), "nodes": 1}
    cells = pd.DataFrame([
        {**base, "devices": 1, "bucket_mb": 0.0, "attributions": ["a"],
         "epoch2_seconds_values": [1.0]},
        {**base, "devices": 1, "bucket_mb": 1000.0, "attributions": ["b", "c", "d"],
         "epoch2_seconds_values": [2.0, 3.0, 4.0]},
        {**base, "devices": 2, "bucket_mb": 0.0, "attributions": ["e"],
         "epoch2_seconds_values": [5.0]},
        {**base, "batch": 32, "devices": 1, "bucket_mb": 0.0, "attributions": ["f"],
         "epoch2_seconds_values": [6.0]}])
    pooled = pooled_ones(cells)
    assert pooled["attributions"].tolist() == [["a", "b", "c", "d"]] * 2 + [["e"], ["f"]]
    assert pooled.at[1, "epoch2_seconds_values"] == [1.0, 2.0, 3.0, 4.0]
    assert cells.at[0, "attributions"] == ["a"]  # the cells given are left as they were


def test_the_ranks_spread_is_calibrated_on_the_waits_measured():
    """Two 2-rank cells of a backend, 40 ms compute, that waited 4 and 8 ms for the slowest
    rank: spreads of 4 / (40 x E[max of 2]) and 8 / (40 x E[max of 2]), their median what a
    rank's step spreads by when N of its processes run at once."""
    largest = expected_largest(2)
    pairs = pd.DataFrame([{"device_type": "cpu", "backend": backend, "devices": 2,
                           "input_step": 0.0, "forward_step": 0.01, "backward_step": 0.03,
                           "optimizer_step": 0.0, "host_step": 0.0, "waiting_step": waiting}
                          for backend, waiting in (("pt-ddp", 0.004), ("pt-ddp", 0.008),
                                                   ("hvd-torch", 0.02))])
    assert rank_spreads(pairs) == {  # each backend's own: never pooled over backends
        ("cpu", "pt-ddp"): (pytest.approx(0.006 / (0.04 * largest)), 2),
        ("cpu", "hvd-torch"): (pytest.approx(0.02 / (0.04 * largest)), 1)}
def test_bucket_sizes_one_cell_would_share_are_one_size():
    """25 and 25.0000001 are one cell in a grid (6 significant digits, then whole bytes), and
    once made two identical rows of the what-if, both labelled 25: now one size, the cell's."""
    given = "25,25.0000001,1.0000001"
    cells = expand({"name": "b", "backends": ["pt-ddp"], "models": ["small"], "multiples": [1],
                    "batches": [128], "devices": [2], "epochs": 2,
                    "bucket_mb": [float(v) for v in given.split(",")]})
    assert bucket_sizes_option(None, None, given) == sorted({c.bucket_mb for c in cells}) \
        == [1.0, 25.0]
