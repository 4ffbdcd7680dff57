"""The faults' setting (`Role.FAULT`): faults injected on purpose (common.workload.faults), to see
where the step attribution puts them; their cells stay out of verdicts."""
from __future__ import annotations

from xbench.common.grids.setting import Role, Setting
from xbench.common.workload import faults

FAULT_SETTINGS = [
    Setting("inject", str, [faults.NONE],
            "Faults to inject, to see where the step attribution puts them (never by default; "
            "rows with one stay out of verdicts and comparisons): none, input-delay=MS, "
            "slow-rank=R:MS, link=RATE (e.g. 400mbit: the loopback between the cell's "
            "processes capped; a cell of one process is refused it), joined with '+' (an axis, "
            "comma-separated).", axis=True, check=faults.check,
            key_part=lambda c: f"|inject-{c.inject}" if c.inject != faults.NONE else "",
            since=5, role=Role.FAULT,
            label=lambda v: "" if v["inject"] == faults.NONE else f"inject {v['inject']}"),

]
