"""Hand-made result rows for the report's tests (tests/test_report_*.py): rows as the runner
writes them with known measurements, the known grid of them, rows with hostile names."""
import itertools
import json

import numpy as np

from xbench.common.grids.cell import Cell
from xbench.common.measuring.attribution import MARKED, Flight, Step
from xbench.common.measuring.attribution import summarize as summarize_steps
from xbench.common.measuring.timeline import timeline_record
from xbench.common.results import schema
from xbench.common.workload.models import MODELS

SAMPLES = 4096

SHARES = {"input": 0.05, "forward": 0.25, "backward": 0.45, "optimizer": 0.1, "host": 0.15}


def hand_attribution(epoch_seconds, steps, devices, comm):
    """The step attribution of a run whose epochs take `epoch_seconds`, `steps` steps each,
    every step split by SHARES on each of `devices` ranks, with `comm` of it (a share) moved from
    the backward pass to an all-reduce of the model's gradients after every rank was ready; made
    by the loop's own arithmetic (common.measuring.attribution)."""
    def steps_of(seconds):
        made = []
        for index in range(steps):
            step, at = Step(index * seconds), index * seconds
            for part, share in SHARES.items():
                share -= comm if part == "backward" else 0
                step.intervals.append((part, at, at + share * seconds, MARKED))
                at += share * seconds
            step.end = at + comm * seconds
            if comm:
                step.ready, step.collective_end = at, step.end
                step.collectives = [Flight(at, step.end)]  # launched when the rank was ready
                step.collective_bytes = MODELS["small"].gradient_bytes()
            made.append(step)
        return made
    epochs = []
    for seconds in epoch_seconds:
        made = steps_of(seconds / steps)
        ranks = [{**summarize_steps(made, [None] * steps, seconds),
                  "timeline": timeline_record(made, [None] * steps)}] * devices
        epochs.append({"ranks": ranks, "slowest_rank": None})
    return {"how": {}, "epochs": epochs, "traced_steps": None}


def hand_cell(backend="pt-ddp", devices=1, batch=128, mode="global", epochs=2, dataset="mnist",
              model="small", threads=0, repeat=0, look=0):
    """The cell of a hand-made row."""
    return Cell(grid="hand", backend=backend, model=model, multiple=1, batch=batch,
                devices=devices, epochs=epochs, batch_mode=mode, seed=0, max_train_samples=0,
                data=dataset, device="cpu", timeout=600, threads=threads, repeat=repeat,
                look=look)


