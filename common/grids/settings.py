"""Every setting of a grid, declared once.

One `Setting` per grid-file key says everything the rest of xbench needs to know of it: its type,
default and allowed values, whether it is an axis (a list: every combination of the axes is a
cell), its command-line flag and help, the field of `common.grids.cell.Cell` it becomes, the part of
the cell key it writes, the field and section of the result row that records it, and the schema
version that added it. From this table:

- `xbench grid`'s options are generated (cli/options.py);
- grid files and overrides are checked (`check_value`, `common.grids.grid.resolve`);
- `Cell`'s fields and key are built (common/grids/cell.py), and the result row's configuration
  fields, their types and what older rows lacked (common/results/schema.py);
- the report's columns from each setting's `role` (an axis of the setup, a training choice, the
  placement, a fault, bookkeeping), the training label from its `label`, and docs/grids.md's
  reference (common/grids/columns.py).

The settings are declared by role, one module each (setup_settings, training_settings,
placement_settings, fault_settings, bookkeeping_settings); `ORDER` puts them in the table's order
here. Adding a setting is one entry in its role's module and its key in `ORDER`, one upgrade of
the schema, plus the code that uses it.
"""
from __future__ import annotations

from typing import Any

from xbench.common.errors import UserError
from xbench.common.grids.bookkeeping_settings import BOOKKEEPING_SETTINGS
from xbench.common.grids.fault_settings import FAULT_SETTINGS

# `X as X`: what readers outside read from the table's path.
from xbench.common.grids.placement_settings import DEVICE_KINDS as DEVICE_KINDS
from xbench.common.grids.placement_settings import PLACEMENT_SETTINGS
from xbench.common.grids.setting import Setting, check_table
from xbench.common.grids.setup_settings import SETUP_SETTINGS
from xbench.common.grids.training_settings import OPTIMIZERS as OPTIMIZERS
from xbench.common.grids.training_settings import TRAINING_SETTINGS

SECTIONS = ("configuration", "training", "input")  # the result row's sections of settings
# The table's order: the command line's options, the cell key's parts (so every earlier row's
# cell), Cell's fields and the reference in docs/grids.md follow it. A setting added after the
# first rows goes where it reads best: its key part is empty at its default, so keys stay.
ORDER = (
    "name", "description",  # the grid's identity
    # the axes, in the cell key's order
    "backends", "models", "multiples", "batch_mode", "batches", "nodes", "devices",
    "epochs", "repeats", "seed", "seeds",  # how long and how often
    "target_accuracy", "target_loss", "evals_per_epoch",  # training to a target
    "data", "max_train_samples", "max_test_samples",  # the data
    # where it runs
    "device", "precision", "timeout", "retries", "memory_limit_mb", "contention_limit",
    "pin_ranks", "omp_wait", "launcher", "slurm_partition", "slurm_account", "slurm_time",
    "slurm_gpus_per_node", "slurm_args", "ray_address",
    # training, the same in every backend
    "optimizer", "lr", "momentum", "weight_decay", "lr_scaling", "reference_batch",
    "warmup_epochs", "set_epoch", "compression", "powersgd_rank", "reshard", "bucket_mb",
    "accumulate", "accumulate_sync", "compile",
    "host_memory", "loader_workers",  # how batches reach the device
    "inject",  # faults injected on purpose
)


def in_order(*by_role: list[Setting]) -> dict[str, Setting]:
    """{key: setting} of every role's settings in ORDER, which names each exactly once."""
    declared = [s for settings in by_role for s in settings]
    assert sorted(ORDER) == sorted(s.key for s in declared), \
        f"ORDER and the settings declared differ: {set(ORDER) ^ {s.key for s in declared}}"
    return {s.key: s for s in sorted(declared, key=lambda s: ORDER.index(s.key))}


SETTINGS: dict[str, Setting] = in_order(SETUP_SETTINGS, TRAINING_SETTINGS, PLACEMENT_SETTINGS,
                                        FAULT_SETTINGS, BOOKKEEPING_SETTINGS)
AXES = [s for s in SETTINGS.values() if s.axis]
SLURM = [s for s in SETTINGS.values() if s.key.startswith("slurm_")]
RAY = [s for s in SETTINGS.values() if s.key.startswith("ray_")]
IN_CELL = [s for s in SETTINGS.values() if s.field_name]
IN_ROW = [s for s in IN_CELL if s.row_name]


check_table(SETTINGS)


def defaults() -> dict[str, Any]:
    """{key: default} of every setting that has one."""
    return {s.key: s.default for s in SETTINGS.values() if s.default is not None}


def check_axis(key: str, value: Any) -> list:
    """The axis' values, each checked, duplicates dropped (first occurrence kept): a value given
    twice is one configuration, not two."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserError(f"'{key}' is empty; give at least one value")
    return list(dict.fromkeys(SETTINGS[key].check_value(item) for item in items))
