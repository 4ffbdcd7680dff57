"""What the dry run measures of this machine, kept between runs (in $XBENCH_CACHE/timings, one
file per host): a model's PyTorch throughput probe, and a backend's start-up (a fresh interpreter
importing the module its ranks run). Each entry is keyed by what it measured and the versions
that decide it (the model's name, which for a model file holds its digest; the batch; PyTorch's
or the backend's packages' versions), so a new version is measured afresh. The grid run after a
dry run, and the next dry run, read them instead of probing again: a probe costs seconds to a
minute of a busy machine. An entry that is not what was written (damaged by hand or by the disk)
is measured again.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from xbench.common.backends.start import Start, installed_version
from xbench.common.children import ask
from xbench.common.shapes import NUMBER, is_kind
from xbench.common.workload.model_file import cache_root, cache_written

PROBE_BATCH, PROBE_STEPS = 128, 20
PROBE_SECONDS = 600  # a probe's own limit: a few seconds here, far more on a busy machine
RATES = ("training", "forward")  # a throughput probe's samples per second


def timings_path() -> Path:
    return cache_root() / "timings" / f"{socket.gethostname()}.json"


def kept_timings() -> dict:
    """Every entry kept for this host ({} where there is no file, or it is not JSON)."""
    try:
        kept = json.loads(timings_path().read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def kept_or_measured(key: str, fields: tuple[str, ...],
                     measure: Callable[[], dict | None] | None) -> tuple[dict | None, bool]:
    """The entry `key` (its `fields` positive numbers), else what `measure` gives, kept whole
    (None: nothing is measured). Also whether it was measured now."""
    found = kept_timings().get(key)
    if isinstance(found, dict) and all(is_kind(found.get(f), NUMBER) and found[f] > 0
                                       for f in fields):
        return found, False
    measured = measure() if measure else None
    if measured is not None:
        path = timings_path()
        partial = path.with_name(f"{path.name}.{os.getpid()}.part")
        with cache_written("this machine's timings"):
            path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps({**kept_timings(), key: measured}, indent=1))
            partial.replace(path)
    return measured, measured is not None


def model_rates(model: str, measure: bool) -> tuple[dict | None, bool]:
    """{"training", "forward"}: samples per second of `model` on this machine's CPU with every
    core, kept or (where `measure`) probed now (None without PyTorch, or where the probe gave no
    rate: a model file's pytorch() that fails there, say). The probe is a process of its own,
    ended whole, a model file's processes too, however it ends."""
    def probe() -> dict | None:
        ended = ask([sys.executable, "-m", "xbench.pt_backend.throughput", model,
                     str(PROBE_BATCH), str(PROBE_STEPS)], PROBE_SECONDS)
        answer = ended.answer if isinstance(ended.answer, dict) else {}
        rates = {"training": answer.get("samples_per_second"),
                 "forward": answer.get("forward_samples_per_second")}
        return rates if ended.returncode == 0 and all(
            is_kind(v, NUMBER) and v > 0 for v in rates.values()) else None
    return kept_or_measured(probe_key(model), RATES, probe if measure else None)


def probe_key(model: str) -> str:
    return f"throughput {model} batch {PROBE_BATCH} torch {installed_version('torch')}"


def start_key(backend: Start) -> str:
    return f"start {rank_module(backend)} {backend.describe()}"


def rank_module(backend: Start) -> str:
    return backend.traits.rank.split(":")[0]


def start_seconds(backend: Start, measure: bool) -> tuple[float | None, bool]:
    """Seconds a fresh interpreter takes to import the module `backend`'s ranks run (its
    framework, its wrapper's libraries, xbench's loop): what each of its processes pays before
    it reads data; kept or (where `measure`) measured now."""
    module = rank_module(backend)

    def timed() -> dict | None:
        started = time.perf_counter()
        ended = ask([sys.executable, "-c", f"import {module}"], PROBE_SECONDS)
        return {"seconds": time.perf_counter() - started} if ended.returncode == 0 else None
    found, now = kept_or_measured(start_key(backend), ("seconds",),
                                  timed if measure else None)
    return (found["seconds"] if found else None), now