def make_row(backend="pt-ddp", devices=1, batch=128, mode="global", rates=(80.0, 100.0), step=0.01,
             repeat=0, status="ok", error=None, host="node-a", dataset="mnist", model="small",
             contended=False, reduction="all-reduce", test_accuracy=0.9, framework="torch",
             threads=0, comm=None, look=0):
    """A result row as the runner writes it, with the given measurements (`comm`: the share of
    each step exposed communication takes; default 20% on N > 1 devices; `look`: the look of
    --until-conclusive that added it)."""
    cell = hand_cell(backend, devices, batch, mode, len(rates), dataset, model, threads, repeat,
                     look)
    env = {"host": host, "cpu_count": 2, "python": "3.11.7",
           "packages": {"torch": "2.13.0"}, "git_commit": None}
    contention = {"other_cpu_share": 0.5 if contended else 0.0, "steal_share": 0.0,
                  "load_1m": 1.0, "other_gpu_processes": None, "cpu_per_wall_per_rank": [1.0],
                  "contended": contended}
    measurement = None if status != "ok" else schema.Measurement(
        framework_version="2.13.0", params=MODELS[model].parameters(), dataset_source="hand-made",
        train_samples=SAMPLES, device_type="cpu", device_name="CPU",
        epochs=[{"epoch": e, "seconds": SAMPLES / r, "samples": SAMPLES, "rate": r,
                 "loss": 1.0 / e, "accuracy": 0.5 + 0.2 * e, "seconds_per_rank": [SAMPLES / r],
                 "contention": contention, "untimed_seconds": 0.0}
                for e, r in enumerate(rates, 1)],
        startup_seconds=3.0, step_time_p50=step, step_time_p90=step, test_accuracy=test_accuracy,
        peak_memory_per_device=[(300 if i == 0 else 200) * 2**20 for i in range(devices)],
        model_state_per_device=[3 * 4 * MODELS[model].parameters()] * devices,
        hosts=[host] * devices,
        threads={"per_device": {"compute": 1, "inter_op": 1, "input_pipeline": 1},
                 "per_process": {"intra_op": 1, "inter_op": 1, "input_pipeline": 1}},
        contended=contended,
        evidence={"replica_weight_digests": ["w"] * devices, "global_batches_digests": ["g"],
                  "shard_overlap": [0], "samples_trained": [SAMPLES],
                  "replica_sample_digests": [["s"]] * devices},
        backend_details={"reduction": reduction},
        attribution=hand_attribution(
            [SAMPLES / r for r in rates],
            SAMPLES // (batch if mode == "global" else batch * devices),
            devices, (0.2 if devices > 1 else 0.0) if comm is None else comm))
    return schema.make_row(cell, f"hand-run-{next(RUNS)}", schema.now(), status, error, framework,
                           measurement, env, None, 1.0, 1, model=MODELS[model])


RUNS = itertools.count()  # each hand-made row is its own run, as each grid's rows are


def harmonic(*rates):
    """The rate of repeats at these rates: samples / mean epoch time."""
    return 1 / np.mean([1 / r for r in rates])


def known_rows():
    """Strong scaling (global batch 128): 1 device in 3 repeats (rates 100, 110, 120), 2 and 4
    devices; weak scaling (32 per device) on 1, 2, 4 devices with step times 10, 12, 15 ms."""
    return [*[make_row(devices=1, rates=(80, r), step=0.030, repeat=i)
              for i, r in enumerate((100, 110, 120))],
            make_row(devices=2, rates=(150, 180), step=0.020),
            make_row(devices=4, rates=(300, 330), step=0.020),
            make_row(devices=1, batch=32, mode="per_device", rates=(90, 100), step=0.010),
            make_row(devices=2, batch=32, mode="per_device", rates=(140, 150), step=0.012),
            make_row(devices=4, batch=32, mode="per_device", rates=(190, 200), step=0.015),
            make_row(backend="pt-dp", devices=2, status="unsupported",
                     error="pt-dp with 2 devices needs 2 CUDA GPUs")]


def as_contended(rows):
    """The rows as a busy machine would have left them: half of every epoch's cores taken by
    other work, each row contended (whether a recording's own rows were depends on how busy the
    machine that recorded them was)."""
    busy = []
    for row in rows:
        if row["status"] != "ok":  # a row that trained nothing has no contention
            busy.append(row)
            continue
        epochs = [{**e, "contention": {**e["contention"], "other_cpu_share": 0.5,
                                       "taken_share": 0.5, "contended": True}}
                  for e in row["epochs"]]
        busy.append({**row, "epochs": epochs, "contended": True})
    return busy


def write_rows(path, rows, extra_lines=()):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return path


def repeated(backend, devices, rates, **kwargs):
    return [make_row(backend=backend, devices=devices, rates=(r, r), repeat=i, **kwargs)
            for i, r in enumerate(rates)]


HOSTILE = "<script>console.error('escaped?')</script>"


def hostile_rows():
    """The known rows plus names and errors that are HTML, and a $ that matplotlib reads as math."""
    return [*known_rows(), make_row(backend=f"x{HOSTILE}$y$", devices=1),
            make_row(backend="pt-ddp", devices=8, status="failed",
                     error=f'<img src="nowhere.png" onerror="console.error(1)"> {HOSTILE}')]
