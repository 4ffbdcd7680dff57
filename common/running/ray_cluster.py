"""The Ray launcher: every cell one placement group on a Ray cluster's nodes (`--launcher ray`,
`--ray-address`), its ranks started on Ray's nodes as the backend's launch scope says
(common.backends.launch_scopes) by an agent in each node's bundle (common.running.ray_node).

A cell of K nodes holds K bundles, one per node (packed on one node, or spread one node each), each
with the CPUs its ranks' threads use there (and its GPUs, `num_gpus`, for a CUDA cell): Ray cannot
put several bundles on each of several nodes, and a node's ranks share its cores as on any
launcher. Results land in the cell's folder on the filesystem every node shares, as with Slurm,
and the driver appends the row to the grid's one results file. Without an address, the grid
starts a Ray of its own on this machine and ends it after (`close`).
"""
from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xbench.common.backends.launch_scopes import NODE_ENV, PLACEMENT_ENV
from xbench.common.children import signals_held
from xbench.common.errors import UserError
from xbench.common.grids.cell import Cell, threads_per_device
from xbench.common.running import ray_node
from xbench.common.running.busy_machine import LOOK_SECONDS, Load
from xbench.common.running.local import REPO, WATCH_SECONDS
from xbench.common.running.placement import Placement
from xbench.common.running.processes import KILL_GRACE_SECONDS, Ended
from xbench.common.workload import faults

if TYPE_CHECKING:
    from xbench.common.backends.start import Start

ANSWER_SECONDS = 60  # a node's agent silent this long is taken for lost
REACH_SECONDS = 10  # how long the head at --ray-address HOST:PORT has to answer
PORT_TRIES = 20  # ranges of ports tried before a cell gives up finding one free on every node


@dataclass(frozen=True)
class RayNode:
    """A node of the cluster, as Ray names and sizes it (`resources`: its CPU, GPU, memory...),
    and what it tells of itself (common.running.ray_node.node_facts)."""
    id: str
    name: str
    address: str
    resources: dict[str, float]
    facts: dict


