"""A cell: one configuration of a grid to train and time, and the key that identifies it.

Its fields are the settings of common.grids.settings that a run uses (`IN_CELL`, each with its
default), plus what the grid derives: the grid's name, compute threads (the probe's), the data
folder, the batch sweep and which repeat this run is. The key is the settings' key parts in the
table's order.

The class is made from the table, so a type checker and an editor read its fields from
cell.pyi beside this file, generated from the same table (`python -m xbench.common.grids.cell >
common/grids/cell.pyi`; tests/test_settings_table.py checks it is current).
"""
from __future__ import annotations

import dataclasses
import math

from xbench.common.grids.settings import IN_CELL, SETTINGS


class CellMethods:
    """What every cell can say of itself (the fields come from the settings table)."""

    @property
    def world(self) -> int:
        """Devices over all nodes: the data-parallel width of the cell."""
        return self.nodes * self.devices

    @property
    def global_batch(self) -> int:
        return self.batch if self.batch_mode == "global" else self.batch * self.world

    @property
    def per_device_batch(self) -> int:
        return self.batch // self.world if self.batch_mode == "global" else self.batch

    @property
    def micro_batch(self) -> int:
        """Samples of one micro-batch on one device (the per-device batch with no
        accumulation)."""
        return self.per_device_batch // self.accumulate

    def syncs_after(self, micro: int) -> bool:
        """Whether the gradients cross between devices after micro-batch `micro` (0-based) of
        an optimizer step: after every one with accumulate_sync each, else after the last."""
        return self.accumulate_sync == "each" or micro == self.accumulate - 1

    @property
    def bucket_bytes(self) -> int:
        """The bytes of gradients one collective carries at most, as each library is given them
        (bucket_mb holds whole bytes: common.grids.setting.whole_bytes); 0: the library's own."""
        return round(self.bucket_mb * 2**20)

    @property
    def syncs_per_step(self) -> int:
        """Times the gradients cross between devices in one optimizer step."""
        return self.accumulate if self.accumulate_sync == "each" else 1

    @property
    def key(self) -> str:
        """Identifies the configuration (not the repeat): resume and reports group by it. A
        setting's part is empty where it has its default, so that keys stay as they were when
        a setting is added."""
        return "".join(s.key_part(self) for s in SETTINGS.values() if callable(s.key_part))

    @property
    def sweep_line(self) -> str:
        """What the cells of one line of a batch sweep share: everything but the batch."""
        return dataclasses.replace(self, batch=0, repeat=0).key

    def learning_rate(self, step: int, steps_per_epoch: int) -> float:
        """The learning rate of optimizer step `step` (0-based over the run): lr scaled by the
        global batch against reference_batch (linear or square root), reached by a linear
        ramp from the unscaled lr over the warm-up epochs (Goyal et al. 2017)."""
        ratio = self.global_batch / self.reference_batch
        target = self.lr * {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[self.lr_scaling]
        ramp = self.warmup_epochs * steps_per_epoch
        if step >= ramp:
            return target
        return self.lr + (target - self.lr) * step / ramp

    @property
    def label(self) -> str:
        threads = f" t{self.threads}" if self.threads else ""
        nodes = f"n{self.nodes}x" if self.nodes > 1 else ""
        return (f"{self.backend} {self.model} x{self.multiple} b{self.global_batch} "
                f"{nodes}d{self.devices}{threads}" + (f" seed{self.seed}" if self.seed else "")
                + f" r{self.repeat}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Cell:
        return cls(**values)


def _settings_fields() -> list[tuple]:
    fields = []
    for setting in IN_CELL:
        default = setting.cell_default
        fields.append((setting.field_name, setting.kind) if default is None else
                      (setting.field_name, setting.kind, dataclasses.field(default=default)))
    return fields


Cell = dataclasses.make_dataclass("Cell", [
    ("grid", str),
    *_settings_fields(),
    ("threads", int, 0),  # compute threads per device; 0: the cores shared out over the devices
    ("data_dir", str | None, None),
    ("sweep", str, ""),  # the batch sweep this cell is on ("32x4"), if any
    ("repeat", int, 0),
    ("look", int, 0),  # its look of --until-conclusive's plan (0: a grid run without it)
], bases=(CellMethods,), frozen=True, kw_only=True)
Cell.__module__ = __name__
Cell.__doc__ = ("One configuration of the grid; `repeat` says which repetition of it this run is. "
                "Fields: the grid's name, the settings of common.grids.settings.IN_CELL, "
                "and threads, data_dir, sweep, repeat, look.")


def threads_per_device(cell: Cell, cores: int) -> int:
    """Compute threads each device of `cell` gets: its pinned count, else the `cores` of a node
    shared out over its devices there, at least 1."""
    return cell.threads or max(1, cores // cell.devices)


def stub() -> str:
    """cell.pyi: this module as a type checker should read it, Cell's fields spelled out."""
    def kind(annotation) -> str:
        return getattr(annotation, "__name__", None) or str(annotation).replace("NoneType",
                                                                                 "None")
    fields = [f"    {f.name}: {kind(f.type)}" for f in dataclasses.fields(Cell)]
    arguments = [f"{f.name}: {kind(f.type)}" + ("" if f.default is dataclasses.MISSING
                                                else " = ...") for f in dataclasses.fields(Cell)]
    methods = []
    for name, member in vars(CellMethods).items():
        if isinstance(member, property):
            methods += ["    @property", f"    def {name}(self) -> "
                        f"{member.fget.__annotations__['return']}: ..."]
        elif isinstance(member, classmethod):
            methods += ["    @classmethod", f"    def {name}(cls, values: dict) -> Cell: ..."]
        elif callable(member):
            parameters = ", ".join(f"{k}: {v}" for k, v in member.__annotations__.items()
                                   if k != "return")
            methods.append(f"    def {name}(self{', ' if parameters else ''}{parameters}) -> "
                           f"{member.__annotations__['return']}: ...")
    lines = ["# Generated by `python -m xbench.common.grids.cell` from the settings table",
             "# (common/grids/settings.py): do not edit.", "",
             "class Cell:", '    """One configuration of the grid (common.grids.cell)."""',
             *fields, "", "    def __init__(", "        self,", "        *,",
             *[f"        {argument}," for argument in arguments], "    ) -> None: ...",
             *methods, "", "def threads_per_device(cell: Cell, cores: int) -> int: ...",
             "def stub() -> str: ...", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(stub(), end="")
