"""Is autograd recording at this point of the code? Answered from the text, conservatively.

Grad mode is off inside `with torch.no_grad():` / `torch.inference_mode()` /
`torch.set_grad_enabled(False)`, in a function decorated `@torch.no_grad()` /
`@torch.inference_mode()` (or `@torch.no_grad` bare), after a `torch.set_grad_enabled(False)`
statement in the same function or at module level, and in a function of this file every call of
which is in code where it is off. A function nothing in this file calls is "unknown": its caller
may be elsewhere (and may turn grad mode off there).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import FUNCTIONS, SCOPES, MemoKey

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

NO_GRAD = {
    "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
}  # fmt: skip
SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
ENABLE_GRAD = {"torch.enable_grad", "torch.autograd.enable_grad"}

OFF, ON, UNKNOWN = "off", "on", "unknown"


def grad_mode(file: PythonFile, node: ast.AST) -> str:
    """OFF where the code around `node` turns autograd off, ON where it runs with autograd on
    (the default, as far as this file shows), UNKNOWN where it depends on callers elsewhere."""
    known = file.memo.get(_MODES, dict)
    return _mode(file, node, known, 0)


_MODES: MemoKey[dict[int, str]] = MemoKey("grad mode by function")


def _mode(file: PythonFile, node: ast.AST, known: dict[int, str], depth: int) -> str:
    child = node
    for parent in file.ancestors(node):
        if isinstance(parent, (ast.With, ast.AsyncWith)) and child in parent.body:
            for item in parent.items:
                switch = _switch(file, item.context_expr)
                if switch is not None:
                    return switch
        if isinstance(child, ast.stmt):
            block = file.statement_block(child)
            if block is not None:
                for earlier in reversed(block[: block.index(child)]):
                    switch = _set_statement(file, earlier)
                    if switch is not None:
                        return switch
        if isinstance(parent, SCOPES):
            if isinstance(parent, FUNCTIONS):
                return _function_mode(file, parent, known, depth)
            if isinstance(parent, ast.Lambda):
                return UNKNOWN
        child = parent
    return ON


def _function_mode(file: PythonFile, f: ast.AST, known: dict[int, str], depth: int) -> str:
    assert isinstance(f, FUNCTIONS)
    for d in f.decorator_list:
        switch = _switch(file, d)
        if switch is not None:
            return switch
    key = id(f)
    if key in known:
        return known[key]
    if depth > 4:
        return UNKNOWN
    known[key] = UNKNOWN  # while answering: a recursive call is no evidence
    calls = _calls_of(file, f)
    if not calls:
        result = UNKNOWN
    else:
        modes = {_mode(file, c, known, depth + 1) for c in calls}
        result = OFF if modes == {OFF} else (ON if ON in modes else UNKNOWN)
    known[key] = result
    return result


def _calls_of(file: PythonFile, f: ast.AST) -> list[ast.Call]:
    """The calls in this file that the model resolves to `f`."""
    name = getattr(f, "name", "")
    out = []
    for call in file.nodes(ast.Call):
        func = call.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called == name and file.model.resolve_callee(call) is f:
            out.append(call)
    return out


def _switch(file: PythonFile, expr: ast.AST) -> str | None:
    """OFF for `torch.no_grad()` (or the bare decorator), `torch.inference_mode()` (not
    `inference_mode(False)`), `torch.set_grad_enabled(False)`; ON for `torch.enable_grad()`,
    `set_grad_enabled(True)`; None for anything else (a variable: unknown either way)."""
    q = file.qualname(expr)
    if q in NO_GRAD:
        if isinstance(expr, ast.Call) and expr.args:
            arg = expr.args[0]
            if isinstance(arg, ast.Constant) and arg.value is False:
                return ON  # inference_mode(False)
            if not isinstance(arg, ast.Constant):
                return None
        return OFF
    if q in ENABLE_GRAD:
        return ON
    if q in SET_GRAD and isinstance(expr, ast.Call) and expr.args:
        arg = expr.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, bool):
            return ON if arg.value else OFF
    return None


def _set_statement(file: PythonFile, stmt: ast.stmt) -> str | None:
    """`torch.set_grad_enabled(False)` as a statement of its own."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        if file.qualname(stmt.value) in SET_GRAD:
            return _switch(file, stmt.value)
    return None
