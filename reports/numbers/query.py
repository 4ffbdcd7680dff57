"""`--where`: a filter that can only compare columns with values.

The text is parsed as a Python expression and walked node by node: column names, literal values
(text, numbers, true/false, None, lists of them), the comparisons == != < <= > >= in, not in,
joined by and / or / not. Nothing in it is ever evaluated as code, so no query can call a
function, read an attribute or reach a variable.
"""
import ast
import operator

import pandas as pd

from xbench.common.backends.traits import TRAITS
from xbench.common.errors import UserError

COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
               ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
HOW = ("--where compares columns with values (==, !=, <, <=, >, >=, in, not in), joined by "
       "and / or / not, e.g. \"model == 'small' and devices > 1\"")


def select(frame: pd.DataFrame, where: str | None) -> pd.DataFrame:
    """The rows of `frame` matching `where` (a UserError naming the problem if it is not a
    filter of this form)."""
    if not where:
        return frame
    try:
        tree = ast.parse(where, mode="eval")
        mask = _mask(tree.body, frame, where)
    except SyntaxError as e:
        raise UserError(f"--where {where!r} is not a valid filter: SyntaxError: {e.msg}. "
                        f"{HOW}") from None
    except (RecursionError, MemoryError):
        raise UserError(f"--where of {len(where):,} characters is too deeply nested to be a "
                        f"filter. {HOW}") from None
    if not isinstance(mask, pd.Series) or mask.dtype != bool:
        raise UserError(f"--where {where!r} does not give true/false per row. {HOW}")
    return frame[mask].reset_index(drop=True)


def _mask(node, frame, where):
    if isinstance(node, ast.BoolOp):
        masks = [_mask(value, frame, where) for value in node.values]
        combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
        result = masks[0]
        for mask in masks[1:]:
            result = combine(result, mask)
        return result
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ~_mask(node.operand, frame, where)
    if isinstance(node, ast.Compare):
        result, left = None, node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            part = _compare(op, left, right, frame, where)
            result = part if result is None else result & part
            left = right
        return result
    if isinstance(node, ast.Name):
        return _operand(node, frame, where)
    raise UserError(f"--where {where!r}: {type(node).__name__} is not allowed. {HOW}")


def _operand(node, frame, where):
    if isinstance(node, ast.Name):
        if node.id not in frame.columns:
            columns = ", ".join(c for c in frame.columns if str(c).isidentifier())
            raise UserError(f"--where {where!r} is not a valid filter: no column '{node.id}'. "
                            f"Columns: {columns}")
        return frame[node.id]
    if isinstance(node, ast.Constant) and (node.value is None or
                                           isinstance(node.value, (str, int, float, bool))):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_operand(item, frame, where) for item in node.elts
                if isinstance(item, ast.Constant) or _refuse(item, where)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    return _refuse(node, where)


def _refuse(node, where):
    raise UserError(f"--where {where!r}: {type(node).__name__} is not allowed (only column names "
                    f"and literal values). {HOW}")


def _compare(op, left_node, right_node, frame, where):
    left, right = _operand(left_node, frame, where), _operand(right_node, frame, where)
    _same_kind(left_node, left, right_node, right, where)
    _same_kind(right_node, right, left_node, left, where)
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(left, pd.Series) or not isinstance(right, list):
            raise UserError(f"--where {where!r}: 'in' takes a column on the left and a list of "
                            f"values on the right, e.g. \"backend in {list(TRAITS)[:2]}\"")
        found = left.isin(right)
        return found if isinstance(op, ast.In) else ~found
    if type(op) not in COMPARISONS:
        raise UserError(f"--where {where!r}: {type(op).__name__} is not a comparison it knows. "
                        f"{HOW}")
    try:
        result = COMPARISONS[type(op)](left, right)
    except TypeError:
        raise UserError(f"--where {where!r} compares {_described(left_node, left)}, with "
                        f"{_described(right_node, right)}: give a value of the column's "
                        f"kind") from None
    if not isinstance(result, pd.Series):
        raise UserError(f"--where {where!r} compares two values without a column. {HOW}")
    return result.fillna(False).astype(bool)


# pandas' inferred kinds of a column's values, as the kinds of a literal (None fits any)
KINDS = {"string": "text", "integer": "a number", "floating": "a number",
         "mixed-integer-float": "a number", "boolean": "true/false"}


def _kind(value) -> str:
    return "true/false" if isinstance(value, bool) else "a number" \
        if isinstance(value, (int, float)) else "text" if isinstance(value, str) else ""


def _same_kind(column_node, column, values_node, values, where) -> None:
    """A UserError where `column` (a Series) is compared with a value of another kind: 'devices
    == "two"' would match nothing, silently, as an empty report."""
    if not isinstance(column, pd.Series) or isinstance(values, pd.Series):
        return
    kind = KINDS.get(pd.api.types.infer_dtype(column, skipna=True))
    for value in values if isinstance(values, list) else [values]:
        if kind and value is not None and _kind(value) != kind:
            raise UserError(f"--where {where!r} compares {ast.unparse(column_node)}, {kind}, "
                            f"with {value!r}, {_kind(value) or type(value).__name__}: give a "
                            f"value of the column's kind")


def _described(node, value) -> str:
    """'global_batch, a number' or "'128', text": what a side of a comparison is."""
    if isinstance(value, pd.Series):
        kind = "a number" if pd.api.types.is_numeric_dtype(value) else "text"
        return f"{ast.unparse(node)}, {kind}"
    kind = "a number" if isinstance(value, (int, float)) else "text" if isinstance(value, str) \
        else type(value).__name__
    return f"{value!r}, {kind}"
