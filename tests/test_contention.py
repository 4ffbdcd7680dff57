"""Contention seen per rank, on hand-made inputs: how pinned ranks split their cores, a cgroup's
quota and throttling (v1 and v2 files), CUDA's device numbers mapped to NVML's devices, other
processes on a rank's GPU (a mocked NVML, in a container too), and the epoch's record and mark."""
import subprocess
import sys
import types

import psutil
import pytest

from xbench.common.machine import CpuCgroup
from xbench.common.measuring import contention
from xbench.common.measuring.contention import epoch_contention, visible_gpus
from xbench.common.running.placement import rank_cores
from xbench.common.running.runner import contention_mark, cores_text


@pytest.mark.parametrize("allowed, sharing, expected", [
    ([0, 1], 2, [[0], [1]]),
    (list(range(6)), 4, [[0], [1, 2], [3], [4, 5]]),
    ([0, 1, 2, 3], 2, [[0, 2], [1, 3]]),  # hyperthreads i and i + 2 of one core stay together
    ([4, 5, 6, 7], 1, [[4, 5, 6, 7]]),
    ([0, 1], 3, [[0], [1], [0]]),  # more ranks than cores: one core each, round robin
])
def test_ranks_split_the_cores_they_share(allowed, sharing, expected):
    def siblings(core):  # 4 logical cores: 2 physical, threads numbered i and i + 2
        return core % 2 if len(allowed) == 4 else core
    assert [rank_cores(allowed, sharing, index, siblings)
            for index in range(sharing)] == expected


def fake_cgroup(tmp_path, lines, files):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "cgroup").write_text("\n".join(lines) + "\n")
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return CpuCgroup.mine(tmp_path / "cgroup", tmp_path / "fs")


def test_a_v1_cgroup_gives_its_quota_and_throttled_time(tmp_path):
    group = fake_cgroup(tmp_path, ["4:memory:/x", "3:cpu,cpuacct:/job/7", "0::/"], {
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/job/7/cpu.cfs_quota_us": "150000\n",
        "cpu,cpuacct/job/7/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/job/7/cpu.stat": "nr_periods 40\nnr_throttled 10\nthrottled_time 5e8\n"
                                      .replace("5e8", "500000000")})
    assert group.version == 1 and group.quota_cores() == 1.5
    assert group.throttled_seconds() == 0.5


def test_in_a_v1_container_the_mount_is_the_processs_cgroup(tmp_path):
    """Docker on a cgroup v1 host: /proc/self/cgroup names the host's path, the container sees
    its own cgroup at the mount's root."""
    group = fake_cgroup(tmp_path, ["3:cpu,cpuacct:/docker/abc123"], {
        "cpu,cpuacct/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/cpu.stat": "throttled_time 0\n"})
    assert group.quota_cores() == 2 and group.throttled_seconds() == 0


def test_a_quota_on_an_ancestor_limits_the_process(tmp_path):
    """Slurm's job cgroup holds the quota; the step's cgroup below it has none."""
    group = fake_cgroup(tmp_path, ["0::/slurm/job_3/step_0"], {
        "cgroup.controllers": "cpu\n",
        "slurm/job_3/cpu.max": "200000 100000\n",
        "slurm/job_3/cpu.stat": "usage_usec 9\nthrottled_usec 250000\n",
        "slurm/job_3/step_0/cpu.max": "max 100000\n"})
    assert group.version == 2 and group.quota_cores() == 2
    assert group.throttled_seconds() == 0.25


def test_without_a_quota_or_a_cgroup_there_is_none(tmp_path):
    unlimited = fake_cgroup(tmp_path / "u", ["0::/"], {"cgroup.controllers": "cpu\n"})
    assert unlimited.quota_cores() is None
    assert CpuCgroup.mine(tmp_path / "absent", tmp_path).quota_cores() is None


