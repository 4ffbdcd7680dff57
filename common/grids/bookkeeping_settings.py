"""The bookkeeping settings (`Role.BOOKKEEPING`): how the grid runs, not what a cell measures: its
name, repeats and seeds, a cell's timeout, retries and limits, and the launcher (this machine or
a Slurm or Ray cluster) with its options."""
from __future__ import annotations

import psutil

from xbench.common.grids.setting import Role, Setting

LAUNCHERS = ("local", "slurm", "ray")


def machine_memory_mb() -> int:
    return psutil.virtual_memory().total // 2**20


BOOKKEEPING_SETTINGS = [
    # the grid's identity
    Setting("name", str, None, "The grid's name (default: the grid file's, without .toml); the "
            "results go to results/NAME.jsonl unless --results says otherwise.", flag=None,
            field=None, role=Role.BOOKKEEPING),
    Setting("description", str, "", "What the grid is for, in a sentence.", flag=None,
            field=None, role=Role.BOOKKEEPING),
    # how often
    Setting("repeats", int, 1, "Repeats of every cell (dispersion needs >= 3).", flag="--repeat",
            field=None, maximum=1000,
            why="a few repeats give the intervals; thousands only take time",
            role=Role.BOOKKEEPING),
    Setting("seeds", int, 1,
            "Seeds per configuration: seed, seed+1, ..., each its own cell (default 1; with a "
            "target accuracy 5, MLPerf's count: time to a target varies from seed to seed).",
            field=None, maximum=1000, why="a few seeds give the spread; thousands only take time",
            role=Role.BOOKKEEPING),
    # a cell's limits
    Setting("timeout", int, 3600, "Seconds a cell may run before it is killed.", row=None,
            maximum=30 * 24 * 3600, why="30 days is the longest timeout a cell may have",
            role=Role.BOOKKEEPING),
    Setting("retries", int, 1,
            "Times a cell runs again after one of its processes crashed (killed by SIGSEGV, "
            "SIGABRT, SIGBUS, SIGILL or SIGFPE: a fault inside a framework, such as the heap "
            "corruption TensorFlow's multi-worker processes show now and then), as its launcher "
            "reports it "
            "(xbench's own spawner passes the signal on, and a Slurm job the signal of the srun "
            "task that ended first; torchrun and horovodrun exit 1, which is not taken for a "
            "crash); every crash is kept in the row's 'crashes'.",
            row=None, minimum=0, maximum=5,
            why="a cell that crashes 6 times in a row is not crashing by chance",
            role=Role.BOOKKEEPING),
    Setting("memory_limit_mb", int, 0,
            "Memory each worker may allocate for training, on top of its framework and data "
            "(emulates a smaller device: a batch that does not fit is an 'oom' row).", minimum=0,
            maximum=machine_memory_mb, why="that is this machine's memory", zero_is_null=True,
            role=Role.BOOKKEEPING),
    Setting("contention_limit", float, 0.10,
            "Share of a rank's cores (0-1) that other processes, interrupts, busy hyperthread "
            "siblings, steal and cgroup throttling may take during a timed epoch before its row "
            "is marked contended (default 0.10).",
            minimum=0, maximum=1, why="a share of the cores", role=Role.BOOKKEEPING),
    # where the cells run
    Setting("launcher", str, "local",
            "Where cells run: this machine (local, the default), a Slurm cluster (every cell one "
            "job) or a Ray cluster (every cell one placement group).", choices=LAUNCHERS,
            role=Role.BOOKKEEPING),
    Setting("slurm_partition", str, "", "Slurm partition to submit to (default: the cluster's).",
            field=None, role=Role.BOOKKEEPING),
    Setting("slurm_account", str, "", "Slurm account to charge.", field=None,
            role=Role.BOOKKEEPING),
    Setting("slurm_time", int, 0,
            "Slurm time limit per cell, minutes (default: the cell's timeout, rounded up).",
            field=None, minimum=0, maximum=30 * 24 * 60,
            why="30 days is the longest timeout a cell may have", role=Role.BOOKKEEPING),
    Setting("slurm_gpus_per_node", int, 0,
            "GPUs to ask for per node (default: --devices with --device cuda, else none).",
            field=None, minimum=0, maximum=64, why="no node has more GPUs", role=Role.BOOKKEEPING),
    Setting("slurm_args", str, "", "Extra sbatch arguments, e.g. \"--qos=short --exclusive\".",
            field=None, role=Role.BOOKKEEPING),
    Setting("ray_address", str, "",
            "The Ray cluster to run on with --launcher ray: auto (the one this machine belongs "
            "to, or RAY_ADDRESS), HOST:PORT of its head, or ray://HOST:PORT (Ray Client); "
            "default: a Ray started on this machine for the grid and ended after it.",
            field=None, role=Role.BOOKKEEPING),
]
