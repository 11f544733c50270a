"""Reading Triton code's values from its text: which `triton.language` function a call names,
module constants, and the literal arithmetic of sizes and configs (`evaluate`). Nothing is
imported or executed: a value that cannot be read from literals is `Unknown`, and the rules
stay silent on unknowns."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpulint.frontends import MemoKey

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

TL = "triton.language."

_CONSTANTS: MemoKey[dict[str, ast.expr]] = MemoKey("triton.constants")


def tl_name(file: PythonFile, node: ast.AST) -> str | None:
    """`load` for `tl.load(...)` / `triton.language.load(...)` / `from triton.language import load`."""
    q = file.qualname(node)
    if q and q.startswith(TL):
        return q[len(TL) :]
    return None


def is_triton(file: PythonFile, node: ast.AST, *names: str) -> bool:
    q = file.qualname(node.func if isinstance(node, ast.Call) else node)
    return q is not None and q in {f"triton.{n}" for n in names}


class Unknown(Exception):
    """A value that cannot be read from the source's literals."""


def module_constants(file: PythonFile) -> dict[str, ast.expr]:
    """Module-level `NAME = <expr>` assignments made exactly once (cached per file)."""
    return file.memo.get(_CONSTANTS, lambda: _module_constants(file))


def _module_constants(file: PythonFile) -> dict[str, ast.expr]:
    # A name the module binds once, by a top-level `NAME = <expr>`: any other binding of it in
    # the module's scope (an import, a second assignment, `+=`, a loop) makes it ambiguous.
    tree = file.tree
    out: dict[str, ast.expr] = {}
    for name, bound in file.model.table(tree).items():
        if len(bound) != 1:
            continue
        (b,) = bound
        if (
            b.kind in ("assign", "annassign")
            and b.value is not None
            and file.parent(b.node) is tree
        ):
            out[name] = b.value
    return out


def evaluate(
    node: ast.AST, env: dict[str, object], file: PythonFile | None = None, depth: int = 0
) -> Any:
    """Evaluate a literal expression (numbers, strings, lists, tuples, + - * // ** %, names in
    `env` or module constants). Raises Unknown otherwise."""
    if depth > 20:
        raise Unknown

    def ev(n: ast.AST) -> Any:
        return evaluate(n, env, file, depth + 1)

    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if file is not None and node.id in module_constants(file):
            return ev(module_constants(file)[node.id])
        raise Unknown
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                out.extend(ev(e.value))
            else:
                out.append(ev(e))
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -ev(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = ev(node.left), ev(node.right)
        ops: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: lambda a, b: a // b,
            ast.Pow: lambda a, b: a**b,
            ast.Mod: lambda a, b: a % b,
        }
        op = ops.get(type(node.op))
        if op is None:
            raise Unknown
        try:
            return op(left, right)
        except Exception:
            raise Unknown from None
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = ev(node.left), ev(node.comparators[0])
        compares: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
            ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b,
            ast.Gt: lambda a, b: a > b,
            ast.GtE: lambda a, b: a >= b,
            ast.Eq: lambda a, b: a == b,
            ast.NotEq: lambda a, b: a != b,
            ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b,
        }
        compare = compares.get(type(node.ops[0]))
        if compare is None:
            raise Unknown
        try:
            return compare(left, right)
        except Exception:
            raise Unknown from None
    if isinstance(node, ast.BoolOp):
        values = [ev(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not ev(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        args = [ev(a) for a in node.args]
        if not all(isinstance(a, int) for a in args) or not 1 <= len(args) <= 3:
            raise Unknown
        return list(range(*args))
    raise Unknown


def label(node: ast.AST) -> str:
    """A size as text: `BLOCK_M`, `meta['BLOCK_M']` -> `BLOCK_M`, `-BLOCK_N` -> `BLOCK_N`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return label(node.operand)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        if isinstance(node.slice.value, str):
            return node.slice.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in ("self", "meta", "META", "args", "config"):
            return node.attr
    return ast.unparse(node)


def ceil_division(node: ast.AST) -> bool:
    """`tl.cdiv(n, X)`, `triton.cdiv`, `math.ceil(n / X)`, `(n + X - 1) // X`."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if "cdiv" in f or "ceil" in f:
                return True
        if (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.FloorDiv)
            and isinstance(n.left, ast.BinOp)
            and isinstance(n.left.op, (ast.Add, ast.Sub))
        ):
            return True
    return False


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
