"""How a cell's processes start, one object per way (common.backends.launch_scopes): each owns its
command line, its processes per node and per cell, what the local launcher and Slurm add to start
it, and the environment its ranks read (the variables named as the launch tools set them).
In-process: no cell runs here (the smoke grid's cells start them for real)."""
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from xbench.common.backends.launch_scopes import (
    HOROVODRUN,
    ONE_PROCESS,
    TORCHRUN,
    WORKER_PER_DEVICE,
    LaunchScope,
)
from xbench.common.backends.start import WORKER, Start
from xbench.common.backends.traits import TRAITS
from xbench.common.grids.cell import Cell
from xbench.common.running.placement import Placement
from xbench.common.workload.models import MODELS

WORKER_ARGS = ["-m", WORKER, "job.json", "out"]
PLACED = Placement(("node-a", "node-b"), 23456)


def two_by_two(backend: str) -> Cell:
    """A cell of `backend` on 2 nodes of 2 devices each."""
    return Cell(grid="scopes", backend=backend, model="small", multiple=1, batch=128, devices=2,
                nodes=2)


def test_every_backend_names_a_launch_scope_object_and_every_scope_is_used():
    scopes = {id(traits.start): traits.start for traits in TRAITS.values()}
    assert all(isinstance(scope, LaunchScope) for scope in scopes.values())
    assert set(scopes.values()) == {ONE_PROCESS, TORCHRUN, WORKER_PER_DEVICE, HOROVODRUN}
    assert {name for name, t in TRAITS.items() if t.start is HOROVODRUN} == {"hvd-torch",
                                                                            "hvd-tf"}
    assert [name for name, t in TRAITS.items() if not t.spans_nodes] == [
        name for name, t in TRAITS.items() if t.start is ONE_PROCESS]


def test_torchrun_runs_once_per_node_and_meets_at_the_first_node():
    cell = two_by_two("pt-ddp")
    assert TORCHRUN.command(cell, WORKER_ARGS, PLACED) == [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--rdzv-backend=c10d",
        "--rdzv-endpoint=node-a:23456", "--rdzv-id=xbench-23456", "--nproc-per-node=2",
        *WORKER_ARGS]
    one_node = Cell(grid="scopes", backend="pt-ddp", model="small", multiple=1, batch=128,
                    devices=2)
    assert "--standalone" in TORCHRUN.command(one_node, WORKER_ARGS, PLACED)
    assert (TORCHRUN.processes(cell), TORCHRUN.ranks(cell), TORCHRUN.tasks(cell)) == (2, 4, 1)
    assert TORCHRUN.local_wrapper(cell) == [] and not TORCHRUN.once_per_cell
    assert TORCHRUN.tool == "torchrun"


def test_horovodrun_runs_once_for_the_cell_and_starts_every_rank():
    cell = two_by_two("hvd-torch")
    command = HOROVODRUN.command(cell, WORKER_ARGS, PLACED)
    assert command[:3] == [sys.executable, "-m", "xbench.common.running.horovodrun"]
    assert command[3:] == ["-np", "4", "-H", "node-a:2,node-b:2", "--gloo", sys.executable,
                           *WORKER_ARGS]
    assert HOROVODRUN.once_per_cell and HOROVODRUN.tasks(cell) == 1
    assert (HOROVODRUN.processes(cell), HOROVODRUN.ranks(cell)) == (2, 4)


def test_a_worker_per_device_is_the_worker_itself_copied_per_device():
    cell = two_by_two("tf-multiworker")
    assert WORKER_PER_DEVICE.command(cell, WORKER_ARGS, PLACED) == [sys.executable, *WORKER_ARGS]
    assert WORKER_PER_DEVICE.local_wrapper(cell) == [
        sys.executable, "-m", "xbench.common.running.spawn", "2", "--"]
    assert WORKER_PER_DEVICE.tasks(cell) == 2 and WORKER_PER_DEVICE.tool is None
    assert WORKER_PER_DEVICE.ranks(cell) == 4


