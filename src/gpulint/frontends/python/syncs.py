"""Calls that make the host wait for the device: what timing and graph-capture rules look for.

`.item()`, `.cpu()`, `.numpy()`, `.tolist()` on a tensor, `float()`/`int()`/`bool()` or `print()`
of a tensor, `torch.cuda.synchronize()`, and `.synchronize()` on a CUDA event or stream.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gpulint.frontends.python.tensors import looks_like_tensor

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

READBACK_METHODS = {"item", "cpu", "numpy", "tolist"}
_CONVERTERS = {"float", "int", "bool"}
_PYTHON_SIDE_ROOTS = {"numpy", "math", "statistics"}
DEVICE_SYNCS = {"torch.cuda.synchronize", "torch.synchronize", "torch.cuda.current_stream"}


def python_side(file: PythonFile, receiver: ast.AST) -> bool:
    """numpy arrays and scalars have `.item()`/`.tolist()` too; they cost no sync."""
    node = receiver
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        return file.bindings.get(node.id, "").split(".")[0] in _PYTHON_SIDE_ROOTS
    return False


def host_sync(file: PythonFile, node: ast.AST, *, with_events: bool = True) -> str | None:
    """What kind of host sync the call `node` is (for messages), or None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        if func.attr in READBACK_METHODS and not node.args and not python_side(file, func.value):
            return f"`.{func.attr}()`"
        if func.attr == "synchronize":
            qualified = file.qualname(func)
            if qualified in {"torch.cuda.synchronize", "torch.synchronize"} or with_events:
                return "`synchronize()`"
        return None
    if isinstance(func, ast.Name) and func.id not in file.bindings:
        scope = file.enclosing_function(node)
        if (
            func.id in _CONVERTERS
            and len(node.args) == 1
            and looks_like_tensor(file, node.args[0], scope)
        ):
            return f"`{func.id}()` of a tensor"
        if func.id == "print":
            for arg in node.args:
                parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
                for part in parts:
                    value = part.value if isinstance(part, ast.FormattedValue) else part
                    if looks_like_tensor(file, value, scope):
                        return "`print()` of a tensor"
    elif isinstance(func, ast.Name) and file.qualname(func) in {"torch.cuda.synchronize"}:
        return "`torch.cuda.synchronize()`"
    return None
