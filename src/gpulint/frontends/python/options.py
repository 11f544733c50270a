"""Command-line options of a module: what `args.x` is when the user passes nothing.

A training script that reads a setting from its own argparse options (`num_workers=args.workers`)
runs, by default, with the option's default. This answers that default where the module says it
plainly: one `add_argument("--workers", ..., default=0)` (or `dest="workers"`) in the module, its
default a constant, and the module parses its arguments (`parse_args`/`parse_known_args`). Two
options with the same destination, a computed default or an option of another module: unknown.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import keyword

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_MISSING = object()
_UNKNOWN = object()  # declared more than once, or with a default that is not a constant


def _destination(call: ast.Call) -> str | None:
    dest = keyword(call, "dest")
    if dest is not None:
        value = dest.value
        return (
            value.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str)
            else None
        )
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not flags:
        return None
    long = [f for f in flags if f.startswith("--")]
    chosen = long[0][2:] if long else flags[0].lstrip("-")
    return chosen.replace("-", "_") or None


def _table(file: PythonFile) -> dict[str, object]:
    table: dict[str, object] = {}
    if "add_argument" not in file.text or "parse_" not in file.text:
        return table
    parses = any(
        isinstance(c.func, ast.Attribute) and c.func.attr in ("parse_args", "parse_known_args")
        for c in file.nodes(ast.Call)
    )
    if not parses:
        return table
    for call in file.nodes(ast.Call):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        name = _destination(call)
        if name is None:
            continue
        default = keyword(call, "default")
        value: object = _MISSING
        if default is not None:
            value = default.value.value if isinstance(default.value, ast.Constant) else _UNKNOWN
        table[name] = _UNKNOWN if name in table else value
    # `parser.set_defaults(workers=8)` overrides the declared default: unknown
    for call in file.nodes(ast.Call):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "set_defaults":
            for kw in call.keywords:
                if kw.arg is not None:
                    table[kw.arg] = _UNKNOWN
    return table


_OPTIONS: MemoKey[dict[str, object]] = MemoKey("command-line option defaults")


def option_default(file: PythonFile, expr: ast.AST) -> tuple[str, object] | None:
    """(option name, default) when `expr` is `<args>.name` for an option this module declares
    once with a constant default; None otherwise."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
        return None
    table = file.memo.get(_OPTIONS, lambda: _table(file))
    value = table.get(expr.attr, _MISSING)
    if value is _MISSING or value is _UNKNOWN:
        return None
    return expr.attr, value
