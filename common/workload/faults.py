"""Faults xbench injects on purpose (the `inject` setting), to prove that the step attribution
puts each where it belongs (common.measuring.attribution). Never on by default; a row with a fault
says so (`inject`), and the report keeps it out of every verdict and comparison.

- `input-delay=MS`: every batch the training loop asks for arrives MS milliseconds later (the
  loop waits for it inside the input part of the step).
- `slow-rank=R:MS`: rank R's compute takes MS milliseconds longer every step (inside its backward
  pass), so the other ranks wait for it at the collective.
- `link=RATE`: the cell's ranks run in a network namespace of their own whose loopback is capped
  by a token bucket (`tc ... tbf rate RATE`): a slow network, on one machine. RATE is tc's:
  a number and kbit, mbit, gbit (bits per second) or kbps, mbps, gbps (bytes per second). A
  cell of one process crosses no loopback, and is refused it (common.backends.start).

Several at once are joined with '+': `input-delay=20+slow-rank=1:30`.
"""
import math
import re
from dataclasses import dataclass, replace

from xbench.common.errors import UserError

NONE = "none"
RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit|kbps|mbps|gbps)$")
RATE_BYTES = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
              "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}  # tc's units, per second
LONGEST_MS = 10_000  # a delay beyond 10 s per step measures nothing but the delay
# The rates a capped link takes, in bits per second: below 8 kbit tc shrinks the token bucket
# under a 64 KiB loopback packet (it would never pass); above 1,000 gbit the bucket of a few
# milliseconds is beyond what tc can hold, and no loopback runs that fast anyway.
SLOWEST_LINK, FASTEST_LINK = 8e3, 1e12
MAX_RANK = 4095


@dataclass(frozen=True)
class Faults:
    """The faults of a cell (all zero: none)."""
    input_delay: float = 0.0        # seconds every batch waits more
    slow_rank: int | None = None    # the rank whose compute is slowed
    slow_seconds: float = 0.0       # by this much every step
    link: str | None = None         # tc's rate of the cell's capped loopback

    @property
    def link_bytes_per_second(self) -> float | None:
        if self.link is None:
            return None
        number, unit = RATE.match(self.link).groups()
        return float(number) * RATE_BYTES[unit]

    def slow_for(self, rank: int) -> float:
        """Seconds rank `rank`'s compute is made longer each step."""
        return self.slow_seconds if rank == self.slow_rank else 0.0


def parse(text: str) -> Faults:
    """The faults an `inject` value names ('none', or faults joined with '+'); a UserError that
    says what a fault looks like for anything else."""
    if text == NONE:
        return Faults()
    found = {}
    for part in text.split("+"):
        kind, _, value = part.strip().partition("=")
        if kind in found:
            raise UserError(f"inject {text!r} names {kind} twice")
        if kind == "input-delay":
            found[kind] = {"input_delay": _milliseconds(value, part) / 1000}
        elif kind == "slow-rank":
            rank, colon, delay = value.partition(":")
            if not colon or not rank.isdigit() or int(rank) > MAX_RANK:
                raise UserError(f"inject {part!r}: slow-rank=R:MS takes a rank R from 0 to "
                                f"{MAX_RANK} and milliseconds MS, e.g. slow-rank=1:30")
            found[kind] = {"slow_rank": int(rank),
                           "slow_seconds": _milliseconds(delay, part) / 1000}
        elif kind == "link":
            found[kind] = {"link": _rate(value, part)}
        else:
            raise UserError(f"inject {text!r}: unknown fault {kind!r}; give none, or "
                            f"input-delay=MS, slow-rank=R:MS, link=RATE (joined with '+')")
    return Faults(**{k: v for fields in found.values() for k, v in fields.items()})


def check(text: str) -> str:
    """The faults `text` names, spelled one way (the setting's check): 'input-delay=1e3' and
    'input-delay=01000' are one cell, 'input-delay=1000'; a link's rate in the largest of gbit,
    mbit and kbit that makes it whole; faults in the order input-delay, slow-rank, link."""
    return _spelled(parse(text))


def without_link(text: str) -> str:
    """The faults `text` names but a capped link, spelled as `check` spells them: what a cell of
    one process takes of them (its gradients cross no link: common.backends.start)."""
    return _spelled(replace(parse(text), link=None))


def _spelled(faults: Faults) -> str:
    parts = []
    if faults.input_delay:
        parts.append(f"input-delay={_ms(faults.input_delay)}")
    if faults.slow_rank is not None:
        parts.append(f"slow-rank={faults.slow_rank}:{_ms(faults.slow_seconds)}")
    if faults.link:
        parts.append(f"link={faults.link}")
    return "+".join(parts) or NONE


def _ms(seconds: float) -> str:
    """Seconds as the milliseconds a fault is written in ('1000', '2.5')."""
    return f"{seconds * 1000:.12g}"


def _rate(value: str, part: str) -> str:
    """tc's rate `value`, checked against what a capped link can take, spelled one way."""
    found = RATE.match(value)
    bits = float(found[1]) * RATE_BYTES[found[2]] * 8 if found else math.nan
    if not SLOWEST_LINK <= bits <= FASTEST_LINK:
        raise UserError(f"inject {part!r}: link=RATE takes tc's rate, a number and kbit, mbit, "
                        f"gbit, kbps, mbps or gbps, from 8kbit to 1000gbit, e.g. link=400mbit")
    for unit, size in (("gbit", 1e9), ("mbit", 1e6)):
        if bits % size == 0:
            return f"{bits / size:.0f}{unit}"
    return f"{bits / 1e3:.3f}".rstrip("0").rstrip(".") + "kbit"  # never an exponent: RATE's


def _milliseconds(value: str, part: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number <= LONGEST_MS:
        example = "slow-rank=1:30" if part.strip().startswith("slow-rank") else "input-delay=20"
        raise UserError(f"inject {part!r}: a delay is milliseconds above 0 and at most "
                        f"{LONGEST_MS:,}, e.g. {example}")
    return number
