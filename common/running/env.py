"""The environment a row was measured in (printed with the numbers, as PyTorch's DDP benchmark
does)."""
import importlib.metadata
import platform
import resource
import socket
import subprocess
from pathlib import Path

from xbench.common.machine import cpu_cores

PACKAGES = ("torch", "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib", "flax", "optax",
            "horovod", "ray", "numpy", "xbench")
REPO = Path(__file__).resolve().parents[2]


def package_versions():
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def git_commit():
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def capture():
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(), "cpu_count": cpu_cores(),
            "python": platform.python_version(),
            "packages": package_versions(), "git_commit": git_commit()}


def cpu_name():
    """The CPU's model name (for device_name on CPU runs)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_bytes():
    """This process's peak resident memory: the memory figure of a CPU run."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
