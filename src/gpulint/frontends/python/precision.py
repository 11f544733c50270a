"""Precision choices in PyTorch code: which autocast runs in which dtype, and stated reasons.

`autocast_dtype` answers "fp16", "bf16" or "unknown" for an autocast call, the way PyTorch would:
`torch.cuda.amp.autocast()` and `torch.autocast("cuda")` default to FP16, an explicit `dtype=`
wins, a dtype or device from a variable is unknown. `comment_near` gives the comments on a line
and the line before it, where a reason for a precision choice is written.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import keyword

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

AUTOCAST = {
    "torch.autocast",
    "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast",
    "torch.cuda.amp.autocast",
    "torch.cuda.amp.autocast_mode.autocast",
}
_CUDA_DEFAULT_FP16 = {"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"}
FP16 = {"torch.float16", "torch.half"}
BF16 = {"torch.bfloat16"}


def is_autocast(file: PythonFile, call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and file.qualname(call) in AUTOCAST


def dtype_name(file: PythonFile, node: ast.AST) -> str:
    q = file.qualname(node)
    if q in FP16:
        return "fp16"
    if q in BF16:
        return "bf16"
    return "unknown"


def autocast_dtype(file: PythonFile, call: ast.Call) -> str | None:
    """'fp16', 'bf16', 'unknown', or None when the autocast is plainly off (`enabled=False`)."""
    enabled = keyword(call, "enabled")
    if enabled is not None and isinstance(enabled.value, ast.Constant) and not enabled.value.value:
        return None
    if any(k.arg is None for k in call.keywords) or any(
        isinstance(a, ast.Starred) for a in call.args
    ):
        return "unknown"
    q = file.qualname(call)
    dtype = keyword(call, "dtype")
    if dtype is not None:
        return dtype_name(file, dtype.value)
    if len(call.args) >= 2:
        # autocast(device_type, dtype, ...) and torch.cuda.amp.autocast(enabled, dtype, ...).
        return dtype_name(file, call.args[1])
    if q in _CUDA_DEFAULT_FP16:
        if call.args and isinstance(call.args[0], ast.Constant) and not call.args[0].value:
            return None
        return "fp16"
    device = keyword(call, "device_type")
    device_node = device.value if device is not None else (call.args[0] if call.args else None)
    if isinstance(device_node, ast.Constant) and isinstance(device_node.value, str):
        if device_node.value.startswith("cuda"):
            return "fp16"
        return "bf16" if device_node.value == "cpu" else "unknown"
    return "unknown"


_COMMENTS: MemoKey[dict[int, str]] = MemoKey("comments by line")


def _comments(file: PythonFile) -> dict[int, str]:
    return file.memo.get(_COMMENTS, lambda: _read_comments(file.text))


def _read_comments(text: str) -> dict[int, str]:
    comments: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return comments


def comment_near(file: PythonFile, node: ast.AST) -> str:
    """Comments on the node's lines and on the line just before it (joined)."""
    comments = _comments(file)
    first: int = getattr(node, "lineno", 1)
    last = getattr(node, "end_lineno", None) or first
    return " ".join(comments[n] for n in range(first - 1, last + 1) if n in comments)


def states_reason(file: PythonFile, node: ast.AST, reason: re.Pattern) -> bool:
    return bool(reason.search(comment_near(file, node)))


_NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.autograd.grad_mode.no_grad"}


def _no_grad_call(file: PythonFile, expr: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and file.qualname(n.func) in _NO_GRAD for n in ast.walk(expr)
    )


def under_no_grad(file: PythonFile, node: ast.AST) -> bool:
    """`node` runs with autograd off: inside `with torch.no_grad():` / `torch.inference_mode()`
    (also `with torch.no_grad(), torch.autocast(...)`), or in a function decorated with them."""
    for ancestor in file.ancestors(node):
        if isinstance(ancestor, (ast.With, ast.AsyncWith)):
            if any(_no_grad_call(file, item.context_expr) for item in ancestor.items):
                return True
        elif isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return any(
                file.qualname(d.func if isinstance(d, ast.Call) else d) in _NO_GRAD
                for d in ancestor.decorator_list
            )
    return False


def function_calls_backward(file: PythonFile, node: ast.AST) -> bool:
    """The function around `node` (or the module, at top level) calls `.backward()`, and `node`
    itself does not run with autograd off (an eval pass inside a training function)."""
    if under_no_grad(file, node):
        return False
    scope = file.enclosing_function(node) or file.tree
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
        for n in ast.walk(scope)
    )
