"""Where a cell's ranks run, as each rank reads it: the cell's nodes and ports (`Placement`, which
the launcher hands down in the environment), this worker's index, and the node's name.
"""
from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xbench.common.backends.launch_scopes import NODE_ENV, PLACEMENT_ENV, WORKER_PER_DEVICE


@dataclass(frozen=True)
class Placement:
    """One host name per node, as the other nodes reach it, and the first of the consecutive
    ports the cell may use: `port` for a rendezvous, `port + 1 + rank` for worker `rank`; `names`:
    the nodes as the launcher names them (Slurm's node names)."""
    hosts: tuple[str, ...]
    port: int
    names: tuple[str, ...] = ()

    def to_env(self) -> str:
        return json.dumps({"hosts": list(self.hosts), "port": self.port,
                           "names": list(self.names or self.hosts)})

    @classmethod
    def from_env(cls) -> Placement:
        found = json.loads(os.environ[PLACEMENT_ENV])
        return cls(tuple(found["hosts"]), found["port"], tuple(found["names"]))

    def worker_addresses(self, per_node: int) -> list[str]:
        return [f"{host}:{self.port + 1 + node * per_node + i}"
                for node, host in enumerate(self.hosts) for i in range(per_node)]


def task_index() -> int:
    """This worker's rank among the cell's workers of a per-device launch: Slurm's task id, or
    the index common.running.spawn gave it on this machine (its launch scope's environment)."""
    return WORKER_PER_DEVICE.environment.rank_here()


def local_task_index() -> int:
    return WORKER_PER_DEVICE.environment.local_rank_here()


def rank_cores(allowed: list[int], sharing: int, index: int,
               siblings: Callable[[int], int] = lambda core: core) -> list[int]:
    """The cores of the `index`-th of `sharing` ranks that may use the cores `allowed`: an even
    split of them ordered by physical core (`siblings`: a core's first hyperthread sibling), so
    that a rank gets whole physical cores where the split allows (where it does not divide, some
    ranks get one more), or where ranks outnumber cores, one core each, round robin."""
    cores = sorted(allowed, key=lambda core: (siblings(core), core))
    if sharing > len(cores):
        return [cores[index % len(cores)]]
    return sorted(cores[index * len(cores) // sharing:(index + 1) * len(cores) // sharing])


def first_sibling(core: int) -> int:
    """The lowest-numbered hyperthread of `core`'s physical core (itself where unknown)."""
    try:
        listed = Path(f"/sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list")
        return int(re.split(r"[,-]", listed.read_text().strip())[0])
    except (OSError, ValueError):
        return core


def pin_rank(comm) -> None:
    """Pin this rank (every thread it has, and so every thread and process it starts) to its
    share of the cores it may use among the ranks of its node that may use the same ones (a
    collective: every rank calls it). Threads started meanwhile by a thread not yet pinned are
    caught by listing them again until no new one appears."""
    mine = (node_name(), sorted(os.sched_getaffinity(0)))
    sharing = [rank for rank, theirs in enumerate(comm.gather(mine)) if tuple(theirs) == mine]
    cores = rank_cores(mine[1], len(sharing), sharing.index(comm.rank), first_sibling)
    pinned: set[str] = set()
    while new := set(os.listdir("/proc/self/task")) - pinned:
        for thread in new:
            try:
                os.sched_setaffinity(int(thread), cores)
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
        pinned |= new


def node_name() -> str:
    """The node this process runs on, as the launcher names it (a rank that horovodrun started
    is on the host it was given: its HOROVOD_HOSTNAME; one Ray's launcher started, on the Ray
    node it names)."""
    if os.environ.get("HOROVOD_HOSTNAME") and PLACEMENT_ENV in os.environ:
        placement = Placement.from_env()
        if os.environ["HOROVOD_HOSTNAME"] in placement.hosts:
            return placement.names[placement.hosts.index(os.environ["HOROVOD_HOSTNAME"])]
    return (os.environ.get(NODE_ENV) or os.environ.get("SLURMD_NODENAME")
            or socket.gethostname())
