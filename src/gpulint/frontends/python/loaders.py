"""Which values are data loaders, by where they come from, not by what they are called.

A value is a loader when it is built by `DataLoader(...)` (torch's, or another library's
`*DataLoader`), returned by a function that returns one (this file's, or a module of the checked
tree, through the function summaries: `return build_loader(cfg)` two calls away counts), bound
to a name from one of these (`validation_data = get_loader("val")`), unpacked from an
`accelerator.prepare(...)` of one, stored on the object (`self.val_loader = DataLoader(...)` in
`__init__`, read in another method of the class), or a parameter whose callers in this file pass
one (`evaluate(model, val_loader)`, `Trainer(model, train_loader)` for `__init__`). What none of
these says is unknown, not "not a loader": the loop model still reads a name as a last resort.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.python.model import FUNCTIONS, Binding, unpacked_index, unpacked_value
from gpulint.frontends.python.names import terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

MAX_DEPTH = 6  # assignments, parameters and attributes followed, at most
# Calls that hand back the loader they are given (`accelerator.prepare(loader)`): by position.
_PASS_THROUGH = {"prepare", "prepare_data_loader", "skip_first_batches"}


def is_loader(file: PythonFile, expr: ast.AST) -> bool:
    """`expr` evaluates to a data loader, as far as this file (and the project's summaries)
    can tell."""
    memo = file.memo.get(_MEMO, dict)
    key = id(expr)
    if key not in memo:
        memo[key] = False  # a cycle (a parameter passed back to itself) ends here as unknown
        memo[key] = _is_loader(file, expr, 0, set())
    return memo[key]


_MEMO: MemoKey[dict[int, bool]] = MemoKey("loader values")
_CALLS_BY_NAME: MemoKey[dict[str, list[ast.Call]]] = MemoKey("calls by callee name")


def builds_loader(file: PythonFile, call: ast.Call) -> bool:
    """`DataLoader(...)` (torch's, or a `*DataLoader` class another library or this file names
    so: `torch_geometric.loader.DataLoader`, `class FastDataLoader(DataLoader)`)."""
    q = file.qualname(call)
    return q is not None and q.rsplit(".", 1)[-1].endswith("DataLoader")


def annotates_loader(file: PythonFile, annotation: ast.AST) -> bool:
    """`DataLoader`, `torch.utils.data.DataLoader`, `Optional[DataLoader]`, `"DataLoader"`."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.rsplit(".", 1)[-1].endswith("DataLoader")
    if isinstance(annotation, ast.Subscript) and terminal_name(annotation.value) == "Optional":
        return annotates_loader(file, annotation.slice)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        # `DataLoader | None`
        return any(
            annotates_loader(file, side)
            for side in (annotation.left, annotation.right)
            if not (isinstance(side, ast.Constant) and side.value is None)
        )
    if isinstance(annotation, (ast.Name, ast.Attribute)):
        q = file.qualname(annotation) or terminal_name(annotation) or ""
        return q.rsplit(".", 1)[-1].endswith("DataLoader")
    return False


def _is_loader(file: PythonFile, expr: ast.AST, depth: int, seen: set[int]) -> bool:
    if depth > MAX_DEPTH or id(expr) in seen:
        return False
    seen.add(id(expr))
    if isinstance(expr, ast.Call):
        return _call_gives_loader(file, expr, depth, seen)
    if isinstance(expr, ast.Name):
        return any(_binding_gives_loader(file, b, depth, seen) for b in _bindings(file, expr))
    if isinstance(expr, ast.Attribute):
        return _attribute_is_loader(file, expr, depth, seen)
    if isinstance(expr, ast.IfExp):  # `train_loader if training else val_loader`
        return _is_loader(file, expr.body, depth + 1, seen) or _is_loader(
            file, expr.orelse, depth + 1, seen
        )
    return False


def _bindings(file: PythonFile, name: ast.Name) -> list[Binding]:
    return file.model.reaching(name.id, name)


def _call_gives_loader(file: PythonFile, call: ast.Call, depth: int, seen: set[int]) -> bool:
    if builds_loader(file, call):
        return True
    if terminal_name(call.func) in _PASS_THROUGH and len(call.args) == 1:
        return _is_loader(file, call.args[0], depth + 1, seen)
    summary = file.summaries.of_call(call)
    return summary is not None and summary.loader


def _binding_gives_loader(file: PythonFile, b: Binding, depth: int, seen: set[int]) -> bool:
    if b.kind == "param":
        arg = b.node
        if isinstance(arg, ast.arg) and arg.annotation is not None:
            if annotates_loader(file, arg.annotation):
                return True  # `def train(model, train_dl: DataLoader)`
        return _param_gets_loader(file, b, depth, seen)
    value = unpacked_value(b)
    if value is not None:
        return _is_loader(file, value, depth + 1, seen)
    node = b.node
    if isinstance(node, ast.AnnAssign) and annotates_loader(file, node.annotation):
        return True  # `self.loader: DataLoader = ...`, `loader: DataLoader`
    index = unpacked_index(b)
    value = getattr(node, "value", None)
    if index is None or not isinstance(value, ast.Call):
        return False
    # `model, opt, loader = accelerator.prepare(model, opt, loader)`: the same position
    if terminal_name(value.func) in _PASS_THROUGH:
        if len(value.args) > index and not any(isinstance(a, ast.Starred) for a in value.args):
            return _is_loader(file, value.args[index], depth + 1, seen)
        return False
    # `train_dl, valid_dl = create_dls(cfg)`: a function returning a tuple of loaders
    return index in _returned_items(file, value)


def _returned_items(file: PythonFile, call: ast.Call) -> tuple[int, ...]:
    summary = file.summaries.of_call(call)
    return summary.loader_items if summary is not None else ()


def _attribute_is_loader(file: PythonFile, attr: ast.Attribute, depth: int, seen: set[int]) -> bool:
    """`self.val_loader` where the class assigns `self.val_loader` from a loader."""
    if not (isinstance(attr.value, ast.Name) and attr.value.id == "self"):
        return False
    cls = file.model.enclosing_class(attr)
    if cls is None:
        return False
    for store in file.model.attribute_stores(attr.attr):
        target = store.target
        if (
            store.value is not None
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and file.model.enclosing_class(store.node) is cls
            and _is_loader(file, store.value, depth + 1, seen)
        ):
            return True
    return False


def _param_gets_loader(file: PythonFile, b: Binding, depth: int, seen: set[int]) -> bool:
    """A parameter some caller in this file passes a loader to (its default counts too)."""
    arg = b.node
    if not isinstance(arg, ast.arg):
        return False
    function = file.model.scope_of(arg)
    if not isinstance(function, FUNCTIONS):
        return False
    if b.value is not None and _is_loader(file, b.value, depth + 1, seen):
        return True  # `def evaluate(model, loader=DataLoader(...))`
    params = [*function.args.posonlyargs, *function.args.args]
    cls = file.model.enclosing_class(function)
    method = cls is not None and any(s is function for s in cls.body)
    decorators = {terminal_name(d) for d in function.decorator_list}
    bound = method and "staticmethod" not in decorators  # `self`/`cls` is passed implicitly
    index = next((i for i, p in enumerate(params) if p is arg), None)
    for call in _callers(file, function, cls if method else None):
        passed = _argument(call, arg.arg, index, bound and not _is_unbound(call, cls))
        if passed is not None and _is_loader(file, passed, depth + 1, seen):
            return True
    return False


def _is_unbound(call: ast.Call, cls: ast.ClassDef | None) -> bool:
    """`Trainer.fit(self, loader)`: the class's own name, so `self` is passed by hand."""
    func = call.func
    return (
        cls is not None
        and isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == cls.name
    )


def _argument(call: ast.Call, name: str, index: int | None, bound: bool) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if index is None:
        return None
    position = index - 1 if bound else index
    if 0 <= position < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[: position + 1]
    ):
        return call.args[position]
    return None


