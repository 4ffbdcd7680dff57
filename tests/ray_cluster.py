"""A real Ray cluster of two nodes on this machine, for tests/test_ray.py: each node a network
namespace of its own (`ip netns`), joined to the machine by a bridge with an address of its own
on a private subnet no interface here uses, and its own /etc/hosts there (`ip netns exec` puts
/etc/netns/NAME/hosts over /etc/hosts), where the machine's name is the node's address, as a
cluster's node resolves its own name; in each, a Ray node started by `ray start --block`, the head
in the first. Nothing reaches a network beyond this machine: the bridge forwards nowhere.

Ended by what it started, never by a name: each `ray start` by its PID (SIGTERM: it ends its Ray
processes), then any process left in its namespace (`ip netns pids`), then the namespaces, the
bridge, the hosts files and Ray's folder. Needs root and iproute2, as the Slurm cluster needs
root.
"""
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 6379  # in the head's own namespace: no other Ray's
START_SECONDS = 120
STOP_SECONDS = 30
OBJECT_STORE_BYTES = 100 * 2**20  # Ray's least is 75 MiB; the cells put nothing there
# Reports nothing home; no token: Ray turns token authentication on where it finds one in
# ~/.ray, and a Ray of its own writes one there (its nodes here are reachable from this machine
# alone)
ENVIRONMENT = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@dataclass(frozen=True)
class TwoNodes:
    """The cluster as the tests reach it: the head's address, the nodes' addresses (Ray names
    each node by its address), and their namespaces."""
    address: str
    nodes: tuple[str, ...]
    namespaces: tuple[str, ...]


def free_subnet() -> int:
    """N of a 10.213.N.0/24 no interface here has an address in."""
    used = {found.address for addresses in psutil.net_if_addrs().values() for found in addresses}
    free = [n for n in range(1, 255) if not any(a.startswith(f"10.213.{n}.") for a in used)]
    return random.choice(free)


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def two_nodes() -> Iterator[TwoNodes]:
    """The cluster, up while the block runs; everything it made is gone after."""
    subnet = free_subnet()
    bridge, prefix = f"xbray{subnet}", f"10.213.{subnet}"
    namespaces = tuple(f"xbray{subnet}-{node}" for node in (1, 2))
    addresses = tuple(f"{prefix}.{node}" for node in (1, 2))
    temporary = Path(tempfile.mkdtemp(prefix="xbray-", dir="/tmp"))  # short: Ray's socket paths
    started: list[subprocess.Popen] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{prefix}.254/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for namespace, address, node in zip(namespaces, addresses, (1, 2)):
            _namespace(namespace, address, f"{bridge}h{node}", bridge)
        head = f"{addresses[0]}:{HEAD_PORT}"
        common = ["--num-cpus", "1", "--object-store-memory", str(OBJECT_STORE_BYTES),
                  "--disable-usage-stats", "--block"]
        started.append(_ray_node(namespaces[0], temporary / "head.log", [
            "--head", "--node-ip-address", addresses[0], "--port", str(HEAD_PORT),
            "--include-dashboard", "false", "--temp-dir", str(temporary / "ray"), *common]))
        _wait_for_nodes(head, 1, started, temporary)  # a node joins a head that answers
        started.append(_ray_node(namespaces[1], temporary / "node.log", [
            "--address", head, "--node-ip-address", addresses[1], *common]))
        _wait_for_nodes(head, 2, started, temporary)
        yield TwoNodes(head, addresses, namespaces)
    finally:
        for process in reversed(started):
            _stop(process)
        for namespace in namespaces:
            _end_namespace(namespace)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        shutil.rmtree(temporary, ignore_errors=True)


def _namespace(namespace: str, address: str, link: str, bridge: str) -> None:
    """A network namespace with an interface on the bridge at `address`, its loopback up, and
    the machine's name resolving to `address` there."""
    hosts = Path("/etc/netns") / namespace
    hosts.mkdir(parents=True, exist_ok=True)
    (hosts / "hosts").write_text(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n")
    _ip("netns", "add", namespace)
    _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
    _ip("link", "set", link, "master", bridge, "up")
    _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
    _ip("-n", namespace, "link", "set", "eth0", "up")
    _ip("-n", namespace, "link", "set", "lo", "up")


def _ray_node(namespace: str, log: Path, arguments: list[str]) -> subprocess.Popen:
    with open(log, "w") as output:
        return subprocess.Popen(["ip", "netns", "exec", namespace, RAY, "start", *arguments],
                                stdout=output, stderr=subprocess.STDOUT, env=ENVIRONMENT)


def _wait_for_nodes(head: str, count: int, started, temporary: Path) -> None:
    """Until `ray status` counts `count` live nodes (every `ray start` still running)."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in started):
            break
        shown = subprocess.run([RAY, "status", "--address", head], capture_output=True,
                               text=True, env=ENVIRONMENT)
        if shown.stdout.count(" node_") >= count:
            return
        time.sleep(1)
    logs = "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}"
                     for log in sorted(temporary.glob("*.log")))
    raise RuntimeError(f"{count} Ray node(s) did not come up within {START_SECONDS} s:\n{logs}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to a `ray start --block` (it ends its node's Ray processes), SIGKILL if it
    lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _end_namespace(namespace: str) -> None:
    """Kill what is left in `namespace` (every process there is one the cluster started), then
    remove it and its hosts file."""
    left = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    for pid in map(int, left.stdout.split()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
    shutil.rmtree(Path("/etc/netns") / namespace, ignore_errors=True)
    with contextlib.suppress(OSError):
        Path("/etc/netns").rmdir()  # only if no other namespace keeps a file there
