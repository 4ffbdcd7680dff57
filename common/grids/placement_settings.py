"""The placement's settings (`Role.PLACEMENT`): which backend runs a cell, on how many nodes and
devices of which kind: what the report compares."""
from __future__ import annotations

from xbench.common.backends.registry import BACKENDS, check_backend_name
from xbench.common.grids.setting import Role, Setting

DEVICE_KINDS = ("auto", "cpu", "cuda")

PLACEMENT_SETTINGS = [
    Setting("backends", str, None, "Backends: " + ", ".join(BACKENDS) + ".", axis=True,
            flag="--backend",
            field="backend", check=check_backend_name, key_part=lambda c: c.backend,
            role=Role.PLACEMENT),
    Setting("nodes", int, [1],
            "Node counts, e.g. 1,2 (each node has --devices devices; needs --launcher slurm or "
            "ray beyond 1).", axis=True, maximum=4096, why="no cluster cell here has more nodes",
            key_part="batches", role=Role.PLACEMENT),
    Setting("devices", int, None, "Device counts per node, e.g. 1,2,4.", axis=True, maximum=4096,
            why="no machine or cluster cell here has more devices",
            key_part=lambda c: f"|d{c.devices}", role=Role.PLACEMENT),
    Setting("device", str, "auto", "Force cpu or cuda.", row=None, choices=DEVICE_KINDS,
            key_part=lambda c: f"|{c.device}" + (f"|t{c.threads}" if c.threads else ""),
            role=Role.PLACEMENT),
]
