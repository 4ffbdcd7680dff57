"""What else used the cores and GPUs each rank of a cell ran on while its epochs were timed.

A shared machine turns noise into numbers that look like facts: a rank that loses its core to
another job makes every other rank wait in the next all-reduce. Judged against all of a node's
cores, one stolen core of 64 is 1.6% and goes unseen; so every rank watches its own:

- the cores it may use (its affinity; with `pin_ranks`, its own share of the node's cores);
- the CPU time other processes took on them: /proc/stat per core (by its cpuN number; user, nice
  and system time), less the CPU time of the cell's processes, each process's time counted on
  the cores its affinity allows, in proportion;
- the time its cores spent in interrupts (irq and softirq), which the kernel charges to no
  process: another job's network and disk traffic, and the cell's own (a rank's all-reduce over
  loopback or a NIC), which cannot be told apart, so it counts against the cell too; the row
  keeps it apart (`interrupt_share`) for a reader to judge;
- its cores' hyperthread siblings outside them: what other processes ran there (user, nice,
  system, irq and softirq, less the cell's own time there) shares the physical cores the rank
  computes on, and counts as taken from it (`sibling_share`, per second and per core of the
  rank);
- the hypervisor's steal on them, and its cgroup's throttling (the time its run queues were
  throttled by the CPU quota, cpu.stat, per second and per core of the quota; the cell's own
  threads outgrowing the quota throttle it too, and that also makes its times not the
  machine's);
- its own CPU time / wall time;
- on GPUs, the other processes on the GPUs it drives (NVML, through the optional nvidia-ml-py),
  its CUDA device numbers mapped through CUDA_VISIBLE_DEVICES to NVML's devices.

The cell's processes carry XBENCH_CELL=<token> in their environment (the runner sets it). They
are listed afresh before each epoch's clock starts and after it stops (outside the clock), and
their CPU time includes their reaped children's, so a process forked within an epoch (a
DataLoader worker) counts as the cell's, not as another load. (A process of the cell that ended
but was not yet reaped, or was reparented outside the cell, takes its time with it: that time
counts as another load's.) An epoch is contended when on any rank others, interrupts, busy
siblings, steal and throttling took more than the cell's `contention_limit` of its cores (10% by
default: verdicts resolve effects of a few per cent), or another process used one of its GPUs.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from xbench.common.machine import CpuCgroup

CELL_TOKEN = "XBENCH_CELL"

# Per process (by pid and start time, so that a reused pid is another process): its CPU seconds,
# its reaped children's included, and the cores it may run on.
Snapshot = dict[tuple[int, float], tuple[float, frozenset[int]]]
TICK = os.sysconf("SC_CLK_TCK")  # /proc/stat's unit, per second


def cell_processes() -> list[psutil.Process]:
    """This node's processes of this cell (its launcher, ranks and their workers), or this
    process alone outside a cell."""
    token = os.environ.get(CELL_TOKEN)
    if not token:
        return [psutil.Process()]
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(CELL_TOKEN) == token:
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found or [psutil.Process()]


def _snapshot(processes: list[psutil.Process]) -> Snapshot:
    taken = {}
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                seconds = times.user + times.system + times.children_user + times.children_system
                taken[(process.pid, process.create_time())] = (seconds,
                                                               frozenset(process.cpu_affinity()))
        except psutil.Error:  # a process of the cell that has ended
            continue
    return taken


def _seconds_on(snapshot: Snapshot, cores: frozenset[int]) -> float:
    """The snapshot's CPU seconds that fell on `cores`, each process's spread evenly over the
    cores it may use."""
    return sum(seconds * len(allowed & cores) / len(allowed)
               for seconds, allowed in snapshot.values() if allowed)


def _cores_time(cores: frozenset[int], stat: str = "/proc/stat") -> dict[str, float]:
    """CPU seconds so far of `cores`, from /proc/stat's cpuN lines by their number (only online
    CPUs are listed, so a line's position is not its number): busy (user, nice and system;
    guest time is inside user), interrupts (irq and softirq) and steal."""
    ticks = {"busy": 0, "interrupts": 0, "steal": 0}
    with open(stat) as lines:
        for line in lines:
            name, *values = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                numbers = [int(v) for v in values] + [0] * (8 - len(values))
                ticks["busy"] += numbers[0] + numbers[1] + numbers[2]
                ticks["interrupts"] += numbers[5] + numbers[6]
                ticks["steal"] += numbers[7]
    return {name: count / TICK for name, count in ticks.items()}


def outside_siblings(cores: frozenset[int],
                     sysfs: Path = Path("/sys/devices/system/cpu")) -> frozenset[int]:
    """The hyperthread siblings of `cores` that are not among them (none where the topology
    is unknown or a core has no sibling)."""
    siblings: set[int] = set()
    for core in cores:
        try:
            listed = (sysfs / f"cpu{core}" / "topology" / "thread_siblings_list").read_text()
        except OSError:
            continue
        for part in listed.strip().split(","):
            first, _, last = part.partition("-")
            siblings.update(range(int(first), int(last or first) + 1))
    return frozenset(siblings - cores)


class ContentionProbe:
    """One rank's watch over its cores and GPUs, read around each timed epoch: `list_cell()`
    before the epoch's barrier (it scans /proc), `start()` after it, `stop()` once the clock
    stopped."""

    def __init__(self, node: str, gpu_indices: list[int] | None = None):
        self.node = node  # as the launcher names it (common.running.placement.node_name)
        self.me = psutil.Process()
        self.cgroup = CpuCgroup.mine()
        self.gpus = _GpuWatch(gpu_indices) if gpu_indices else None

    def _own_seconds(self) -> float:
        times = self.me.cpu_times()
        return times.user + times.system

    def list_cell(self) -> None:
        self.cell = cell_processes()

    def start(self) -> None:
        self.cores = frozenset(os.sched_getaffinity(0))
        self.siblings = outside_siblings(self.cores)
        self.wall = time.perf_counter()
        self.own = self._own_seconds()
        self.cell_start = _snapshot(self.cell)
        self.cores_start = _cores_time(self.cores)
        self.siblings_start = _cores_time(self.siblings)
        self.throttled = self.cgroup.throttled_seconds()

    def stop(self) -> dict:
        """This rank's record of the epoch: its node and cores, the shares of its cores' time
        that other processes, interrupts, busy siblings outside its cores and steal took, the
        share of its cgroup's quota periods that were throttled, its own CPU time / wall, the
        node's 1-minute load, and the other processes on its GPUs (None where not watched)."""
        self.cell = cell_processes()  # the scan first: what follows reads one moment, as start did
        cell = _snapshot(self.cell)
        cores, siblings = _cores_time(self.cores), _cores_time(self.siblings)
        wall = time.perf_counter() - self.wall
        capacity = wall * len(self.cores)

        def others_on(on: frozenset[int], now: dict, then: dict, counted: tuple) -> float:
            """CPU seconds on `on` in `counted` (of _cores_time) that the cell did not use."""
            used = sum(now[name] - then[name] for name in counted)
            return max(0.0, used - (_seconds_on(cell, on) - _seconds_on(self.cell_start, on)))

        def share(seconds: float) -> float | None:
            return seconds / capacity if capacity else None

        own = self._own_seconds() - self.own
        return {"node": self.node, "cores": sorted(self.cores),
                "other_cpu_share": share(others_on(self.cores, cores, self.cores_start,
                                                   ("busy",))),
                "interrupt_share": share(cores["interrupts"]
                                         - self.cores_start["interrupts"]),
                "sibling_share": share(others_on(self.siblings, siblings, self.siblings_start,
                                                 ("busy", "interrupts"))),
                "steal_share": share(cores["steal"] - self.cores_start["steal"]),
                "throttled_share": self._throttled_share(wall),
                "cpu_quota_cores": self.cgroup.quota_cores(),
                "cpu_per_wall": own / wall if wall > 0 else None,
                "load_1m": os.getloadavg()[0],
                "other_gpu_processes": self.gpus.others(self.cell) if self.gpus else None}

    def _throttled_share(self, wall: float) -> float | None:
        """Throttled time per second of the epoch and per core of the quota (None: no quota)."""
        quota, now = self.cgroup.quota_cores(), self.cgroup.throttled_seconds()
        if quota is None or now is None or self.throttled is None or wall <= 0:
            return None
        return (now - self.throttled) / (wall * quota)