def _callers(file: PythonFile, function: ast.AST, cls: ast.ClassDef | None) -> list[ast.Call]:
    """Calls of this file that run `function`: `f(...)`, `self.f(...)`, `obj.f(...)` where the
    model resolves them to it, and `Cls(...)` for a class's `__init__`."""
    name = getattr(function, "name", "")
    table = file.memo.get(_CALLS_BY_NAME, lambda: _calls_by_name(file))
    out = []
    if cls is not None and name == "__init__":
        for call in table.get(cls.name, ()):
            if isinstance(call.func, ast.Name) and _class_of(file, call.func) is cls:
                out.append(call)
        return out
    for call in table.get(name, ()):
        if file.model.resolve_callee(call) is function:
            out.append(call)
    return out


def _class_of(file: PythonFile, name: ast.Name) -> ast.ClassDef | None:
    scope = file.model.defining_scope(name.id, name)
    if scope is None:
        return None
    bound = file.model.table(scope)[name.id]
    if len(bound) == 1 and isinstance(bound[0].node, ast.ClassDef):
        return bound[0].node
    return None


def _calls_by_name(file: PythonFile) -> dict[str, list[ast.Call]]:
    table: dict[str, list[ast.Call]] = {}
    for call in file.nodes(ast.Call):
        name = terminal_name(call.func)
        if name is not None:
            table.setdefault(name, []).append(call)
    return table
