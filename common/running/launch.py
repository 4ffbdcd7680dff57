"""Where and how a cell's processes start: the `Launcher` protocol, and the launcher a grid asks
for: this machine (common.running.local, the default), a Slurm cluster's nodes
(common.running.slurm) or a Ray cluster's (common.running.ray_cluster).

Each hands the backend a `Placement` (one reachable host name per node, and ports) and run what
the backend asks for as its launch scope (common.backends.launch_scopes) says: once per node
(torchrun, or the worker of a one-process backend), once per device (tf-multiworker's workers),
or once for the whole cell (horovodrun, which starts every rank itself). Either way each rank
runs `common.running.worker`, and the runner turns what it leaves in the cell's folder into the
row. A cell's process tree is common.running.processes'; a capped link,
common.running.link_cap's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Protocol

from xbench.common.grids.cell import Cell
from xbench.common.grids.settings import RAY, SETTINGS, SLURM
from xbench.common.running.busy_machine import Load
from xbench.common.running.local import LocalLauncher
from xbench.common.running.processes import Ended
from xbench.common.running.ray_cluster import RayLauncher
from xbench.common.running.slurm import SlurmLauncher

if TYPE_CHECKING:
    from xbench.common.backends.start import Start
    from xbench.common.workload.model import Model


class Launcher(Protocol):
    """Where a cell's processes run (LocalLauncher, SlurmLauncher, RayLauncher): the cores and
    memory of a node there, `run`, which starts a cell's processes and waits for them, and
    `close`, once the grid is done."""
    name: str

    @property
    def cores(self) -> int: ...

    @property
    def node_memory_mb(self) -> int: ...

    @property
    def memory_mb(self) -> int:
        """What a cell may use when it starts."""

    def check(self, cells: list[Cell]) -> None:
        """A clear error, before anything runs, for cells this launcher cannot place."""

    def load(self) -> Load | None:
        """What else runs where the cells will (None where it cannot be seen from here)."""

    def cannot_run(self, cell: Cell) -> str | None:
        """Why this launcher cannot run `cell` here (its row is then unsupported), or None."""

    def run(self, backend: Start, cell: Cell, worker_args: list[str], environment: dict,
            log: IO[str], token: str, watch: Callable[[], None] = lambda: None) -> Ended:
        """Start the cell's processes and wait for them (`watch()` is called while they run)."""

    def close(self) -> None:
        """End what the launcher started for the grid (a Ray of its own) and let go of the
        cluster."""


def refused(backend: Start, cell: Cell, model: Model, launcher: Launcher) -> str | None:
    """Why `cell` (of `model`) is an unsupported row before any of its processes starts (its
    backend's word or its launcher's), or None: the runner's question, and the dry run's."""
    return backend.missing() or backend.cannot_launch(cell, model) or launcher.cannot_run(cell)


def make_launcher(settings: dict) -> Launcher:
    """The launcher the grid's settings ask for (common.grids.settings: launcher, slurm_*,
    ray_*; absent ones take their defaults)."""
    chosen = {s.key: settings.get(s.key) for s in (SETTINGS["launcher"], *SLURM, *RAY)}
    chosen = {key: SETTINGS[key].default if value is None else value
              for key, value in chosen.items()}
    if chosen["launcher"] == "slurm":
        return SlurmLauncher(chosen["slurm_partition"], chosen["slurm_account"],
                             chosen["slurm_time"], chosen["slurm_gpus_per_node"],
                             chosen["slurm_args"])
    if chosen["launcher"] == "ray":
        return RayLauncher(chosen["ray_address"])
    return LocalLauncher()