def test_the_cell_time_of_a_child_forked_and_reaped_within_the_window_is_the_cells():
    """A DataLoader worker's life in small: a child forked after the first snapshot, burning
    0.3 s of CPU, reaped before the second; its time is in its parent's, on the parent's cores
    (counted by the kernel in ticks of 10 ms, so within one tick)."""
    me = psutil.Process()
    cores = frozenset(me.cpu_affinity())
    before = contention._snapshot([me])
    child = subprocess.Popen([sys.executable, "-c", BURN])
    child.wait()
    after = contention._snapshot([me])
    gained = contention._seconds_on(after, cores) - contention._seconds_on(before, cores)
    assert gained >= 0.3 - 0.011
    assert contention._seconds_on(after, frozenset()) == 0


BURN = """import time
while time.process_time() < 0.3:
    pass
"""


def test_cores_are_read_by_their_number_not_their_line(tmp_path):
    """/proc/stat lists online CPUs only: with cpu1 offline, cpu2 is the second line; interrupts
    are irq and softirq (the 6th and 7th values)."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 0 9 9 0 0 0 0 0 0\n"
                    "cpu0 100 0 100 900 0 50 50 0 0 0\n"
                    "cpu2 300 10 100 500 0 20 30 40 0 0\n"
                    "intr 12345\n")
    assert contention._cores_time(frozenset({2}), str(stat)) == {
        "busy": 410 / contention.TICK, "interrupts": 50 / contention.TICK,
        "steal": 40 / contention.TICK}
    assert contention._cores_time(frozenset({0}), str(stat))["busy"] == 200 / contention.TICK


def test_pinned_ranks_and_pinned_host_memory_are_different_cells():
    import dataclasses

    from tests.report_fixtures import hand_cell
    cell = hand_cell(devices=2)
    keys = {dataclasses.replace(cell, pin_ranks=True).key,
            dataclasses.replace(cell, host_memory="pinned").key, cell.key}
    assert len(keys) == 3


def test_cuda_device_numbers_map_through_cuda_visible_devices():
    assert visible_gpus([0, 1], None) == [0, 1]
    assert visible_gpus([0, 1], "3,1") == [3, 1]
    assert visible_gpus([1], "GPU-aaaa, MIG-bbbb") == ["MIG-bbbb"]


class FakeNvml(types.ModuleType):
    """pynvml with GPUs by index and by UUID, each with the process ids NVML reports."""

    class NVMLError(Exception):
        pass

    def __init__(self, processes):
        super().__init__("pynvml")
        self.processes = processes

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [types.SimpleNamespace(pid=pid) for pid in self.processes[handle]]


def watch(monkeypatch, processes, indices, visible=None):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(processes))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return contention._GpuWatch(indices)


def test_an_nvml_error_leaves_the_gpus_unwatched_not_the_rank_failed(monkeypatch):
    gpus = watch(monkeypatch, {}, [0])

    def lost(handle):
        raise gpus.nvml.NVMLError("GPU is lost")
    gpus.nvml.nvmlDeviceGetComputeRunningProcesses = lost
    assert gpus.others([]) is None


def test_other_processes_on_a_ranks_gpus_are_counted_its_own_are_not(monkeypatch):
    cell = [types.SimpleNamespace(pid=pid) for pid in (100, 101)]
    # CUDA device 0 of this rank is the machine's GPU 2: there, one other process beside rank 101
    gpus = watch(monkeypatch, {2: [101, 555], 0: [100, 777, 778]}, [0], visible="2,0")
    assert gpus.others(cell) == 1
    by_uuid = watch(monkeypatch, {"GPU-x": [100]}, [0], visible="GPU-x")
    assert by_uuid.others(cell) == 0


def test_in_a_container_one_process_per_gpu_is_the_cells(monkeypatch):
    """NVML's host process ids are none of the cell's: one on each GPU is the rank's own."""
    cell = [types.SimpleNamespace(pid=7)]
    assert watch(monkeypatch, {0: [90001]}, [0]).others(cell) == 0
    assert watch(monkeypatch, {0: [90001, 90002], 1: [90003]}, [0, 1]).others(cell) == 1


