"""JSON values checked against a shape (`shape_problem`): what a result row's nested values, a
probe record and a model file's kept facts must be, each read unchecked from a file otherwise.
A shape is a tuple of types, POSITIVE, a Range, an object {key: shape} (a key ending in '?' may
be absent; other keys are allowed), [shape] a list of them, Maybe (or null) or Each (an object of
any keys). Below every room of common/: the rooms that read such files share it."""
import math
from typing import Any

NUMBER = (int, float)
TEXT = (str,)
WHOLE = (int,)
BOOL = (bool,)


class Maybe:
    """A nested value that may be null."""
    def __init__(self, shape):
        self.shape = shape


class Each:
    """An object whose keys are any text and whose values all have `shape` (a package list)."""
    def __init__(self, shape):
        self.shape = shape


class Range:
    """A number from `low` to `high` (NaN is none): a count, a share, an accuracy, seconds."""
    def __init__(self, kinds: tuple, low: float, high: float = math.inf):
        self.kinds, self.low, self.high = kinds, low, high

    def problem(self, value: Any, where: str) -> str | None:
        if is_kind(value, self.kinds) and self.low <= value <= self.high:
            return None
        kind = "a whole number" if self.kinds is WHOLE else "a number"
        bound = f"from {self.low:g}" + ("" if math.isinf(self.high) else f" to {self.high:g}")
        return f"'{where}' is {shown(value)}, not {kind} {bound}"


POSITIVE = "a positive number"  # a finite number above 0 (an epoch's seconds)


def shape_problem(value: Any, shape: Any, where: str) -> str | None:
    """What is wrong with `value` as a value of `shape` (see above), naming where it is
    ('epochs[2].contention.contended'), or None."""
    if isinstance(shape, Maybe):
        return None if value is None else shape_problem(value, shape.shape, where)
    if isinstance(shape, Range):
        return shape.problem(value, where)
    if shape is POSITIVE:
        if not (is_kind(value, NUMBER) and value > 0):
            return f"'{where}' is {shown(value)}, not a positive number"
        return None
    if isinstance(shape, tuple):
        if not is_kind(value, shape):
            return (f"'{where}' is {shown(value)}, not "
                    f"{' or '.join(k.__name__ for k in shape)}")
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"'{where}' is {type(value).__name__}, not a list"
        return next(filter(None, (shape_problem(item, shape[0], f"{where}[{index}]")
                                  for index, item in enumerate(value, 1))), None)
    if not isinstance(value, dict):
        return f"'{where}' is {type(value).__name__}, not an object"
    if isinstance(shape, Each):
        return next(filter(None, (shape_problem(item, shape.shape, f"{where}.{key}")
                                  for key, item in value.items())), None)
    for key, inner in shape.items():
        name = key.rstrip("?")
        if name not in value:
            if key.endswith("?"):
                continue
            return f"'{where}' has no '{name}'"
        problem = shape_problem(value[name], inner, f"{where}.{name}")
        if problem:
            return problem
    return None


def shown(value) -> str:
    """A value in a message: short, whatever it is."""
    if isinstance(value, (dict, list)):
        return f"a{'n object' if isinstance(value, dict) else ' list'}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 9:
        return "a very large number"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_kind(value, kinds) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, kinds)
