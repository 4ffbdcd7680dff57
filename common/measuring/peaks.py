"""This machine's peaks (its limits), as `xbench probe` measures them with the frameworks' own
kernels and collectives (the report's denominators; the file they are kept in is
common.results.probes).

- Matmul: C = A @ B of two n x n matrices, 2 n^3 FLOPs, timed `MATMUL_REPEATS` times after a
  warm-up; GFLOP/s as the median with the slowest and fastest repeat. On a CPU it is measured at
  every thread count a cell's processes can have on one node, since a CPU "device" is its share of
  the cores; on a GPU per device, at each precision the device has.
- All-reduce: nccl-tests' conventions. Each repeat starts after a barrier; its time runs from
  when the last rank launched it to its completion (`last_launch_seconds`), the basis of a row's
  collective time (in flight less the wait for the slowest rank); algbw = bytes / time, busbw =
  algbw x 2(N-1)/N (the bytes each link carries in a ring), at the byte sizes of the models'
  gradients.

Framework-free: the frameworks' parts of the probe (pt_backend.probe, tf_backend.probe,
jax_backend.probe) time the kernels and hand their timings here.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xbench.common.backends.collectives import Collectives

MATMUL_REPEATS = 7
ALL_REDUCE_WARMUP = 3
ALL_REDUCE_REPEATS = 20


def matmul_record(precision: str, size: int, threads: int | None, seconds: list[float]) -> dict:
    """The GFLOP/s of `len(seconds)` timed n x n matmuls (median, slowest, fastest)."""
    rates = sorted(2 * size ** 3 / s / 1e9 for s in seconds)
    return {"precision": precision, "size": size, "threads": threads,
            "gflops": statistics.median(rates), "gflops_low": rates[0], "gflops_high": rates[-1],
            "repeats": len(rates)}


def time_matmul(multiply: Callable[[], Any], sync: Callable[[], None],
                repeats: int = MATMUL_REPEATS) -> list[float]:
    """Seconds of each of `repeats` calls of `multiply` (after one untimed call)."""
    multiply()
    sync()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        multiply()
        sync()
        seconds.append(time.perf_counter() - started)
    return seconds


def time_all_reduce(comm: Collectives, make_buffer: Callable[[int], Any],
                    sync: Callable[[], None], sizes: list[int],
                    repeats: int = ALL_REDUCE_REPEATS) -> list[dict] | None:
    """Every process calls this; rank 0 gets one record per byte size in `sizes`, the others
    None. `make_buffer(bytes)`: a float32 tensor of the framework that `comm.sum` reduces, kept
    for every repeat of its size (as a step's gradients are)."""
    records = []
    for size in sizes:
        buffer = make_buffer(size)
        for _ in range(ALL_REDUCE_WARMUP):
            comm.sum(buffer)
        sync()
        seconds = []
        for _ in range(repeats):
            comm.barrier()
            started = time.perf_counter()
            comm.sum(buffer)
            sync()
            seconds.append(time.perf_counter() - started)
        records.append(all_reduce_record(size, comm.world,
                                         last_launch_seconds(comm.gather(seconds))))
    return records if comm.rank == 0 else None


def last_launch_seconds(by_rank: list[list[float]]) -> list[float]:
    """Per repeat, its time from the last rank's launch to its completion: the shortest
    of the ranks' launch-to-completion times (`by_rank`, one list per rank). An all-reduce
    completes on every rank together, so the rank that launched last waited for nobody; the
    others' times also hold how much later it left the barrier, the wait for the slowest rank
    that a row's collective time leaves out (common.measuring.attribution: in flight less
    waiting). The slowest rank's time mixed the two: Horovod's barrier is seen done by each
    rank polling with 1 ms naps, and its ranks left it up to 7 ms apart on this 2-core machine,
    against an all-reduce of 1.5 MiB that takes 1-4 ms there."""
    return [min(times) for times in zip(*by_rank)]


def all_reduce_record(size: int, world: int, seconds: list[float]) -> dict:
    """nccl-tests' figures of one size: the median time, algbw and busbw (bytes/s), and busbw at
    the slowest and fastest repeat."""
    median = statistics.median(seconds)
    return {"bytes": size, "world_size": world, "seconds": median, "repeats": len(seconds),
            "algbw": size / median, "busbw": bus_bandwidth(size / median, world),
            "busbw_low": bus_bandwidth(size / max(seconds), world),
            "busbw_high": bus_bandwidth(size / min(seconds), world)}


def bus_bandwidth(algbw: float, world: int) -> float:
    """busbw = algbw x 2(N-1)/N: what each link carries in a ring all-reduce (nccl-tests)."""
    return algbw * 2 * (world - 1) / world


def cell_threads(cores: int, devices_per_node: int, threads_per_device: int) -> int:
    """Compute threads a CPU cell's processes on one node have together (at most the cores)."""
    return min(cores, devices_per_node * threads_per_device)


def peak_flops(matmul: list[dict], framework: str, device_type: str, nodes: int,
               devices_per_node: int, threads_per_device: int, cores: int,
               precision: str = "fp32") -> dict | None:
    """What the cell's devices can do together by the probe at `precision` (the math the cell's
    framework ran its dominant layers in: fp32, or tf32 on a GPU that allowed it): {"flops":
    FLOP/s, "basis": text}, or None when the probe lacks the framework's matmul at that
    precision on this device (at these threads). On a GPU the per-device rate times the devices;
    on a CPU a "device" is its share of the cores, so a node's peak is the rate measured with all
    the threads the cell's processes have there together (not N times a one-thread rate), times
    the nodes."""
    threads = (cell_threads(cores, devices_per_node, threads_per_device)
               if device_type == "cpu" else None)
    found = [m for m in matmul if m["framework"] == framework and m["device_type"] == device_type
             and m["precision"] == precision and m["threads"] == threads]
    if not found:
        return None
    gflops = found[-1]["gflops"]
    if device_type == "cpu":
        return {"flops": nodes * gflops * 1e9,
                "basis": f"{framework} {precision} matmul, {threads} thread(s): "
                         f"{gflops:,.1f} GFLOP/s" + (f" x {nodes} nodes" if nodes > 1 else "")}
    return {"flops": nodes * devices_per_node * gflops * 1e9,
            "basis": f"{framework} {precision} matmul: {gflops:,.1f} GFLOP/s per GPU x "
                     f"{nodes * devices_per_node}"}


def flop_utilisation(training_flops: float, rate: float, peak: float) -> float:
    """Model FLOP utilisation: a training step's FLOPs per sample
    (common.workload.models.SpecModel.training_flops_per_sample) x samples per second, over the peak
    FLOP/s."""
    return training_flops * rate / peak


def probe_all_reduce(all_reduce: list[dict], library: str, device_type: str, nodes: int,
                     world: int, size: int) -> dict | None:
    """The probe's all-reduce record of `library` at this size and placement (the newest)."""
    found = [a for a in all_reduce if (a["library"], a["device_type"], a["nodes"],
                                       a["world_size"], a["bytes"])
             == (library, device_type, nodes, world, size)]
    return found[-1] if found else None
