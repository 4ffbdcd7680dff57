"""A short look at what else runs on this machine before a grid starts, and the OpenMP wait
policy PyTorch's CPU cells run with because of it.

A busy laptop marks every row contended and leaves the report empty; said before the first cell,
the user can choose (wait, `--pin-ranks`, a higher `--contention-limit`). The look takes the
machine's CPU time (/proc/stat, through psutil: every process, short-lived ones and interrupts
too) over LOOK_SECONDS, less this process tree's own, as a share of the cores, and names the
busiest other processes.

OpenMP's threads spin while they wait for one another, so PyTorch's intra-op pool spins on a core
another process needs, and collapses beside it (benchmarks/omp_wait.py; docs/numbers.md: beside a
busy loop, passive waiting ran 1.5x the runtime's own; on a quiet machine it cost 19-27%). No one
policy wins both, so `omp_wait auto` takes passive where the look found other processes above its
own threshold (AUTO_PASSIVE_ABOVE, whatever the cells' contention limit, which judges rows and
not how threads wait) and the runtime's own below it, and a row records which ran and why. The
cells of a framework whose threads are not OpenMP's (common.backends.frameworks: `no_omp_wait`)
get policy `none`, and why.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

LOOK_SECONDS = 0.5  # 50 clock ticks a core: a share to about 2%, before every grid
BUSIEST = 3  # other processes named in the warning
# What each policy sets in a cell's environment (the runtime's own: neither of OMP_VARIABLES).
OMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
POLICIES = {"runtime": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
            "active": {"OMP_WAIT_POLICY": "ACTIVE"}}
# `omp_wait auto` waits passively where other processes took more than this share of the cores
# in the look (docs/numbers.md): above the look's own noise (about 2%), and the default
# contention limit's value, so that a grid of default settings warns exactly when it does.
AUTO_PASSIVE_ABOVE = 0.10
# How the threads of each policy auto may choose wait, in words (the busy warning's).
WAITING = {"runtime": "spin a while and then sleep, as the OpenMP runtime does by itself",
           "passive": "sleep at once (passive)",
           "environment": "wait as the environment's OpenMP variables say"}


@dataclass(frozen=True)
class Load:
    """What other processes took of a machine's cores during the look: this one's, or `where`
    names it (a cluster's node)."""
    share: float                              # of all the cores, 0-1
    cores: int
    busiest: tuple[tuple[str, int, float], ...]  # (name, PID, share of one core)
    where: str = ""

    def busy(self, limit: float) -> bool:
        return self.share > limit

    def words(self) -> str:
        named = "; ".join(f"{name} (PID {pid}, {used:.0%} of a core)"
                          for name, pid, used in self.busiest)
        return ((f"on {self.where}, " if self.where else "")
                + f"other processes took {self.share:.0%} of its {self.cores} cores"
                + (f": {named}" if named else ""))


def look_at_load(seconds: float = LOOK_SECONDS) -> Load:
    """The share of the machine's cores that processes outside this one's tree used over
    `seconds`, and the busiest of them."""
    mine = psutil.Process()
    ours = {mine.pid, *(child.pid for child in mine.children(recursive=True))}
    before_total, before = _busy_seconds(), _process_seconds()
    time.sleep(seconds)
    after_total, after = _busy_seconds(), _process_seconds()
    elapsed = after_total[1] - before_total[1]  # every core's seconds, busy or not
    own = sum(after[key][1] - before[key][1] for key in after.keys() & before.keys()
              if key[0] in ours)
    others = max(0.0, after_total[0] - before_total[0] - own)
    used = sorted(((after[key][1] - before[key][1]) / seconds, after[key][0], key[0])
                  for key in after.keys() & before.keys() if key[0] not in ours)
    busiest = tuple((name, pid, share) for share, name, pid in reversed(used[-BUSIEST:])
                    if share >= 0.05)
    cores = psutil.cpu_count() or 1
    return Load(share=min(1.0, others / elapsed) if elapsed > 0 else 0.0, cores=cores,
                busiest=busiest)


def _busy_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of every core since boot (guest time is counted in user's)."""
    times = psutil.cpu_times()._asdict()
    total = sum(value for key, value in times.items() if key not in ("guest", "guest_nice"))
    return total - times["idle"] - times.get("iowait", 0.0), total


def _process_seconds() -> dict[tuple[int, float], tuple[str, float]]:
    """{(PID, start time): (name, CPU seconds)} of every process now."""
    found = {}
    for process in psutil.process_iter(["name", "cpu_times", "create_time"]):
        info = process.info
        if info["cpu_times"] is not None and info["create_time"] is not None:
            found[(process.pid, info["create_time"])] = (
                info["name"], info["cpu_times"].user + info["cpu_times"].system)
    return found


def omp_wait(asked: str, load: Load | None, not_openmp: str = "") -> dict:
    """The wait policy a cell's processes run with, and why: none where its framework's threads
    are not OpenMP's (`not_openmp`: why, Framework.no_omp_wait), else what the grid asked, else
    (auto) what the environment sets, else passive where the look found other processes above
    AUTO_PASSIVE_ABOVE of the cores, the runtime's own where it did not (or nobody looked: a
    probe, a profile, a Slurm node)."""
    if not_openmp:
        return {"policy": "none", "by": f"--omp-wait has nothing to act on: {not_openmp}"}
    if asked != "auto":
        return {"policy": asked, "by": "asked (--omp-wait)"}
    given = {key: os.environ[key] for key in OMP_VARIABLES if key in os.environ}
    if given:
        return {"policy": "environment", "by": "auto: the environment sets "
                + ", ".join(f"{key}={value}" for key, value in given.items()), **given}
    if load is None:
        return {"policy": "runtime", "by": "auto: no look at the machine's load"}
    busy = load.busy(AUTO_PASSIVE_ABOVE)
    return {"policy": "passive" if busy else "runtime",
            "by": f"auto: when the grid started, {load.words()}: {_against_threshold(busy)}"}


def auto_waiting(load: Load) -> str:
    """How the threads of `omp_wait auto` wait after the look `load`, and why, in words: the
    busy warning's, from the choice the rows record."""
    chosen = omp_wait("auto", load)
    if chosen["policy"] == "environment":
        return f"{WAITING['environment']} ({chosen['by']})"
    busy = load.busy(AUTO_PASSIVE_ABOVE)
    return (f"{WAITING[chosen['policy']]}: the load is {_against_threshold(busy)}"
            + ("" if busy else "; --omp-wait passive makes them sleep at once"))


def _against_threshold(busy: bool) -> str:
    return (f"{'above' if busy else 'not above'} --omp-wait auto's threshold of "
            f"{AUTO_PASSIVE_ABOVE:.0%} of the cores, whatever the contention limit")


def omp_environment(environment: Mapping[str, str], chosen: dict) -> dict[str, str]:
    """`environment` with the variables of the policy `chosen`, and without the others (the
    runtime's own: neither)."""
    if chosen["policy"] in ("environment", "none"):
        return dict(environment)
    kept = {key: value for key, value in environment.items() if key not in OMP_VARIABLES}
    return {**kept, **POLICIES[chosen["policy"]]}