def visible_gpus(indices: list[int], visible: str | None) -> list[int | str]:
    """The NVML devices behind CUDA device numbers `indices`: CUDA_VISIBLE_DEVICES' entries
    (indices in PCI bus order, which the runner sets as CUDA_DEVICE_ORDER, or GPU-/MIG- UUIDs),
    or the numbers themselves where it is unset."""
    if visible is None:
        return list(indices)
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    return [int(entries[i]) if entries[i].isdigit() else entries[i] for i in indices]


class _GpuWatch:
    """Other processes on one rank's GPUs, through NVML (nvidia-ml-py; absent: not watched).

    NVML names processes by the host's process ids; in a container those are not the ids the
    cell sees, so where no process on a GPU is one of the cell's, one process on it (the rank's
    own) is taken to be the cell's and the rest are others. That miscounts where several of the
    cell's processes open one GPU (a stray context of every rank on GPU 0)."""

    def __init__(self, indices: list[int]):
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByUUID(device) if isinstance(device, str)
                            else pynvml.nvmlDeviceGetHandleByIndex(device)
                            for device in visible_gpus(indices,
                                                       os.environ.get("CUDA_VISIBLE_DEVICES"))]
        except Exception:  # noqa: BLE001 - no NVML library, no driver: GPUs are not watched
            self.nvml = None

    def others(self, cell: list[psutil.Process]) -> int | None:
        """Other processes on the GPUs (None: NVML could not say, e.g. a GPU lost, or a MIG or
        vGPU device that does not list its processes)."""
        if self.nvml is None:
            return None
        mine, others = {p.pid for p in cell}, set()
        for handle in self.handles:
            try:
                running = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self.nvml.NVMLError:
                return None
            pids = {p.pid for p in running}
            if pids & mine:
                others |= pids - mine
            else:
                others |= set(sorted(pids)[1:])
        return len(others)


