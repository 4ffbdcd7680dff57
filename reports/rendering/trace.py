"""A row's recorded steps as a Chrome / Perfetto trace (the JSON "traceEvents" format that
chrome://tracing, https://ui.perfetto.dev and HTA read), so that overlap and stragglers can be
seen as the PyTorch profiler shows them.

A row keeps no step whole: per timed epoch and rank it keeps each part's seconds over the
epoch's steps (common.measuring.attribution) and the step as a timeline (common.measuring
.timeline: each gradient's ready moment and each collective's launch and end, per index the
median over the steps, from backward's start). The trace draws, for every epoch and rank, one
representative step from them:

- the compute lane: one span per epoch and rank, named for what it is ("mean step of epoch 2":
  one step drawn for the epoch's many, its seconds and steps in its arguments), its parts one
  after another, each its mean over the epoch's steps (so the parts of a step add up to the
  epoch's step windows over its steps), in the order a step runs
  them: the collectives' waiting and communication before the optimizer's update, where DDP's
  backward and Horovod's synchronize wait for them;
- the collectives lane: each collective from its launch to its end, placed from the start of
  the backward part; on the compute lane each gradient's ready moment as an instant, and a flow
  from a bucket's last gradient to its collective where the bytes tell which gradients the
  bucket holds.

Every rank's epoch starts at the same moment (the barrier each epoch starts with), so a rank
that waited more than another shows it; the epochs follow one another.
"""
from __future__ import annotations

from xbench.common.measuring.attribution import MEANING, PARTS

MICROSECONDS = 1e6
COMPUTE, COLLECTIVES = 1, 2  # each rank's lanes (the trace's thread ids)
LANES = {COMPUTE: "compute", COLLECTIVES: "collectives"}
# The parts in the order a step runs them (attribution.PARTS is the order they are shown in).
IN_STEP_ORDER = ("input", "forward", "backward", "waiting", "communication", "optimizer", "host",
                 "untraced")
assert set(IN_STEP_ORDER) == set(PARTS)


def has_timeline(row: dict) -> bool:
    """Whether any rank of any epoch of the row recorded its step as a timeline."""
    epochs = (row.get("attribution") or {}).get("epochs") or []
    return any(rank.get("timeline") for epoch in epochs for rank in epoch["ranks"])


def pid(rank: int) -> int:
    """A rank's process id in the trace: rank + 1 (some viewers take pid 0 for the idle task)."""
    return rank + 1


def trace(row: dict) -> dict:
    """The row's recorded steps as a trace: {"traceEvents": [...], "displayTimeUnit": "ms",
    "otherData": what the row is and how its step was drawn}."""
    epochs = row["attribution"]["epochs"]
    events = names(len(epochs[0]["ranks"]))
    origin = 0.0
    seconds = [epoch["seconds"] for epoch in row["epochs"]]
    for number, epoch in enumerate(epochs, 1):
        ends = [rank_step(events, number, rank, recorded, origin,
                          seconds[number - 1] if number <= len(seconds) else None)
                for rank, recorded in enumerate(epoch["ranks"])]
        origin = max(ends)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"cell_key": row["cell_key"], "run_id": row["run_id"],
                          "repeat": row["repeat"], "backend": row["backend"],
                          "devices": row["world_size"], "epochs": len(epochs),
                          "traced_steps": row["attribution"].get("traced_steps"),
                          "drawn": "per epoch and rank one step: each part its mean over the "
                                   "epoch's steps, each gradient and collective at its median "
                                   "moment from backward's start"}}


def names(ranks: int) -> list[dict]:
    """The metadata events that name each rank's process and its lanes."""
    events = []
    for rank in range(ranks):
        events += [{"ph": "M", "name": "process_name", "pid": pid(rank),
                    "args": {"name": f"rank {rank}"}},
                   {"ph": "M", "name": "process_sort_index", "pid": pid(rank),
                    "args": {"sort_index": rank}}]
        events += [{"ph": "M", "name": "thread_name", "pid": pid(rank), "tid": tid,
                    "args": {"name": name}} for tid, name in LANES.items()]
    return events


