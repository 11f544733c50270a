"""Calls that make the host wait for the device: what timing and graph-capture rules look for.

`.item()`, `.cpu()`, `.numpy()`, `.tolist()` on a tensor, `float()`/`int()`/`bool()` or `print()`
of a tensor, `torch.cuda.synchronize()`, and `.synchronize()` on a CUDA event or stream.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from gpulint.frontends.python.loops import Loop, runs_before_in_iteration, step_work_between
from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.tensors import TENSOR_METHODS, looks_like_tensor

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


_DATA_DEPENDENT = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}


def data_dependent(file: PythonFile, node: ast.Call) -> bool:
    """`torch.nonzero(mask)`, `(labels == k).nonzero()`: the host waits to learn the size."""
    q = file.qualname(node)
    if q is not None:
        return q.startswith("torch.") and q.rsplit(".", 1)[-1] in _DATA_DEPENDENT
    func = node.func
    if not isinstance(func, ast.Attribute) or func.attr not in _DATA_DEPENDENT:
        return False
    scope = file.enclosing_function(node)
    receiver = func.value
    if isinstance(receiver, ast.Compare):
        return any(device_tensor(file, s, scope) for s in [receiver.left, *receiver.comparators])
    return device_tensor(file, receiver, scope)


# Callees whose result is a tensor by their name alone: models and loss functions.
_TENSOR_CALLEE = re.compile(
    r"^(model|net|module|criterion|loss_fn|loss_func|lossfn|forward)$|_(model|net|criterion)$",
    re.IGNORECASE,
)


def device_tensor(file: PythonFile, expr: ast.AST, scope: ast.AST | None, depth: int = 0) -> bool:
    """A tensor by evidence that reaches its root, stricter than `looks_like_tensor` (an
    implicit sync is only as sure as the tensor): a torch op, a model or loss-function call,
    a tensor method on such a value, `outputs.loss`/`.logits`, or a name every binding of
    which is one of those. Each expression is answered once per file (a chain of rebindings,
    `labels = labels.float()` then `labels = labels.to(device)`, fans out otherwise); one
    reached again while it is being answered (a cycle) counts as no evidence."""
    known = file.memo.get(_DEVICE_TENSORS, dict)
    key = (id(expr), id(scope))
    found = known.get(key)
    if found is None:
        known[key] = False  # while answering: a cycle back here is no evidence
        found = known[key] = _device_tensor(file, expr, scope, depth)
    return found


_DEVICE_TENSORS: MemoKey[dict] = MemoKey("device tensors by evidence")


def _device_tensor(file: PythonFile, expr: ast.AST, scope: ast.AST | None, depth: int) -> bool:
    if depth > 64 or python_side(file, expr):
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in {"item", "tolist", "numpy", "cpu"}:
            return False
        q = file.qualname(expr)
        if q is not None:
            return q.startswith("torch.") and looks_like_tensor(file, expr, scope)
        if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS:
            return device_tensor(file, func.value, scope, depth + 1)
        name = terminal_name(func)
        return bool(name and _TENSOR_CALLEE.search(name))
    if isinstance(expr, ast.Attribute):
        return expr.attr in {"loss", "logits"}
    if isinstance(expr, ast.Subscript):
        return device_tensor(file, expr.value, scope, depth + 1)
    if isinstance(expr, ast.BinOp):
        return device_tensor(file, expr.left, scope, depth + 1) or device_tensor(
            file, expr.right, scope, depth + 1
        )
    if isinstance(expr, ast.Compare) and not any(
        isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in expr.ops
    ):
        return any(device_tensor(file, s, scope, depth + 1) for s in [expr.left, *expr.comparators])
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.Invert, ast.USub)):
        return device_tensor(file, expr.operand, scope, depth + 1)
    if isinstance(expr, ast.Name):
        # `labels = labels.to(device)` read inside its own right-hand side: the earlier
        # bindings answer for it.
        bound = [
            b
            for b in file.model.reaching(expr.id, before=expr)
            if b.value is None or not _within(expr, b.value)
        ]
        return bool(bound) and all(
            b.value is not None and device_tensor(file, b.value, scope, depth + 1) for b in bound
        )
    return False


def _within(node: ast.AST, outer: ast.AST) -> bool:
    start = (getattr(outer, "lineno", 0), getattr(outer, "col_offset", 0))
    end = (getattr(outer, "end_lineno", 0), getattr(outer, "end_col_offset", 0))
    at = (getattr(node, "lineno", -1), getattr(node, "col_offset", -1))
    return start <= at < end


def tensor_condition(file: PythonFile, test: ast.AST, scope: ast.AST | None) -> bool:
    """A condition that is a tensor: `torch.isnan(loss).any()`, `loss > threshold` with `loss`
    a tensor, `(x >= 0).all()`; not a Python value (`x.item() > 0`, `len(x)`)."""
    if isinstance(test, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return False
        return any(tensor_operand(file, s, scope) for s in [test.left, *test.comparators])
    return tensor_operand(file, test, scope)


def tensor_operand(file: PythonFile, expr: ast.AST, scope: ast.AST | None) -> bool:
    """A tensor by evidence that reaches its root: `torch.isnan(x)`, `logits.abs()`,
    `(pred == y).all()` with `logits`/`pred` tensors; never a bare method name on an unknown."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if torch_predicate(file, expr) or (
            (file.qualname(expr) or "").startswith("torch.")
            and looks_like_tensor(file, expr, scope)
        ):
            return True
        if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS:
            receiver = func.value
            if isinstance(receiver, ast.Compare):
                return tensor_condition(file, receiver, scope)
            return tensor_operand(file, receiver, scope)
        return False
    if isinstance(expr, ast.Subscript):
        return tensor_operand(file, expr.value, scope)
    if isinstance(expr, ast.BinOp):
        return tensor_operand(file, expr.left, scope) or tensor_operand(file, expr.right, scope)
    if isinstance(expr, ast.Compare):
        return tensor_condition(file, expr, scope)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        return device_tensor(file, expr, scope)
    return False