TAKEN = ("other_cpu_share", "interrupt_share", "sibling_share", "steal_share", "throttled_share")


def taken_share(record: dict) -> float:
    """The share of a rank's cores that others, interrupts, busy siblings, steal and throttling
    took (a rank's or an epoch's record; a part an older row lacks counts 0)."""
    return sum(record.get(name) or 0.0 for name in TAKEN)


def epoch_contention(stopped: list[dict], limit: float) -> dict:
    """One epoch's contention record from every rank's `ContentionProbe.stop()`, rank by rank:
    the most contended rank's shares (a contended one first) and their sum (`taken_share`, for a
    reader who holds a stricter limit), every rank's record, whether any rank's others,
    interrupts, busy siblings, steal and throttling passed `limit` of its cores or its GPUs had
    others, and the most other GPU processes any rank saw."""
    contended_ranks = [r for r, rank in enumerate(stopped)
                       if taken_share(rank) > limit or rank.get("other_gpu_processes")]
    worst = max(range(len(stopped)), key=lambda r: (r in contended_ranks, taken_share(stopped[r])))
    gpus = [r["other_gpu_processes"] for r in stopped if r.get("other_gpu_processes") is not None]
    return {**{name: stopped[worst].get(name) for name in TAKEN},
            "taken_share": taken_share(stopped[worst]),
            "load_1m": max((r.get("load_1m") or 0.0) for r in stopped),
            "other_gpu_processes": max(gpus) if gpus else None,
            "cpu_per_wall_per_rank": [r.get("cpu_per_wall") for r in stopped],
            "most_contended_rank": worst, "contended_ranks": contended_ranks,
            "per_rank": stopped, "contended": bool(contended_ranks)}