def rank_step(events: list[dict], epoch: int, rank: int, recorded: dict, origin: float,
              epoch_seconds: float | None) -> float:
    """Add one rank's representative step of `epoch` (which took `epoch_seconds` in all) from
    `origin` (microseconds) to `events`; where it ends (its last part's or collective's
    end)."""
    steps = max(recorded["steps"], 1)
    at, backward_at = origin, None
    parts = []
    for part in IN_STEP_ORDER:
        numbers = recorded["parts"][part]
        length = numbers["seconds"] / steps * MICROSECONDS
        if part == "backward":
            backward_at = at
        if length > 0:
            parts.append({"ph": "X", "cat": "part", "name": part, "pid": pid(rank),
                          "tid": COMPUTE, "ts": at, "dur": length,
                          "args": {"epoch": epoch, "mean_seconds": numbers["seconds"] / steps,
                                   **{k: numbers[k] for k in ("median", "p10", "p90")},
                                   "meaning": MEANING[part]}})
        at += length
    events.append({"ph": "X", "cat": "step", "name": f"mean step of epoch {epoch}",
                   "pid": pid(rank), "tid": COMPUTE, "ts": origin, "dur": at - origin,
                   "args": {"epoch": epoch, "steps": recorded["steps"], "rank": rank,
                            "epoch_seconds": epoch_seconds,
                            "drawn": f"one step for the epoch's {recorded['steps']}: each part "
                                     f"its mean over them"}})
    events += parts
    timeline = recorded.get("timeline")
    if not timeline:
        return at
    return max(at, collectives(events, epoch, rank, timeline, backward_at))


def collectives(events: list[dict], epoch: int, rank: int, timeline: dict, zero: float) -> float:
    """Add a timeline's gradients (instants) and collectives (complete events, with a flow from
    the bucket's last gradient where known) from `zero`, backward's start in microseconds; where
    the last one ends."""
    where, computing = {"pid": pid(rank), "tid": COLLECTIVES}, {"pid": pid(rank), "tid": COMPUTE}
    end = zero
    for gradient in timeline["gradients"]:
        events.append({"ph": "i", "s": "t", "cat": "ready", "name": "gradient ready", **computing,
                       "ts": zero + gradient["ready"] * MICROSECONDS,
                       "args": {"bytes": gradient["bytes"], "epoch": epoch}})
    ready = bucket_ready(timeline["gradients"], timeline["collectives"])
    for index, (flight, moment) in enumerate(zip(timeline["collectives"], ready), 1):
        launch = zero + flight["launch"] * MICROSECONDS
        finish = zero + flight["end"] * MICROSECONDS
        events.append({"ph": "X", "cat": "collective", "name": f"collective {index}", **where,
                       "ts": launch, "dur": max(finish - launch, 0.0),
                       "args": {"bytes": flight["bytes"], "epoch": epoch,
                                "launch_seconds_from_backward": flight["launch"],
                                "end_seconds_from_backward": flight["end"]}})
        if moment is not None:
            flow = f"e{epoch}r{rank}c{index}"
            events += [{"ph": "s", "cat": "ready", "name": "bucket ready", "id": flow,
                        **computing,
                        "ts": zero + moment * MICROSECONDS},
                       {"ph": "f", "bp": "e", "cat": "ready", "name": "bucket ready", "id": flow,
                        **where, "ts": launch}]
        end = max(end, finish)
    return end


def bucket_ready(gradients: list[dict], flights: list[dict]) -> list[float | None]:
    """Per collective, when its last gradient was ready: the gradients, in the order they were
    ready, taken into each collective until their bytes are its bytes. None from the first
    collective whose bytes are not told or are no such sum (a library that fuses by other rules,
    or micro-batches that each counted their gradients)."""
    found, taken, known = [], 0, True
    for flight in flights:
        size, moment = 0, None
        while known and size < (flight["bytes"] or 0) and taken < len(gradients):
            size += gradients[taken]["bytes"]
            moment = gradients[taken]["ready"]
            taken += 1
        known = known and flight["bytes"] is not None and size == flight["bytes"]
        found.append(moment if known else None)
    return found