def test_one_process_drives_every_device_on_one_machine():
    cell = Cell(grid="scopes", backend="pt-dp", model="small", multiple=1, batch=128, devices=4)
    assert (ONE_PROCESS.processes(cell), ONE_PROCESS.ranks(cell)) == (1, 1)
    assert Start.of("pt-dp").devices_per_process(cell) == 4
    assert ONE_PROCESS.command(cell, WORKER_ARGS, PLACED) == [sys.executable, *WORKER_ARGS]
    assert not ONE_PROCESS.spans_nodes and not ONE_PROCESS.environment.rank
    assert "cannot span 2 nodes" in Start.of("pt-dp").cannot_launch(two_by_two("pt-dp"),
                                                                     MODELS["small"])


@pytest.mark.parametrize("environ, rank, local", [
    ({"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "XBENCH_TASK": "0"}, 3, 1),  # under srun
    ({"XBENCH_TASK": "1"}, 1, 1),  # xbench's spawner, one machine
    ({"XBENCH_RANK": "3", "XBENCH_TASK": "1"}, 3, 1),  # Ray's launcher, a node of several
    ({}, 0, 0)])
def test_a_worker_reads_its_rank_from_the_first_variable_set(environ, rank, local):
    environment = WORKER_PER_DEVICE.environment
    assert (environment.rank_here(environ), environment.local_rank_here(environ)) == (rank, local)


def test_an_engine_that_runs_each_task_gives_it_its_place():
    """What Ray's launcher sets for the task-th run of a scope's command on a node: a worker
    per device its rank among the cell's and its index on the node, torchrun its node's address
    across nodes (its --local-addr), which the rendezvous hands the others; horovodrun and one
    process nothing (the tool places its ranks; one process is rank 0)."""
    cell = two_by_two("tf-multiworker")
    assert [WORKER_PER_DEVICE.task_environment(cell, node, task, PLACED)
            for node in (0, 1) for task in (0, 1)] == [
        {"XBENCH_RANK": str(rank), "XBENCH_TASK": str(rank % 2)} for rank in range(4)]
    assert TORCHRUN.task_environment(two_by_two("pt-ddp"), 1, 0, PLACED) == {
        "PET_LOCAL_ADDR": "node-b"}
    one_node = Cell(grid="scopes", backend="pt-ddp", model="small", multiple=1, batch=128,
                    devices=2)
    assert TORCHRUN.task_environment(one_node, 0, 0, PLACED) == {}
    assert HOROVODRUN.task_environment(two_by_two("hvd-torch"), 0, 0, PLACED) == {}
    assert ONE_PROCESS.task_environment(one_node, 0, 0, PLACED) == {}


def test_torchrun_reads_the_local_address_it_is_given(monkeypatch):
    """PET_LOCAL_ADDR is torchrun's --local-addr (each of its options reads PET_<OPTION>)."""
    monkeypatch.setenv("PET_LOCAL_ADDR", "node-b")
    from torch.distributed.run import get_args_parser
    assert get_args_parser().parse_args(["x.py"]).local_addr == "node-b"


def source_of(module: str) -> str:
    """A module's source, found without importing it (nor its framework)."""
    return Path(importlib.util.find_spec(module).origin).read_text()


def test_the_variables_named_are_those_the_launch_tools_set():
    """torchrun's agent sets what TORCHRUN's ranks are said to read; horovodrun --gloo sets what
    HOROVODRUN's read (each rank's slot, and the gloo rendezvous)."""
    agent = source_of("torch.distributed.elastic.agent.server.local_elastic_agent")
    torchrun = TORCHRUN.environment
    for name in (*torchrun.rank, *torchrun.local_rank, *torchrun.world, *torchrun.rendezvous):
        assert f'"{name}"' in agent, name
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.gloo_run import create_slot_env_vars
    horovod = HOROVODRUN.environment
    slot = create_slot_env_vars(SlotInfo("node-a", rank=0, local_rank=0, cross_rank=0, size=2,
                                         local_size=2, cross_size=1))
    gloo = inspect.getsource(sys.modules["horovod.runner.gloo_run"])
    for name in (*horovod.rank, *horovod.local_rank, *horovod.world, *horovod.rendezvous,
                 *horovod.others):
        assert name in slot or f"'{name}'" in gloo, name
