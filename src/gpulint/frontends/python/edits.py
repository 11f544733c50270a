"""Text edits for autofixes, computed from node positions so nothing else in the file moves."""

from __future__ import annotations

import ast

from gpulint.diagnostics import Edit


def replace(file, node: ast.AST, text: str) -> Edit:
    start, end = file.offsets(node)
    return Edit(start, end, text)


def _arg_nodes(call: ast.Call) -> list[ast.AST]:
    return sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))


def insert_first_arg(file, call: ast.Call, text: str) -> Edit:
    """`f(a=1)` -> `f(TEXT, a=1)`; `f()` -> `f(TEXT)`."""
    args = _arg_nodes(call)
    if args:
        start, _ = file.offsets(args[0])
        return Edit(start, start, f"{text}, ")
    _, end = file.offsets(call)
    return Edit(end - 1, end - 1, text)  # just before the closing parenthesis


def append_arg(file, call: ast.Call, text: str) -> Edit:
    """`f(a)` -> `f(a, TEXT)`; `f(a,)` -> `f(a, TEXT,)`; `f()` -> `f(TEXT)`."""
    args = _arg_nodes(call)
    if args:
        _, end = file.offsets(args[-1])
        return Edit(end, end, f", {text}")
    _, end = file.offsets(call)
    return Edit(end - 1, end - 1, text)
