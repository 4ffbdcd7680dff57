"""A slow network on one machine (the link fault, common.workload.faults): a command run in a
network namespace of its own whose loopback is capped by tc's token bucket."""
import shutil
import subprocess

TOKEN_BUCKET_SECONDS = 0.004  # a capped link's burst: this long at its rate
LEAST_BURST_BYTES = 128 * 1024  # the least burst: a 64 KiB loopback packet fits twice


def capped_link(command: list[str], rate: str, bytes_per_second: float) -> list[str]:
    """`command` run in a network namespace of its own (unshare), whose loopback, the only link its
    processes have, is capped by a token bucket at `rate` (tc's tbf): a slow network on one machine
    (the link fault, common.workload.faults). The bucket holds a few milliseconds of traffic and at
    least two of the loopback's largest packets (64 KiB and their headers: tbf drops a packet larger
    than its bucket, for good), so the cap holds over any collective's transfer."""
    burst = max(LEAST_BURST_BYTES, int(bytes_per_second * TOKEN_BUCKET_SECONDS))
    script = (f"ip link set lo up && tc qdisc add dev lo root tbf rate {rate} burst {burst} "
              f"latency 100ms && exec \"$@\"")
    return ["unshare", "--net", "--", "sh", "-c", script, "xbench-capped-link", *command]


def namespaces_refused() -> str | None:
    """Why this process may not run a cell in a capped network namespace here, or None."""
    missing = [c for c in ("unshare", "ip", "tc") if shutil.which(c) is None]
    if missing:
        return (f"a capped link needs {', '.join(missing)} (util-linux, iproute2), which is "
                f"not on PATH here")
    try:
        tried = subprocess.run(capped_link(["true"], "1gbit", 1.25e8), capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"xbench could not start a network namespace here: {e}"
    if tried.returncode != 0:
        return (f"xbench may not create a network namespace with a capped loopback here (it "
                f"needs root, or CAP_NET_ADMIN): {tried.stderr.strip()[:300]}")
    return None