def nan_check(file: PythonFile, expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            q = file.qualname(node) or ""
            name = q.rsplit(".", 1)[-1] if q else terminal_name(node.func)
            if name in {"isnan", "isinf", "isfinite", "isneginf", "isposinf"}:
                return True
    return False


def torch_predicate(file: PythonFile, call: ast.Call) -> bool:
    q = file.qualname(call) or ""
    return q.startswith("torch.") and q.rsplit(".", 1)[-1] in {
        "isnan", "isinf", "isfinite", "any", "all", "equal", "allclose", "isclose", "isneginf",
        "isposinf",
    }  # fmt: skip


def implicit_sync(file: PythonFile, node: ast.AST) -> tuple[str, ast.AST] | None:
    """A sync that no readback call spells: an `if`/`while`/`assert` on a tensor, an f-string
    or `%` formatting of one, boolean-mask indexing or a `nonzero()`-style op (their output size
    is data-dependent). Returns (what, the node to report) or None. Strict on evidence: the
    tensor must be one by a torch op, a model call or a tensor method reaching its root; a NaN
    check (`if not torch.isfinite(loss):`) is a deliberate guard and is not counted."""
    if isinstance(node, (ast.If, ast.While, ast.Assert)):
        test = node.test
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        parts = test.values if isinstance(test, ast.BoolOp) else [test]
        if any(nan_check(file, p) for p in parts):
            return None
        scope = file.enclosing_function(node)
        if any(tensor_condition(file, p, scope) for p in parts):
            kw = {ast.If: "`if`", ast.While: "`while`", ast.Assert: "`assert`"}[type(node)]
            return f"{kw} on a tensor", node.test
        return None
    if isinstance(node, ast.JoinedStr):
        scope = file.enclosing_function(node)
        for part in node.values:
            if isinstance(part, ast.FormattedValue) and device_tensor(file, part.value, scope):
                return "An f-string of a tensor", node
        return None
    if isinstance(node, ast.BinOp):
        if not (
            isinstance(node.op, ast.Mod)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
        ):
            return None
        scope = file.enclosing_function(node)
        right = node.right
        values = right.elts if isinstance(right, ast.Tuple) else [right]
        if any(device_tensor(file, v, scope) for v in values):
            return "`%` formatting of a tensor", node
        return None
    if isinstance(node, ast.Subscript):
        if not isinstance(node.ctx, ast.Load):
            return None
        scope = file.enclosing_function(node)
        if device_tensor(file, node.value, scope) and bool_mask(file, node.slice, scope):
            return "Boolean-mask indexing (a data-dependent shape)", node
        return None
    if isinstance(node, ast.Call) and data_dependent(file, node):
        return "`nonzero()`-style op (a data-dependent shape)", node
    return None


_BOOL_METHODS = {"bool", "eq", "ne", "gt", "lt", "ge", "le", "logical_not", "logical_and"}
_BOOL_OPS = {"isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "eq", "ne"}


def bool_mask(file: PythonFile, index: ast.AST, scope: ast.AST | None, depth: int = 0) -> bool:
    """A boolean device tensor used as an index: `labels != -100`, `~mask`, `m.bool()`,
    `torch.isfinite(x)`, or a name every binding of which is one. An integer index tensor
    (`x[idx]`) gathers with a known shape and is not one."""
    if depth > 3:
        return False
    if isinstance(index, ast.Compare):
        return any(device_tensor(file, s, scope) for s in [index.left, *index.comparators])
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, (ast.Invert, ast.Not)):
        return bool_mask(file, index.operand, scope, depth + 1)
    if isinstance(index, ast.Call):
        func = index.func
        q = file.qualname(index)
        if q is not None:
            if not q.startswith("torch."):
                return False
            if _bool_dtype(file, index):
                # `torch.eye(n, dtype=torch.bool, device=d)`: a mask built on the device
                return any(k.arg == "device" for k in index.keywords)
            return q.rsplit(".", 1)[-1] in _BOOL_OPS and any(
                device_tensor(file, a, scope) for a in index.args
            )
        if isinstance(func, ast.Attribute) and func.attr in _BOOL_METHODS:
            return device_tensor(file, func.value, scope)
        if isinstance(func, ast.Attribute) and func.attr in {"to", "cuda"}:
            # `torch.eye(n, dtype=torch.bool).to(device)`: a host mask moved to the device
            inner = func.value
            if isinstance(inner, ast.Call) and _bool_dtype(file, inner):
                return True
            return bool_mask(file, inner, scope, depth + 1)
        return False
    if isinstance(index, ast.Name):
        bound = file.model.bindings_of(index.id, before=index)
        return bool(bound) and all(
            b.value is not None and bool_mask(file, b.value, scope, depth + 1) for b in bound
        )
    return False


def _bool_dtype(file: PythonFile, call: ast.Call) -> bool:
    return any(k.arg == "dtype" and file.qualname(k.value) == "torch.bool" for k in call.keywords)


def already_synced(file: PythonFile, earlier: ast.AST, later: ast.AST, loop: Loop) -> bool:
    """The host has already synced at `earlier` on this path of the iteration of `loop` that
    reaches `later` (`earlier` runs first whenever `later` runs), and no step's worth of device
    work (a forward, a backward, an optimizer step) is queued between them: the queue that
    `later` waits on was drained at `earlier`, so `later` waits for little more than the few
    kernels written between them (`loss.item()`, then `acc.item()`, then logging the lr)."""
    return runs_before_in_iteration(file, earlier, later) and not step_work_between(
        file, loop, earlier, later
    )
