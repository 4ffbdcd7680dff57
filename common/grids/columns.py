"""The report's columns, read from the settings table (common.grids.settings) by each setting's
`role`: what a reader of the results groups, pairs and labels cells by.

Apart from the table because they are its readers' view, not its declaration: the grid, the cell
and the row read the table; reports/ reads these (which columns are the setup, the placement, the
training choices, which change only a random draw, and a row's training label), so a setting's
role alone puts it in the right columns.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xbench.common.grids.setting import Role
from xbench.common.grids.settings import SETTINGS


def columns(*roles: Role, axes: bool = False) -> list[str]:
    """The report's columns of the settings of `roles`, in the table's order (with `axes`, of
    the axes alone): what it groups, pairs and shows cells by."""
    return [s.column_name for s in SETTINGS.values() if s.role in roles and s.column_name
            and (s.axis or not axes)]


def draws() -> list[str]:
    """The columns that change only a random draw (the seed): one configuration's cells."""
    return [s.column_name for s in SETTINGS.values() if s.draw]


def training_label(row: Mapping[str, Any], roles: tuple[Role, ...] = (Role.TRAINING,
                                                                       Role.FAULT)) -> str:
    """How a row's cell is trained, in a few words ('adam 0.001'; 'sgd 0.1 m0.9 wd0.0005, lr
    linear/128, warm-up 1'; '..., precision bf16, compressed fp16, inject link=400mbit'): each
    choice of `roles` in the table's order, where it says something (its default says
    nothing, but the optimizer's words are always said)."""
    words = [s.label(row) for s in SETTINGS.values() if s.role in roles and callable(s.label)]
    return ", ".join(w for w in words if w)


def reference_table() -> str:
    """The settings as a Markdown table, for docs/grids.md (a test keeps that page current)."""
    lines = ["| grid file | command line | values | default | what |", "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        kind = " or ".join(s.choices) if s.choices else s.kind.__name__
        values = f"list of {kind} (an axis)" if s.axis else kind
        default = "—" if s.default is None else ",".join(map(str, s.default)) if s.axis \
            else str(s.default).lower() if s.kind is bool else repr(s.default)
        flag = ("—" if not s.flag_name else f"`--{s.key.replace('_', '-')}/--no-"
                f"{s.key.replace('_', '-')}`" if s.kind is bool else f"`{s.flag_name}`")
        lines.append(f"| `{s.key}` | {flag} | {values} | {default} | {s.help} |")
    return "\n".join(lines)
