"""Is this expression a tensor? Answered conservatively: True only when the code says so.

Unknown is not a tensor. A rule that fires on `float(x)` must know `x` is a tensor; a Python
number (`float(args.lr)`, `int(len(ds))`, a value built from `.item()`) stays silent.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from gpulint.frontends.python.names import terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

# Methods that return a tensor when called on one.
TENSOR_METHODS = {
    "sum", "mean", "max", "min", "norm", "std", "var", "argmax", "argmin", "any", "all", "abs",
    "detach", "clone", "float", "half", "bfloat16", "double", "to", "cuda", "prod", "count_nonzero",
    "eq", "ne", "gt", "lt", "ge", "le", "sqrt", "exp", "log", "softmax", "logsumexp", "squeeze",
    "unsqueeze", "view", "reshape", "flatten", "mul", "add", "div", "sub", "matmul",
}  # fmt: skip
# torch.* names that return Python values, not tensors.
_TORCH_NON_TENSOR = {
    "cuda",
    "distributed",
    "backends",
    "utils",
    "version",
    "numel",
    "jit",
    "compile",
    "device",
    "dtype",
    "nn",
    "optim",
    "autograd",
    "amp",
    "hub",
}
_PRODUCER = re.compile(r"model|criterion|loss|^net$|encoder|decoder|head|forward|classifier", re.I)
_NUMPY = ("numpy", "np", "math", "statistics")


def _torch_call(file: PythonFile, call: ast.Call) -> bool:
    q = file.qualname(call)
    if not q or not q.startswith("torch."):
        return False
    parts = q.split(".")
    if parts[1] in _TORCH_NON_TENSOR and not q.startswith("torch.nn.functional."):
        return False
    return not parts[-1].startswith(("is_", "get_", "set_"))


def _numpy_rooted(file: PythonFile, node: ast.AST) -> bool:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        q = file.bindings.get(node.id, "")
        return q.split(".")[0] in _NUMPY
    return False


def produces_tensor(file: PythonFile, value: ast.AST) -> bool:
    """An assigned value that is a tensor: a model/criterion call, a torch call, a tensor method."""
    if isinstance(value, ast.Call):
        if _numpy_rooted(file, value):
            return False
        name = terminal_name(value.func)
        if isinstance(value.func, ast.Attribute) and name in TENSOR_METHODS:
            return True
        if _torch_call(file, value):
            return True
        return bool(name and _PRODUCER.search(name) and name not in {"item"})
    if isinstance(value, ast.BinOp):
        return produces_tensor(file, value.left) or produces_tensor(file, value.right)
    if isinstance(value, ast.Attribute) and value.attr in {"loss", "logits"}:
        return True
    return False


def looks_like_tensor(file: PythonFile, expr: ast.AST, scope: ast.AST | None) -> bool:
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in {"item", "tolist", "numpy"}:
            return False  # already a Python value (the call itself is reported on its own)
        return produces_tensor(file, expr)
    if isinstance(expr, ast.Attribute) and expr.attr in {"loss", "logits"}:
        return True
    if isinstance(expr, ast.Subscript):
        return looks_like_tensor(file, expr.value, scope)
    if isinstance(expr, ast.BinOp):
        return looks_like_tensor(file, expr.left, scope) or looks_like_tensor(
            file, expr.right, scope
        )
    if isinstance(expr, ast.Name):
        values = assigned_values(file, scope, expr.id)
        return bool(values) and all(v is not None and produces_tensor(file, v) for v in values)
    return False


def assigned_values(file: PythonFile, scope: ast.AST | None, name: str) -> list[ast.expr | None]:
    """Values bound to `name` in `scope` (a function, or the module) or the scope it resolves
    to; None for a value that cannot be told (tuple unpacking, loop targets, parameters)."""
    return file.model.values_of(name, scope)