class RayLauncher:
    """A Ray cluster: the one at `address` (auto, HOST:PORT, ray://HOST:PORT), or "" for a Ray
    started on this machine for the grid. Its nodes are those alive with a CPU or more (a head
    kept free of work, with none, is left out); a node's cores are the fewest CPUs Ray gives
    one of them."""
    name = "ray"

    def __init__(self, address: str = ""):
        self.address = address
        self._ray = None
        self._nodes: list[RayNode] | None = None
        self._agent = None

    # --- the cluster ----------------------------------------------------------------------

    def connect(self) -> list[RayNode]:
        """The cluster's nodes, connecting to it first (or starting a Ray here); a clear error
        where Ray is missing or the cluster cannot be reached."""
        if self._nodes is not None:
            return self._nodes
        try:
            import ray
        except ImportError:
            raise UserError("--launcher ray needs Ray, which is not installed here: "
                            "pip install 'ray>=2.60' (make setup installs it)") from None
        if not self.address:  # a Ray of xbench's own for the grid: it reports nothing home
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._check_reachable()
        try:
            ray.init(address=self.address or "local", logging_level=logging.ERROR,
                     log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UserError(f"--launcher ray cannot reach the Ray cluster at "
                            f"{self.address}: {e}") from None
        self._ray = ray
        alive = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
        if not alive:
            raise UserError(f"{self.where} has no node with a CPU to run cells on")
        facts = ray.get([self._on(node["NodeID"], ray_node.node_facts).remote(
            node["NodeManagerAddress"]) for node in alive], timeout=ANSWER_SECONDS)
        names = [node["NodeName"] for node in alive]
        self._nodes = [RayNode(node["NodeID"], name if names.count(name) == 1
                               else f"{name}-{node['NodeID'][:6]}", node["NodeManagerAddress"],
                               {key: value for key, value in node["Resources"].items()
                                if not key.startswith("node:")}, found)
                       for node, name, found in zip(alive, names, facts)]
        return self._nodes

    def _check_reachable(self) -> None:
        """A clear error at once where the head at HOST:PORT does not answer (Ray itself tries
        for minutes)."""
        host, _, port = self.address.rpartition(":")
        if "://" in self.address or not (host and port.isdigit()):
            return  # auto, Ray Client's ray://, or a Ray of its own: Ray finds or starts it
        try:
            socket.create_connection((host, int(port)), timeout=REACH_SECONDS).close()
        except OSError as e:
            raise UserError(f"--launcher ray cannot reach the Ray cluster at {self.address}: "
                            f"{e}") from None

    def _on(self, node_id: str, function):
        """`function` as a Ray task of no resources pinned to the node `node_id`."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return self._ray.remote(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=False))(function)

    def close(self) -> None:
        """Let go of the cluster (a Ray started here for the grid ends with it)."""
        if self._ray is not None:
            self._ray.shutdown()
        self._ray, self._nodes, self._agent = None, None, None

    @property
    def where(self) -> str:
        return (f"the Ray cluster at {self.address}" if self.address
                else "the Ray started on this machine for the grid")

    @property
    def cores(self) -> int:
        return int(min(node.resources["CPU"] for node in self.connect()))

    @property
    def node_memory_mb(self) -> int:
        return min(node.facts["memory"] for node in self.connect()) // 2**20

    @property
    def memory_mb(self) -> int:
        return self.node_memory_mb

    def check(self, cells: list[Cell]) -> None:
        """The cluster has the nodes the cells ask for; a clear error before anything runs."""
        nodes, largest = self.connect(), max(c.nodes for c in cells)
        if largest > len(nodes):
            raise UserError(f"--nodes {largest} is more than {self.where} has ({len(nodes)} "
                            f"node(s) with a CPU)")

    def load(self) -> Load:
        """The load look on each node (what else runs there, as its own machine shows it): the
        busiest node's."""
        nodes = self.connect()
        looks = self._ray.get([self._on(node.id, ray_node.look).remote(LOOK_SECONDS)
                               for node in nodes], timeout=ANSWER_SECONDS)
        node, busiest = max(zip(nodes, looks), key=lambda pair: pair[1].share)
        where = f"Ray node {node.name}" + (f", the busiest of {len(nodes)}" if len(nodes) > 1
                                            else "")
        return replace(busiest, where=where)

    def cannot_run(self, cell: Cell) -> str | None:
        link = faults.parse(cell.inject).link
        if link:
            return self._link_refused(cell)
        if cell.device == "cuda":
            fitting = [n for n in self.connect() if n.resources.get("GPU", 0) >= cell.devices]
            if len(fitting) < cell.nodes:
                return (f"the cell needs {cell.nodes} node(s) of {cell.devices} GPU(s); "
                        f"{self.where} has {len(fitting)}")
        return None

    def _link_refused(self, cell: Cell) -> str | None:
        """Why a capped link cannot act on `cell` here: on Ray each node's link to the others
        is capped, which xbench does only where every node is a network namespace of this
        machine of its own (never a machine's own network, which every process there shares)."""
        if cell.nodes == 1:
            return ("inject link: on Ray the cap is each node's link to the others, and a cell "
                    "of 1 node crosses none; --launcher local caps the loopback between one "
                    "machine's processes")
        nodes, here = self.connect(), ray_node.boot_id()
        for node in nodes:
            facts, name = node.facts, f"Ray node {node.name}"
            why = ("is on another machine" if facts["boot"] != here
                   else "is in this machine's own network namespace" if facts["namespace"] in (
                       None, facts["first_namespace"])
                   else "has no interface but the loopback" if facts["interface"] in (None, "lo")
                   else f"has no {', '.join(facts['missing'])}" if facts["missing"] else None)
            if why:
                return (f"inject link: {name} {why}; xbench caps a Ray node's link only where "
                        f"every node is a network namespace of this machine (a test cluster's)")
        if len({node.facts["namespace"] for node in nodes}) < len(nodes):
            return "inject link: Ray nodes here share a network namespace, and so their link"
        return None

    # --- a cell ---------------------------------------------------------------------------

    def bundles(self, cell: Cell) -> list[dict[str, float]]:
        """The placement group's bundles: one per node, with the CPUs its ranks' threads use
        there (at most a node's) and, for a CUDA cell, its GPUs."""
        cpus = min(self.cores, threads_per_device(cell, self.cores) * cell.devices)
        gpus = {"GPU": cell.devices} if cell.device == "cuda" else {}
        return [{"CPU": cpus, **gpus} for _ in range(cell.nodes)]

    def run(self, backend: Start, cell: Cell, worker_args: list[str], environment: dict,
            log, token: str, watch=lambda: None) -> Ended:
        """Place the cell, start its processes on its nodes and wait for them (`watch()` is
        called while they run); whatever happens, its processes, agents and placement group
        are gone when this returns."""
        from ray.util.placement_group import placement_group
        self.connect()
        bundles = self.bundles(cell)
        group = placement_group(bundles, strategy="STRICT_PACK" if cell.nodes == 1
                                else "STRICT_SPREAD", name=f"xbench-{cell.backend}-{token[:8]}")
        agents = []
        try:
            if not self._placed(group, cell, watch):
                return Ended(None, True, f"Ray did not place the cell's {cell.nodes} bundle(s) "
                                         f"of {bundles[0]} within the cell's timeout of "
                                         f"{cell.timeout} s (other work holds them, or no node "
                                         f"has them)")
            nodes = self._group_nodes(group, len(bundles))
            agents = [self._agent_class().options(
                num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0),
                scheduling_strategy=self._in_bundle(group, index)).remote(token)
                for index, bundle in enumerate(bundles)]
            record = self._record(nodes, bundles)
            placement = Placement(tuple(n.address for n in nodes),
                                  self._ports(agents, cell.world + 1), tuple(n.name for n in nodes))
            refused = self._refused(backend, cell, placement, agents)
            if refused:
                return Ended(None, how=refused, status="unsupported", cluster=record)
            self._start(agents, nodes, backend, cell, worker_args, environment, log, placement)
            return replace(self._wait(agents, nodes, cell, watch), cluster=record)
        finally:
            with signals_held():
                self._end(agents, group)

    def _placed(self, group, cell: Cell, watch) -> bool:
        """Whether Ray placed the group within the cell's timeout."""
        deadline, ready = time.monotonic() + cell.timeout, group.ready()
        while time.monotonic() < deadline:
            if self._ray.wait([ready], timeout=WATCH_SECONDS)[0]:
                return True
            watch()
        return False

    def _group_nodes(self, group, count: int) -> list[RayNode]:
        """The node of each bundle of the placed group, in the bundles' order."""
        from ray.util.placement_group import placement_group_table
        placed = placement_group_table(group)["bundles_to_node_id"]
        known = {node.id: node for node in self.connect()}
        if any(placed[index] not in known for index in range(count)):  # a node joined since
            self._nodes = None
            known = {node.id: node for node in self.connect()}
        return [known[placed[index]] for index in range(count)]

    def _agent_class(self):
        if self._agent is None:
            self._agent = self._ray.remote(max_restarts=0)(ray_node.NodeAgent)
        return self._agent

    @staticmethod
    def _in_bundle(group, index: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)

    def _answer(self, reference):
        return self._ray.get(reference, timeout=ANSWER_SECONDS)

    def _ports(self, agents, count: int) -> int:
        """The first of `count` consecutive ports free on every node of the cell."""
        for _ in range(PORT_TRIES):
            first = self._answer(agents[0].free_ports.remote(count))
            if all(self._answer([agent.ports_free.remote(first, count)
                                 for agent in agents[1:]])):
                return first
        raise RuntimeError(f"found no range of {count} ports free on every node of the cell")

    def _refused(self, backend: Start, cell: Cell, placement: Placement, agents) -> str | None:
        """Why the placed cell cannot start as it asks (an unsupported row), having capped its
        nodes' links where it asks for a capped link; or None."""
        scope = backend.scope
        if scope.once_per_cell and cell.nodes > 1:
            if len(set(placement.hosts)) < cell.nodes:
                return (f"{scope.tool} tells hosts apart by address, and the cell's Ray nodes "
                        f"share one ({', '.join(placement.hosts)})")
            why = self._answer(agents[0].reaches.remote(list(placement.hosts)))
            if why:
                return why
        injected = faults.parse(cell.inject)
        if injected.link:
            for agent, host in zip(agents, placement.hosts):
                why = self._answer(agent.cap.remote(host, injected.link,
                                                    injected.link_bytes_per_second))
                if why:
                    return why
        return None

    def _start(self, agents, nodes: list[RayNode], backend: Start, cell: Cell,
               worker_args: list[str], environment: dict, log, placement: Placement) -> None:
        """Start the cell's processes as its launch scope says: its command once on the first
        node (a tool that starts every rank itself), or its tasks on every node, each with the
        place its scope gives it."""
        scope = backend.scope
        command = backend.launch_command(cell, worker_args, placement)
        log.write(f"ray: nodes {', '.join(placement.names)} at {', '.join(placement.hosts)}, "
                  f"port {placement.port}: {' '.join(command)}\n")
        log.flush()
        runs = ([(0, 0)] if scope.once_per_cell else
                [(node, task) for node in range(cell.nodes) for task in range(scope.tasks(cell))])
        self._answer([agents[node].start.remote(
            command, {**environment, PLACEMENT_ENV: placement.to_env(), NODE_ENV: nodes[node].name,
                      **scope.task_environment(cell, node, task, placement)}, log.name,
            str(REPO))
            for node, task in runs])

    def _wait(self, agents, nodes: list[RayNode], cell: Cell, watch) -> Ended:
        """Until every process has ended, one has failed (a crash, a signal, first), the cell's
        timeout has passed, or Ray has lost a node's agent (and with it the node's processes)."""
        from ray.exceptions import RayError
        deadline = time.monotonic() + cell.timeout
        while True:
            codes = []
            for agent, node in zip(agents, nodes):
                try:
                    codes += self._answer(agent.poll.remote())
                except RayError as e:
                    said = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    return Ended(None, how=f"Ray lost the worker that ran the cell's processes "
                                           f"on node {node.name} ({node.address}): {said}",
                                 status="failed")
            failures = [code for code in codes if code not in (None, 0)]
            if failures:
                return Ended(min(failures))
            if all(code == 0 for code in codes):
                return Ended(0)
            if time.monotonic() > deadline:
                return Ended(None, True, f"no result after the cell's timeout of {cell.timeout} "
                                         f"s; every process of the cell was killed")
            watch()
            time.sleep(WATCH_SECONDS)

    def _end(self, agents, group) -> None:
        """End the cell's processes on every node, then its agents and its placement group."""
        from ray.exceptions import RayError
        from ray.util.placement_group import remove_placement_group
        ending = [agent.end.remote() for agent in agents]
        if ending:
            self._ray.wait(ending, num_returns=len(ending), timeout=3 * KILL_GRACE_SECONDS)
        for agent in agents:
            try:
                self._ray.kill(agent)
            except RayError:
                pass  # gone already
        remove_placement_group(group)

    def _record(self, nodes: list[RayNode], bundles: list[dict]) -> dict:
        """Where the cell ran, for its row: Ray's version, each node and what the cell held
        of it."""
        return {"launcher": self.name, "version": self._ray.__version__,
                "nodes": [{"name": node.name, "address": node.address, "id": node.id,
                           "resources": node.resources, "bundle": bundle}
                          for node, bundle in zip(nodes, bundles)]}
