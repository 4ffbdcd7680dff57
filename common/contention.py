"""What else used the machine while a cell's epochs were timed.

A shared machine turns noise into numbers that look like facts: a rank that loses its core to
another job makes every other rank wait in the next all-reduce. So every timed epoch records the
CPU time the rest of the machine used (from /proc/stat, less the CPU time of the cell's own
processes), the steal time of the hypervisor, the load average, and each rank's CPU-time / wall
ratio; on GPUs, other processes holding the cell's GPUs (NVML, through the optional nvidia-ml-py).
An epoch whose others and steal used more than the cell's `contention_limit` share of the cores
makes the row `contended`.

The cell's processes carry XBENCH_CELL=<token> in their environment (the runner sets it); they
are found once, before the first epoch, so that no epoch pays for a scan of /proc.
"""
import os
import time

import psutil

CELL_TOKEN = "XBENCH_CELL"


def cell_processes() -> list[psutil.Process]:
    """This cell's processes (its launcher and ranks), or this process alone outside a cell."""
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


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:  # a process of the cell that has ended
            continue
    return total


def _machine():
    """(busy, steal) CPU seconds of the whole machine so far, over all its cores."""
    times = psutil.cpu_times()
    busy = sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
    return busy, getattr(times, "steal", 0.0)


class ContentionProbe:
    """Read at the start and the end of each timed epoch, outside its clock. Every rank reports
    its own CPU-time / wall ratio; the reporting rank (`watch_machine`) also reads the machine."""

    def __init__(self, watch_machine: bool, gpu_indices: list[int] | None = None):
        self.watch_machine = watch_machine
        self.me = psutil.Process()
        self.cell = cell_processes() if watch_machine else []
        self.cores = psutil.cpu_count() or 1
        self.gpus = _GpuWatch(gpu_indices) if watch_machine and gpu_indices else None

    def start(self) -> None:
        self.wall = time.perf_counter()
        self.own = _cpu_seconds([self.me])
        if self.watch_machine:
            self.machine, self.cell_cpu = _machine(), _cpu_seconds(self.cell)

    def stop(self) -> dict:
        """{"cpu_per_wall": ...} on every rank, plus on the reporting rank the machine's share of
        the cores used by other processes and by steal, the 1-minute load average, and other
        GPU processes (None where not watched)."""
        wall = time.perf_counter() - self.wall
        record = {"cpu_per_wall": (_cpu_seconds([self.me]) - self.own) / wall if wall > 0 else None}
        if self.watch_machine:
            busy, steal = _machine()
            others = (busy - self.machine[0]) - (_cpu_seconds(self.cell) - self.cell_cpu)
            capacity = wall * self.cores
            record.update(other_cpu_share=max(0.0, others) / capacity if capacity else None,
                          steal_share=(steal - self.machine[1]) / capacity if capacity else None,
                          load_1m=os.getloadavg()[0],
                          other_gpu_processes=self.gpus.others(self.cell) if self.gpus else None)
        return record


class _GpuWatch:
    """Other processes on the cell's GPUs, through NVML (nvidia-ml-py; absent: not watched)."""

    def __init__(self, indices):
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        except Exception:  # noqa: BLE001 - no NVML library, no driver: GPUs are not watched
            self.nvml = None

    def others(self, cell):
        if self.nvml is None:
            return None
        mine = {p.pid for p in cell}
        pids = set()
        for handle in self.handles:
            for process in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                pids.add(process.pid)
        return len(pids - mine)


def epoch_contention(stopped: list[dict], limit: float) -> dict:
    """One epoch's contention record from every rank's `ContentionProbe.stop()` (rank 0 first)."""
    machine = stopped[0]
    share = (machine.get("other_cpu_share") or 0.0) + (machine.get("steal_share") or 0.0)
    return {"other_cpu_share": machine.get("other_cpu_share"),
            "steal_share": machine.get("steal_share"), "load_1m": machine.get("load_1m"),
            "other_gpu_processes": machine.get("other_gpu_processes"),
            "cpu_per_wall_per_rank": [r["cpu_per_wall"] for r in stopped],
            "contended": share > limit or bool(machine.get("other_gpu_processes"))}
