"""A slow network on one machine (the link fault, common.workload.faults): a command run in a
network namespace of its own whose loopback is capped by tc's token bucket (the local launcher's),
or what each node of a cell sends capped on its interface, where the nodes are network
namespaces of this machine (Ray's launcher, common.running.ray_node)."""
import shutil
import subprocess

TOKEN_BUCKET_SECONDS = 0.004  # a capped link's burst: this long at its rate
LOOPBACK_PACKET_BYTES = 64 * 1024  # the loopback's largest packet
ETHERNET_HEADER_BYTES = 14  # what an interface's packet carries beyond its MTU
NODE_CAP = "7862:"  # the handle of the root queue xbench puts on a Ray node's interface


def capped_link(command: list[str], rate: str, bytes_per_second: float) -> list[str]:
    """`command` run in a network namespace of its own (unshare), whose loopback, the only link its
    processes have, is capped by a token bucket at `rate` (tc's tbf): a slow network on one machine
    (the link fault, common.workload.faults). The bucket (`burst_bytes`) holds any packet, so the
    cap holds over any collective's transfer."""
    script = (f"ip link set lo up && tc qdisc add dev lo root tbf rate {rate} burst "
              f"{burst_bytes(bytes_per_second)} latency 100ms && exec \"$@\"")
    return ["unshare", "--net", "--", "sh", "-c", script, "xbench-capped-link", *command]


def burst_bytes(bytes_per_second: float, packet_bytes: int = LOOPBACK_PACKET_BYTES) -> int:
    """A capped link's token bucket: a few milliseconds of its traffic, and at least two of the
    largest packets the link carries (`packet_bytes`: tbf drops a packet larger than its bucket,
    for good). No more: what the bucket holds after a pause crosses at once, faster than the
    rate (on a node's interface, with packets of its MTU, a few milliseconds' worth)."""
    return max(2 * packet_bytes, int(bytes_per_second * TOKEN_BUCKET_SECONDS))


def interface_cap(interface: str, mtu: int, rate: str, bytes_per_second: float) -> list[str]:
    """The tc command that caps what leaves `interface` (of `mtu`) at `rate` (a Ray node's link,
    in a network namespace of its own: every byte one node sends another crosses one such cap),
    with a token bucket of xbench's own handle (NODE_CAP)."""
    burst = burst_bytes(bytes_per_second, mtu + ETHERNET_HEADER_BYTES)
    return ["tc", "qdisc", "add", "dev", interface, "root", "handle", NODE_CAP, "tbf", "rate",
            rate, "burst", str(burst), "latency", "100ms"]


def interface_uncap(interface: str | None) -> None:
    """Lift xbench's cap from `interface` where it has one (one a lost Ray worker left
    included); any other queueing there stays."""
    if interface is None:
        return
    shown = subprocess.run(["tc", "qdisc", "show", "dev", interface, "root"], capture_output=True,
                           text=True)
    if f"qdisc tbf {NODE_CAP} " in shown.stdout:
        subprocess.run(["tc", "qdisc", "del", "dev", interface, "root"], capture_output=True)


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
