"""Safe evaluation of derived-value expressions and constraints over DataFrame columns.

Expressions are arithmetic over column names and numbers (``+ - * / // % **``, unary minus, and the
functions ``min, max, ceil, floor, log2``); nothing else parses. Constraints are ``column OP value``
with OP one of ``== != <= >= < >`` and value a number, ``true``/``false`` or a bare word.
"""

from __future__ import annotations

import ast
import contextlib
import operator
import re

import numpy as np
import pandas as pd

from commodel.errors import CommodelError

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCTIONS = {"min": np.minimum, "max": np.maximum, "ceil": np.ceil, "floor": np.floor, "log2": np.log2}
_CONSTRAINT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|<=|>=|<|>)\s*(\S+)\s*")
_COMPARE = {
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}


def _parse(text: str, where: str) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CommodelError(f"{where}: cannot read expression '{text}': {exc.msg}") from None
    for node in ast.walk(tree):
        allowed = (
            ast.Expression,
            ast.BinOp,
            ast.UnaryOp,
            ast.USub,
            ast.Name,
            ast.Load,
            ast.Constant,
            ast.Call,
        )
        if not isinstance(node, (*allowed, *_BINARY)):
            raise CommodelError(
                f"{where}: '{text}' uses {type(node).__name__}, which expressions do not allow"
            )
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
        ):
            raise CommodelError(f"{where}: '{text}' calls something other than {', '.join(_FUNCTIONS)}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
            raise CommodelError(f"{where}: '{text}' has a non-numeric constant")
    return tree


def expression_names(text: str, where: str) -> set[str]:
    """Column names an expression reads."""
    tree = _parse(text, where)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate_expression(text: str, frame: pd.DataFrame, where: str) -> np.ndarray:
    """Value of an arithmetic expression for every row of ``frame``."""

    def walk(node: ast.AST) -> object:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return frame[node.id].to_numpy(dtype=float)
        if isinstance(node, ast.UnaryOp):
            return -walk(node.operand)  # type: ignore[operator]
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(walk(a) for a in node.args))  # type: ignore[union-attr]
        assert isinstance(node, ast.BinOp)
        return _BINARY[type(node.op)](walk(node.left), walk(node.right))

    return np.broadcast_to(np.asarray(walk(_parse(text, where)), dtype=float), len(frame)).copy()


def constraint_parts(text: str) -> tuple[str, str, str]:
    """A constraint's column, comparison and value (as written)."""
    match = _CONSTRAINT.fullmatch(text)
    if match is None:
        raise CommodelError(f"constraint '{text}' is not 'column OP value' with OP in {', '.join(_COMPARE)}")
    return match[1], match[2], match[3]


def constraint_mask(text: str, frame: pd.DataFrame) -> np.ndarray:
    """Rows of ``frame`` that satisfy the constraint."""
    column, op, raw = constraint_parts(text)
    value: object = {"true": True, "false": False}.get(raw.lower(), raw)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    data = frame[column].to_numpy()
    flags, numbers = data.dtype == bool, np.issubdtype(data.dtype, np.number)
    if (flags and not isinstance(value, bool)) or (numbers and not flags and not isinstance(value, float)):
        expected = "true or false" if flags else "a number"
        raise CommodelError(f"constraint '{text}': column '{column}' needs to be compared with {expected}")
    return np.asarray(_COMPARE[op](data, value), dtype=bool)