def rank(node, cores, other, steal=0.0, throttled=None, gpus=None):
    return {"node": node, "cores": cores, "other_cpu_share": other, "steal_share": steal,
            "throttled_share": throttled, "cpu_quota_cores": None, "cpu_per_wall": 0.9,
            "load_1m": 1.0, "other_gpu_processes": gpus}


def test_an_epoch_is_contended_where_any_rank_is_and_names_the_worst():
    quiet = epoch_contention([rank("a", [0], 0.05), rank("a", [1], 0.1)], 0.25)
    assert not quiet["contended"] and quiet["contended_ranks"] == []
    one = epoch_contention([rank("a", [0], 0.0), rank("b", [0, 1], 0.3, 0.1)], 0.25)
    assert one["contended_ranks"] == [1] and one["most_contended_rank"] == 1
    assert (one["other_cpu_share"], one["steal_share"]) == (0.3, 0.1)
    throttled = epoch_contention([rank("a", [0], 0.0, throttled=0.5), rank("a", [1], 0.1)], 0.25)
    assert throttled["contended_ranks"] == [0] and throttled["throttled_share"] == 0.5
    gpu = epoch_contention([rank("a", [0], 0.0, gpus=0), rank("a", [1], 0.0, gpus=2)], 0.25)
    assert gpu["contended_ranks"] == [1] and gpu["other_gpu_processes"] == 2


def test_the_mark_says_which_rank_where_and_what_took_its_cores():
    epochs = [{"contention": epoch_contention(
        [rank("node1", [0, 1, 2, 5], 0.02), rank("node2", [8], 0.45, 0.05, throttled=0.3,
                                                  gpus=1)], 0.25)}]
    mark = contention_mark({"epochs": epochs, "contention_limit": 0.25})
    assert mark == ("CONTENDED: rank 1 (node2, cores 8): other processes used 45% and steal 5% "
                    "of its cores, its cgroup throttled 30% of its quota's time "
                    "(limit 25%), 1 other GPU process(es)")
    assert cores_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_hyperthread_siblings_outside_a_ranks_cores_are_watched(tmp_path):
    """4 logical cores, 2 physical (threads i and i + 2); core 5 lists a range."""
    for core, listed in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3", 5: "4-5"}.items():
        folder = tmp_path / f"cpu{core}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(listed + "\n")
    assert contention.outside_siblings(frozenset({0}), tmp_path) == {2}
    assert contention.outside_siblings(frozenset({0, 2}), tmp_path) == set()
    assert contention.outside_siblings(frozenset({0, 1, 5}), tmp_path) == {2, 3, 4}
    assert contention.outside_siblings(frozenset({7}), tmp_path) == set()  # topology unknown


def test_interrupts_and_busy_siblings_count_against_the_limit():
    """A rank whose own others share is small is contended once its cores' interrupts and
    siblings' other work pass the limit, and the epoch keeps each part and their sum."""
    busy = {**rank("a", [0], 0.04), "interrupt_share": 0.03, "sibling_share": 0.05}
    epoch = epoch_contention([busy, rank("a", [1], 0.02)], 0.10)
    assert epoch["contended_ranks"] == [0]
    assert (epoch["interrupt_share"], epoch["sibling_share"]) == (0.03, 0.05)
    assert epoch["taken_share"] == pytest.approx(0.12)
    mark = contention_mark({"epochs": [{"contention": epoch}], "contention_limit": 0.10})
    assert mark == ("CONTENDED: rank 0 (a, cores 0): other processes used 4%, interrupts 3%, "
                    "busy hyperthread siblings 5% and steal 0% of its cores (limit 10%)")
    assert not epoch_contention([busy], 0.25)["contended"]
