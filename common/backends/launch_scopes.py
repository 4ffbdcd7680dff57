"""How a cell's processes start: one class per way, one instance each, named by a backend's
traits (`Traits.start`). Each owns what differs between the ways: the command line its engine
runs, how many processes it makes on a node and in the cell, what an engine adds to start it (the
local launcher's wrapper, the tasks an engine runs on each node (srun's, Ray's), whether it runs
once for the whole cell), its words in `xbench backends`, and the environment each rank reads to
learn its place in the cell (`RankEnvironment`, as data; `task_environment`: what an engine that
runs each task itself sets). The launchers, the runner and the dry run ask the object, never
compare a name.

A new way to start (mpirun, a second engine's own) is one class here, its instance, and its use
in a backend's traits.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

# Where the cell's nodes and ports are, as every launcher hands them down to every rank
# (common.running.placement.Placement).
PLACEMENT_ENV = "XBENCH_PLACEMENT"
# A worker's index among the workers of its node (common.running.spawn on this machine, Ray's
# launcher on a node of its cluster).
TASK_ENV = "XBENCH_TASK"
# A worker's rank among all the cell's workers, where an engine other than Slurm starts the workers
# of several nodes (Ray's launcher; srun's is SLURM_PROCID).
RANK_ENV = "XBENCH_RANK"
# The node a process runs on, as its launcher names it, where that is not the machine's host name
# (Ray's nodes, several of which may share one machine).
NODE_ENV = "XBENCH_NODE"
SPAWN = "xbench.common.running.spawn"  # N copies of a command here, as srun starts N tasks
HOROVODRUN_MODULE = "xbench.common.running.horovodrun"  # horovodrun, less its Gloo check


class CellSize(Protocol):
    """What a launch scope reads of a cell (a common.grids.cell.Cell: named by what is read of
    it, as the settings that make Cell import the traits that import this module)."""
    nodes: int
    devices: int  # per node


class NodeAddresses(Protocol):
    """What it reads of where the cell's nodes are (common.running.placement.Placement): one host
    name per node as the others reach it, and the first of the cell's ports."""
    hosts: tuple[str, ...]
    port: int


@dataclass(frozen=True)
class RankEnvironment:
    """The environment variables a rank reads to learn its place in the cell: its rank among all
    the cell's ranks, its rank on its node (each read from the first of its names that is set;
    none: 0), how many ranks there are, where they meet, and the rest of its place its library
    reads. `set_by`: who sets them today; `derived`: what a rank builds of them itself."""
    rank: tuple[str, ...] = ()
    local_rank: tuple[str, ...] = ()
    world: tuple[str, ...] = ()       # (): the cell's nodes x devices, read from its job
    rendezvous: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    set_by: str = ""
    derived: str = ""

    def rank_here(self, environ: Mapping[str, str] = os.environ) -> int:
        """This process's rank among the cell's, from `environ`."""
        return _first_set(self.rank, environ)

    def local_rank_here(self, environ: Mapping[str, str] = os.environ) -> int:
        """This process's rank among its node's, from `environ`."""
        return _first_set(self.local_rank, environ)


def _first_set(names: tuple[str, ...], environ: Mapping[str, str]) -> int:
    return int(next((environ[name] for name in names if name in environ), 0))


class LaunchScope:
    """One way a cell's processes start. By default: one process per device, each started by the
    engine (a launcher, srun) running the command, which is the worker itself."""
    started: str = ""                # how it lays out a cell's processes, in words
    environment = RankEnvironment()
    spans_nodes = True               # whether its ranks can run on several machines
    tool: str | None = None          # the launch tool that starts the ranks (its start-up first)
    once_per_cell = False            # its command runs once for the cell, and starts every rank

    def processes(self, cell: CellSize) -> int:
        """Processes of the cell on each node (the node's cores are shared out between them)."""
        return cell.devices

    def ranks(self, cell: CellSize) -> int:
        """Processes of the cell on all its nodes."""
        return self.processes(cell) * cell.nodes

    def command(self, cell: CellSize, worker: list[str], placement: NodeAddresses) -> list[str]:
        """The command line its engine runs (`worker`: Python's arguments that run one rank;
        `placement`: where the cell's nodes and ports are)."""
        return [sys.executable, *worker]

    def local_wrapper(self, cell: CellSize) -> list[str]:
        """What the local launcher puts before the command ([]: the command starts every process
        of this machine itself)."""
        return []

    def tasks(self, cell: CellSize) -> int:
        """Times an engine runs the command on each node of the cell (srun's tasks per node,
        the processes Ray's launcher starts there; once on the first node where
        `once_per_cell`)."""
        return 1

    def task_environment(self, cell: CellSize, node: int, task: int,
                         placement: NodeAddresses) -> dict[str, str]:
        """What an engine that runs each task itself (Ray's launcher: not srun, not the local
        wrapper) sets for the `task`-th run of the command on the cell's `node`-th node:
        nothing where the command's own tool places the ranks it starts (horovodrun), or a
        process needs no place (one process)."""
        return {}


