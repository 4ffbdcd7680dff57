"""What Ray's launcher (common.running.ray_cluster) runs on a node of a Ray cluster: `NodeAgent`,
the Ray actor that holds the node's bundle of a cell's placement group and starts, watches and
ends the node's share of the cell's processes (as its launch scope says), and caps the node's
link for the link fault; its reaper (`python -m xbench.common.running.ray_node AGENT TOKEN`),
which ends what is left of the cell on the node once the agent is gone; `node_facts` and
`look`, what a short task tells of its node.

Nothing here imports Ray: the launcher makes these remote (`ray.remote`), and a node imports this
module from its own installation of xbench, as a Slurm node does.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from xbench.common.children import end_with
from xbench.common.machine import cpu_cores
from xbench.common.running.busy_machine import Load, look_at_load
from xbench.common.running.link_cap import interface_cap, interface_uncap
from xbench.common.running.local import free_ports, ports_free
from xbench.common.running.processes import alive, end_processes, this_process

SSH_SECONDS = 10  # how long a node waits for ssh to another node to answer, when it asks
LINK_TOOLS = ("tc",)
REAP_SECONDS = 0.5  # how often the reaper looks whether its agent lives
REAPER = "xbench.common.running.ray_node"


def node_facts(address: str) -> dict:
    """What a node tells of itself: the machine it is on (its boot id), its network namespace and
    that of the machine's first process, the interface its Ray `address` is on (None where it is
    on none here), whether it has tc, its cores and its memory."""
    return {"boot": boot_id(), "namespace": _namespace("self"), "first_namespace":
            _namespace("1"), "interface": interface_of(address),
            "missing": [tool for tool in LINK_TOOLS if shutil.which(tool) is None],
            "cores": cpu_cores(), "memory": psutil.virtual_memory().total}


def look(seconds: float) -> Load:
    """The load look (common.running.busy_machine) on this node."""
    return look_at_load(seconds)


def boot_id() -> str:
    """This machine's boot id: nodes that report the driver's are on its machine."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _namespace(process: str) -> int | None:
    """The network namespace of `process` ("self", or a PID), by its inode (None where it may
    not be read)."""
    try:
        return os.stat(f"/proc/{process}/ns/net").st_ino
    except OSError:
        return None


def interface_of(address: str) -> str | None:
    """The network interface that holds `address` here."""
    return next((name for name, addresses in psutil.net_if_addrs().items()
                 for found in addresses if found.address == address), None)


def _ssh_refused(host: str) -> str | None:
    """What ssh says when it cannot run a command on `host` without a password, or None."""
    try:
        tried = subprocess.run(
            ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_SECONDS}", host, "true"],
            capture_output=True, text=True, timeout=3 * SSH_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if tried.returncode == 0 else (tried.stderr.strip().splitlines() or
                                                [f"exit code {tried.returncode}"])[-1]


class NodeAgent:
    """A Ray actor in the bundle of one node of a cell's placement group: it starts the node's
    share of the cell's processes, each dying with it (so a lost agent ends its node's
    processes), says how they ended, ends them all (those carrying the cell's `token`
    included), and caps its node's link for the cell."""

    def __init__(self, token: str):
        self.token, self.processes, self.capped = token, [], None
        # the reaper, detached (its first process exits at once): Ray kills a lost agent's own
        # children, whose death would leave their children (torchrun's ranks) running
        subprocess.run([sys.executable, "-m", REAPER, json.dumps(this_process()), token],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, start_new_session=True, check=True)

    def free_ports(self, count: int) -> int:
        """The first of `count` consecutive ports free on every address of this node."""
        return free_ports(count, "")

    def ports_free(self, first: int, count: int) -> bool:
        return ports_free(first, count, "")

    def reaches(self, hosts: list[str]) -> str | None:
        """Why horovodrun here, on the first of the cell's `hosts`, cannot start ranks on the
        others, or None: it starts those whose address is this node's own itself, and the
        others over ssh (without a password)."""
        here = {found.address for addresses in psutil.net_if_addrs().values()
                for found in addresses if found.family == socket.AF_INET}
        for host in hosts[1:]:
            try:
                if socket.gethostbyname(host) in here:
                    continue
            except OSError as e:
                return f"horovodrun cannot resolve the host {host}: {e}"
            said = _ssh_refused(host)
            if said:
                return (f"horovodrun starts the ranks of another node over ssh, and the Ray "
                        f"node at {hosts[0]} cannot ssh to {host} without a password: {said}")
        return None

    def cap(self, address: str, rate: str, bytes_per_second: float) -> str | None:
        """Cap what this node sends over the interface its Ray `address` is on at `rate`, until
        the cell ends; why it cannot, or None. A cap a lost agent left there goes first."""
        interface = interface_of(address)
        if interface is None:
            return f"inject link: no interface of the Ray node at {address} holds that address"
        interface_uncap(interface)
        mtu = psutil.net_if_stats()[interface].mtu
        done = subprocess.run(interface_cap(interface, mtu, rate, bytes_per_second),
                              capture_output=True, text=True)
        if done.returncode != 0:
            return (f"inject link: tc could not cap {interface} on the Ray node at {address} (it "
                    f"needs root, or CAP_NET_ADMIN): {done.stderr.strip()[:300]}")
        self.capped = interface
        return None

    def start(self, command: list[str], environment: dict[str, str], log: str, cwd: str) -> None:
        """Start `command` here, its output appended to the cell's `log`; Ray's CUDA devices for
        this actor (its bundle's GPUs) are the process's."""
        given = {key: os.environ[key] for key in ("CUDA_VISIBLE_DEVICES",) if key in os.environ}
        with open(log, "a") as output:
            self.processes.append(subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env={**environment, **given},
                cwd=cwd, start_new_session=True, preexec_fn=end_with(os.getpid())))

    def poll(self) -> list[int | None]:
        """The exit code of each process started here (None: still running)."""
        return [process.poll() for process in self.processes]

    def end(self) -> None:
        """End every process of the cell on this node (SIGTERM, a grace period, SIGKILL), and
        lift the cap."""
        for process in self.processes:
            end_processes(process, self.token)
        with contextlib.suppress(OSError):
            interface_uncap(self.capped)
        self.capped = None


def reap(agent: dict, token: str) -> None:
    """Once the agent `agent` (processes.this_process()) is gone, end every process of the cell
    (its `token`) left on this node: none where the agent ended them itself."""
    while alive(agent):
        time.sleep(REAP_SECONDS)
    end_processes(None, token)


if __name__ == "__main__":
    if os.fork() == 0:  # the reaper runs on in the child, no longer the agent's
        reap(json.loads(sys.argv[1]), sys.argv[2])
    os._exit(0)
