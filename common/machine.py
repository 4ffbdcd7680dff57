"""What this machine has (the cores this process may use, NVIDIA GPUs from `nvidia-smi`) and
what `make setup` installs for it.

Standard library only: `make setup` runs it with the system's python3 before the environment
exists (`python3 common/machine.py --gpu auto` prints the plan as shell variables).

On a machine without NVIDIA GPUs: torch==2.13.0 as pip resolves it (the CPU build on the
project's machines), tensorflow-cpu, JAX's CPU build with Flax and Optax, Ray (for --launcher ray
and its tests), Horovod on gloo. With
GPUs: PyPI's Linux wheel of torch==2.13.0, which is the CUDA build (or a wheel of TORCH_INDEX,
e.g. https://download.pytorch.org/whl/cu128), TensorFlow's `and-cuda` extra (its CUDA libraries
as pip packages), JAX's `cuda12` extra, and Horovod built with NCCL (scripts/build_horovod.sh
does so when nvcc is present and torch sees a GPU).
"""
import argparse
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

TORCH = "torch==2.13.0"  # the pinned version; never let pip resolve a newer one
PYPI = "https://pypi.org/simple"


def cpu_cores() -> int:
    """Cores this process may use: its affinity (taskset, Slurm's binding, a cpuset), fewer where
    its cgroup's CPU quota allows less (a container's --cpus, Slurm's cgroup), rounded down so
    that a cell's threads fit in the quota instead of throttling themselves."""
    allowed = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)
    quota = CpuCgroup.mine().quota_cores()
    return max(1, min(allowed, math.floor(quota))) if quota else allowed


class CpuCgroup:
    """The CPU controller of the cgroup that limits a process: of its cgroup and the ancestors up
    to the mount, the one with the smallest quota (a Slurm job's or a systemd slice's may sit
    above the process's own), v2 (cpu.max, cpu.stat's throttled_usec) or v1 (cpu.cfs_quota_us
    over cpu.cfs_period_us, cpu.stat's throttled_time in ns); `folder` None where there is
    none to read (no cgroup file system, another OS). In a container without a cgroup
    namespace, /proc/self/cgroup names a path of the host's that the container sees as its
    mount's root: the mount's root is then the process's cgroup."""

    def __init__(self, folder: Path | None, version: int):
        self.folder, self.version = folder, version

    @classmethod
    def mine(cls, proc_cgroup: Path = Path("/proc/self/cgroup"),
             root: Path = Path("/sys/fs/cgroup")) -> "CpuCgroup":
        try:
            lines = proc_cgroup.read_text().splitlines()
        except OSError:
            return cls(None, 0)
        for line in lines:  # v1: "4:cpu,cpuacct:/path"
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(","):
                for name in (controllers, "cpu", "cpu,cpuacct"):
                    if (root / name / "cpu.cfs_quota_us").exists():
                        return cls._limiting(root / name, path, 1)
        for line in lines:  # v2: "0::/path"
            if line.startswith("0::") and (root / "cgroup.controllers").exists():
                return cls._limiting(root, line[3:], 2)
        return cls(None, 0)

    @classmethod
    def _limiting(cls, mount: Path, path: str, version: int) -> "CpuCgroup":
        leaf = (mount / path.lstrip("/")).resolve()
        if not leaf.is_dir() or not leaf.is_relative_to(mount.resolve()):
            leaf = mount.resolve()
        chain = [leaf, *[p for p in leaf.parents if p.is_relative_to(mount.resolve())]]
        groups = [cls(folder, version) for folder in chain]
        limited = [g for g in groups if g.quota_cores() is not None]
        return min(limited, key=lambda g: g.quota_cores()) if limited else groups[0]

    def _read(self, name: str) -> str | None:
        try:
            return (self.folder / name).read_text() if self.folder else None
        except OSError:
            return None

    def quota_cores(self) -> float | None:
        """The cores' worth of CPU time the quota allows per period; None: no quota."""
        if self.version == 2:
            text = self._read("cpu.max")
            quota, period = text.split()[:2] if text else ("max", "1")
        else:
            quota, period = self._read("cpu.cfs_quota_us"), self._read("cpu.cfs_period_us")
        if quota is None or period is None or quota.strip() in ("max", "-1"):
            return None
        return int(quota) / int(period)

    def throttled_seconds(self) -> float | None:
        """The time the cgroup's run queues spent throttled so far (summed over CPUs); None
        where unreadable."""
        text = self._read("cpu.stat")
        if not text:
            return None
        counts = dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)
        if "throttled_usec" in counts:
            return int(counts["throttled_usec"]) / 1e6
        if "throttled_time" in counts:
            return int(counts["throttled_time"]) / 1e9
        return None


def nvidia_gpus() -> list[str]:
    """The NVIDIA GPUs `nvidia-smi -L` lists (none when it is absent or fails)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode != 0:
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.startswith("GPU ")]


def wants_gpu(setting: str, gpus: list[str]) -> bool:
    """GPU=1 or GPU=0 decide; GPU=auto (the default) follows what nvidia-smi lists."""
    if setting not in ("auto", "0", "1"):
        raise ValueError(f"GPU={setting!r}: give GPU=1 (CUDA builds), GPU=0 (CPU builds) or "
                         f"leave it unset (auto: CUDA builds when nvidia-smi lists a GPU)")
    return setting == "1" or (setting == "auto" and bool(gpus))


def install_plan(gpu: bool, torch_index: str = "") -> dict[str, str]:
    """What `make setup` installs: pip arguments for torch, the project's extras, and whether the
    framework check must find a GPU."""
    if not gpu:
        return {"TORCH_ARGS": TORCH, "EXTRAS": "tf,jax,ray,dev", "EXPECT_GPU": "0"}
    index = ["--index-url", torch_index] if torch_index else ["--index-url", PYPI]
    return {"TORCH_ARGS": shlex.join([*index, TORCH]),
            "EXTRAS": "tf-gpu,jax-gpu,gpu-watch,ray,dev", "EXPECT_GPU": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print make setup's install plan as shell "
                                                 "variables.")
    parser.add_argument("--gpu", default="auto", help="auto, 0 or 1")
    parser.add_argument("--torch-index", default="", help="a pip index for torch's CUDA wheel")
    args = parser.parse_args(argv)
    gpus = nvidia_gpus()
    try:
        gpu = wants_gpu(args.gpu, gpus)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"# {len(gpus)} NVIDIA GPU(s) listed by nvidia-smi; installing "
          f"{'CUDA' if gpu else 'CPU'} builds", file=sys.stderr)
    for name, value in install_plan(gpu, args.torch_index).items():
        print(f"{name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
