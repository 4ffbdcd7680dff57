"""`python -m xbench.common.running.slurm_job JOB_JSON OUT_DIR`: the batch script of a cell's Slurm
job, on the job's first node. It finds the nodes Slurm allocated and how the other nodes reach each
of them, then runs the backend's command as its launch scope says (common.backends.launch_scopes):
with srun, as many tasks on each node as it asks for, each task under common.running.slurm_task,
or here, once, for a launcher that starts every rank itself (horovodrun). Its exit code is the
job's: after srun, that of the task that ended badly first (a crash, not the SIGKILL srun then
gave its peers), so that the runner sees a crash as a local launcher shows it."""
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from xbench.common.backends.start import Start
from xbench.common.grids.cell import Cell
from xbench.common.running.placement import PLACEMENT_ENV, Placement
from xbench.common.running.slurm_task import first_failed

TASK = "xbench.common.running.slurm_task"  # what each srun task runs: the rank, its end recorded


def allocated_nodes() -> tuple[list[str], list[str]]:
    """(names, addresses) of the allocated nodes in Slurm's order: each address the one Slurm
    itself reaches the node at."""
    names = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    addresses = []
    for name in names:
        shown = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True,
                               text=True, check=True).stdout
        fields = dict(f.split("=", 1) for f in shown.split() if "=" in f)
        addresses.append(fields.get("NodeAddr") or name)
    return names, addresses


def distinct_hosts(addresses: list[str]) -> list[str]:
    """One name per node. Nodes that share an address (several Slurm nodes on one machine, as in
    a test cluster) get different names for it, so that launchers that tell hosts apart by name
    (horovodrun -H) see as many hosts as there are nodes."""
    names, used = [], set()
    for address in addresses:
        aliases = [address]
        try:
            name, others, _ = socket.gethostbyaddr(address)
            aliases += [name, *others]
        except OSError:
            pass
        if socket.gethostbyname(socket.gethostname()) == address:
            aliases.append(socket.gethostname())
        if address.startswith("127."):
            aliases.append("localhost")
        free = next((a for a in aliases if a not in used), None)
        if free is None:
            sys.exit(f"xbench: cannot give node {len(names) + 1} a name of its own: its address "
                     f"{address} has no more aliases")
        used.add(free)
        names.append(free)
    return names


def main(job_path: str, out_dir: str) -> int:
    cell = Cell.from_dict(json.loads(Path(job_path).read_text())["cell"])
    backend = Start.of(cell.backend)
    # The cell's ports: a range of its own per job, so two jobs on one node do not collide.
    port = 20000 + int(os.environ["SLURM_JOB_ID"]) * (cell.world + 1) % 40000
    names, addresses = allocated_nodes()
    placement = Placement(tuple(distinct_hosts(addresses)), port, tuple(names))
    command = backend.launch_command(cell, [job_path, out_dir], placement)
    if not backend.scope.once_per_cell:
        command = ["srun", f"--nodes={cell.nodes}",
                   f"--ntasks-per-node={backend.scope.tasks(cell)}", "--kill-on-bad-exit=1",
                   sys.executable, "-m", TASK, out_dir, "--", *command]
    print(f"xbench slurm_job: nodes {placement.hosts}, port {port}: {' '.join(command)}",
          file=sys.stderr, flush=True)
    code = subprocess.run(command, env={**os.environ, PLACEMENT_ENV: placement.to_env()}).returncode
    return the_cause(code, Path(out_dir))


def the_cause(code: int, out_dir: Path) -> int:
    """The job's exit code, given srun's (or horovodrun's) `code`: where it failed, that of the
    srun task that ended badly first (common.running.slurm_task), a signal as 128 + its number;
    where no task recorded a bad end, `code` itself."""
    failed = first_failed(out_dir)
    if failed is None or code == 0:
        return code
    ended = failed["returncode"]
    print(f"xbench slurm_job: task {failed['rank']} on {failed['node']} ended first, "
          + (f"killed by signal {-ended} ({signal.strsignal(-ended)})" if ended < 0
             else f"with exit code {ended}")
          + f"; srun's exit code {code} is what followed", file=sys.stderr, flush=True)
    return ended if ended > 0 else 128 - ended


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
