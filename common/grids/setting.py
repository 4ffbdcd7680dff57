"""What a setting is: `Setting`, one entry of the settings table (common.grids.settings), and
its `Role` to a reader of the results. A setting checks its own values here; the table and what
is derived from it are in settings.py."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from xbench.common.errors import UserError, did_you_mean


class Role(str, Enum):
    """What a setting is to a reader of the results (the report derives its columns from it)."""
    SETUP = "setup"              # what is trained on what: cells compared must agree on it
    TRAINING = "training"        # how it is trained: cells compared agree on it; in the label
    PLACEMENT = "placement"      # which backend on how many devices and nodes: what is compared
    FAULT = "fault"              # a fault injected on purpose: its cells stay out of verdicts
    BOOKKEEPING = "bookkeeping"  # how the grid runs, not what a cell measures


@dataclass(frozen=True)
class Setting:
    """One setting of a grid. `key` is its name in a grid file and on `xbench grid`'s command
    line (axes are plural: `backends`); the other names default from it."""

    key: str
    kind: type                     # int, float, str or bool (of each value, for an axis)
    default: Any                   # None: every grid must give it; an axis' default is a list
    help: str                      # the flag's help and the reference's description
    role: Role                     # what it is to a reader of the results (Role)
    axis: bool = False             # a list of values: every combination of the axes is a cell
    flag: str | None = ""          # "": --key with dashes; None: only in grid files
    field: str | None = ""         # the Cell field ("": key); None: a grid-level setting
    row: str | None = ""           # the result row's field ("": field); None: not in the row
    section: str = "configuration"  # the row's section it belongs to (SECTIONS)
    choices: tuple[str, ...] = ()  # the values a text setting may take
    # A check of its own (names with suggestions) that returns the value spelled one way: one
    # setting written differently ('1e3', '1000') must be one cell, not several.
    check: Callable[[Any], Any] | None = None
    minimum: float = 1             # the lowest value of a number
    maximum: float | Callable[[], float] | None = None
    why: str = ""                  # why the maximum (whole numbers), or what the number is
    # The cell key's part of this setting (a function of the cell), or the key of the setting
    # whose part carries it; None: not in the key (it does not change what is measured).
    key_part: Callable[[Any], str] | str | None = None
    since: int = 1                 # the schema version whose rows first recorded it
    zero_is_null: bool = False     # the row records 0 (none) as null
    # What a Cell made without it holds, and what rows older than `since` did (an upgrade fills
    # it in): the default (an axis' first) unless given. Give it where the default stands for
    # another value (lr 0: the optimizer's own), or when a default changes, so old rows keep
    # what they did.
    implied: Any = None
    # The training label's words for it (a training choice or a fault): a function of the row's
    # values ("" where it says nothing), or the key of the setting whose words carry it.
    label: Callable[[Mapping[str, Any]], str] | str | None = None
    column: str = ""               # the report's column (default: the row's field)
    draw: bool = False             # only the random draw changes with it (the seed): its cells
    #                                are one configuration, held out of a prediction together

    @property
    def flag_name(self) -> str | None:
        return None if self.flag is None else self.flag or "--" + self.key.replace("_", "-")

    @property
    def field_name(self) -> str | None:
        return None if self.field is None else self.field or self.key

    @property
    def row_name(self) -> str | None:
        return None if self.row is None or self.field_name is None else self.row or self.field_name

    @property
    def column_name(self) -> str | None:
        """The report's column of it (None: the report has none)."""
        return self.column or self.row_name

    @property
    def cell_default(self) -> Any:
        """The value of a Cell made without it (`implied`)."""
        if self.implied is not None:
            return self.implied
        return self.default[0] if self.axis and self.default else self.default

    def row_value(self, value: Any) -> Any:
        """How the row records `value`."""
        return (value or None) if self.zero_is_null else value


    def check_value(self, value: Any) -> Any:
        """`value` if this setting may take it, else a UserError that names it."""
        where = f"fix it in the grid file or with {self.flag_name or 'the grid file'}"
        if self.kind is bool:
            if not isinstance(value, bool):
                raise UserError(f"'{self.key}' must be true or false, got {value!r}")
        elif self.kind is float:
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or math.isnan(value) or not self.minimum <= value <= self.maximum):
                raise UserError(f"'{self.key}' must be a number from {self.minimum:g} to "
                                f"{self.maximum:g} ({self.why}), got {value!r}; {where}")
            value = float(f"{value:g}")  # as a cell key writes it: one value, one cell
        elif self.kind is int:
            self._check_whole(value, where)
        elif not isinstance(value, str):
            raise UserError(f"'{self.key}' must be text, got {value!r}")
        elif "\0" in value:
            raise UserError(f"'{self.key}' must not contain a NUL character")
        elif self.choices and value not in self.choices:
            raise UserError(f"'{self.key}' must be one of {', '.join(self.choices)}, got "
                            f"'{value}'{did_you_mean(value, self.choices)}")
        return self.check(value) if self.check else value

    def _check_whole(self, value: Any, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"'{self.key}' must be a whole number, got {value!r}; {where}")
        if value < min(self.minimum, 1):
            raise UserError(f"'{self.key}' must be {'positive' if self.minimum else '0 or more'}"
                            f", got {value}; {where}")
        if value < self.minimum:
            raise UserError(f"'{self.key}' must be at least {self.minimum:g}, got {value}: "
                            f"{self.why}; {where}")
        limit = self.maximum() if callable(self.maximum) else self.maximum
        if limit is not None and value > limit:
            shown = (f"is a {len(str(value))}-digit number," if value >= 10 ** 18
                     else f"{value:,} is")
            raise UserError(f"'{self.key}' {shown} more than {limit:,}: {self.why}; {where}")


def whole_bytes(megabytes: float) -> float:
    """`megabytes` (of 2^20 bytes) rounded to the whole bytes a library takes, so that the cell
    holds (and its row records) what the library is given; a positive amount under one byte,
    which a library would read as 0 (its own default), is refused."""
    rounded = round(megabytes * 2**20)
    if megabytes and not rounded:
        raise UserError(f"'bucket_mb' {megabytes:g} is less than one byte (1 byte is "
                        f"{2**-20:.3g} MB); give 0 for each library's own buckets")
    return rounded / 2**20


def check_table(settings: dict[str, Setting]) -> None:
    """What the table promises, checked when it loads (a typo fails every command at once):
    every setting has a role; every training choice and fault says how the label shows it, in
    words of its own or of a setting that exists; a column is a field of the row."""
    for s in settings.values():
        assert isinstance(s.role, Role), f"setting {s.key}: no role"
        if s.role in (Role.TRAINING, Role.FAULT):
            assert s.row_name, f"setting {s.key}: a {s.role.value} setting the row lacks"
            assert callable(s.label) or s.label in settings, f"setting {s.key}: no label words"
        if s.column:
            assert s.role is not Role.BOOKKEEPING, f"setting {s.key}: a column of bookkeeping"