class SingleProcess(LaunchScope):
    """One process drives every device of the cell: on one machine only, rank 0 of 1."""
    started = "one process drives every device"
    environment = RankEnvironment(set_by="nobody: its one process is rank 0 of 1")
    spans_nodes = False

    def processes(self, cell: CellSize) -> int:
        return 1


class TorchrunPerNode(LaunchScope):
    """torchrun once per node (standalone on one machine, a c10d rendezvous at the first node
    across several), which starts a process per device."""
    started = "a process per device, started by torchrun"
    environment = RankEnvironment(
        rank=("RANK",), local_rank=("LOCAL_RANK",), world=("WORLD_SIZE",),
        rendezvous=("MASTER_ADDR", "MASTER_PORT"),
        set_by="torchrun, for each process it starts (torch.distributed's env:// "
               "initialisation reads them); across nodes MASTER_ADDR is the first node's "
               "address, given to its torchrun by Ray's launcher (PET_LOCAL_ADDR)")
    tool = "torchrun"

    def task_environment(self, cell: CellSize, node: int, task: int,
                         placement: NodeAddresses) -> dict[str, str]:
        """Its node's address as the engine names it (torchrun's --local-addr, read from
        PET_LOCAL_ADDR): the rendezvous hands it to the other nodes, where the machine's own
        name may not lead to this node (several Ray nodes on one machine) or lead elsewhere."""
        return {"PET_LOCAL_ADDR": placement.hosts[node]} if cell.nodes > 1 else {}

    def command(self, cell: CellSize, worker: list[str], placement: NodeAddresses) -> list[str]:
        rendezvous = (["--standalone"] if cell.nodes == 1 else [
            f"--nnodes={cell.nodes}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={placement.hosts[0]}:{placement.port}",
            f"--rdzv-id=xbench-{placement.port}"])
        return [sys.executable, "-m", "torch.distributed.run", *rendezvous,
                f"--nproc-per-node={cell.devices}", *worker]


class WorkerPerDevice(LaunchScope):
    """The worker itself once per device: srun's tasks on a Slurm cluster, the processes Ray's
    launcher starts on a Ray node, xbench's spawner's copies on this machine."""
    started = "a worker process per device"
    environment = RankEnvironment(
        rank=("SLURM_PROCID", RANK_ENV, TASK_ENV), local_rank=("SLURM_LOCALID", TASK_ENV),
        rendezvous=(PLACEMENT_ENV,),
        set_by="Slurm's srun for each task, xbench's spawner for each copy on this machine "
               "(its index there is its rank), or Ray's launcher for each worker it starts on a "
               "node (XBENCH_RANK and XBENCH_TASK); every launcher sets XBENCH_PLACEMENT",
        derived="tf-multiworker's TF_CONFIG (the workers at the placement's ports, its task "
                "the rank); jax-multiprocess's jax.distributed.initialize (the coordinator at "
                "the first node's port, the process id the rank)")

    def local_wrapper(self, cell: CellSize) -> list[str]:
        return [sys.executable, "-m", SPAWN, str(cell.devices), "--"]

    def tasks(self, cell: CellSize) -> int:
        return cell.devices

    def task_environment(self, cell: CellSize, node: int, task: int,
                         placement: NodeAddresses) -> dict[str, str]:
        return {RANK_ENV: str(node * self.processes(cell) + task), TASK_ENV: str(task)}


class HorovodrunPerCell(LaunchScope):
    """horovodrun once for the whole cell, which starts every rank on every node itself (over
    ssh for a node that is not this machine), talking through gloo."""
    started = "a process per device, started by horovodrun"
    environment = RankEnvironment(
        rank=("HOROVOD_RANK",), local_rank=("HOROVOD_LOCAL_RANK",), world=("HOROVOD_SIZE",),
        rendezvous=("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT"),
        others=("HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
                "HOROVOD_HOSTNAME", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS",
                "HOROVOD_GLOO_IFACE"),
        set_by="horovodrun --gloo, for each rank it starts (hvd.init() reads them)")
    tool = "horovodrun"
    once_per_cell = True

    def command(self, cell: CellSize, worker: list[str], placement: NodeAddresses) -> list[str]:
        """horovodrun's own command line, run by HOROVODRUN_MODULE: horovodrun without its
        check that Horovod was built with Gloo (3 s of CPU a cell; each rank checks instead)."""
        hosts = ",".join(f"{host}:{cell.devices}" for host in placement.hosts)
        return [sys.executable, "-m", HOROVODRUN_MODULE, "-np", str(self.ranks(cell)), "-H", hosts,
                "--gloo", sys.executable, *worker]


ONE_PROCESS = SingleProcess()
TORCHRUN = TorchrunPerNode()
WORKER_PER_DEVICE = WorkerPerDevice()
HOROVODRUN = HorovodrunPerCell()
