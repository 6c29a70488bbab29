"""``calc``: a calculator tool, the default tool of ``environment=tools`` (and of ``environment=calculator``).

It evaluates + - * / // % ** and parentheses over numbers by walking Python's syntax tree, never ``eval``: a
policy's call cannot run code, and a power or operand too large to compute quickly is refused, since a worker busy
with ``9**9**9`` would hold its process until the timeout."""

from __future__ import annotations

import ast
import operator

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_MAX_DIGITS = 100


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) * max(len(str(abs(int(left)))), 1) > _MAX_DIGITS:
            raise ValueError("the result would be too large")
        result = _OPERATORS[type(node.op)](left, right)
        if isinstance(result, int) and abs(result) >= 10 ** _MAX_DIGITS:
            raise ValueError("the result would be too large")
        return result
    raise ValueError(f"unsupported expression: {ast.unparse(node)!r}")


def calc(e: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        e: The expression, e.g. 37*14 or (3+4)**2.
    """
    try:
        tree = ast.parse(str(e).strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {e!r}") from None
    result = _value(tree.body)
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return str(result)
