"""Which local `nn.Module` classes an expression is an instance of, read from the code that
built it (`Net(...)`, `nn.ModuleList([Block(...) ...])`, `nn.Sequential(*layers)`, a class
alias chosen by a flag, `self.blocks` assigned in `__init__`): what `torch.compile(model)`
traces into. Classes imported from another module are handed back by name, for the project."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import FUNCTIONS, Function
from gpulint.frontends.python.names import terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

COMPILE = {"torch.compile"}
CONTAINERS = {"ModuleList", "Sequential", "ModuleDict"}
WRAPPERS = {"DistributedDataParallel", "DataParallel", "DDP"}


def imported_name(file: PythonFile, name: ast.Name) -> bool:
    bound = file.model.bindings_of(name.id, before=name)
    return len(bound) == 1 and bound[0].kind == "import"


def local_class(file: PythonFile, name: ast.AST) -> ast.ClassDef | None:
    if not isinstance(name, ast.Name):
        return None
    scope = file.model.defining_scope(name.id, name)
    if scope is None:
        return None
    bound = file.model.table(scope)[name.id]
    if len(bound) == 1 and isinstance(bound[0].node, ast.ClassDef):
        return bound[0].node
    return None


def module_bases(file: PythonFile, cls: ast.ClassDef, depth: int = 0) -> Iterator[ast.ClassDef]:
    """`cls` and its base classes defined in this file."""
    yield cls
    if depth > 5:
        return
    for base in cls.bases:
        local = local_class(file, base)
        if local is not None and local is not cls:
            yield from module_bases(file, local, depth + 1)


def class_method(file: PythonFile, cls: ast.ClassDef | None, name: str) -> Function | None:
    """`cls.name` as this file defines it, inherited from a local base or its own."""
    if cls is None:
        return None
    for c in module_bases(file, cls):
        for stmt in c.body:
            if isinstance(stmt, FUNCTIONS) and stmt.name == name:
                return stmt
    return None


def is_module_class(file: PythonFile, cls: ast.ClassDef) -> bool:
    """An `nn.Module` subclass, as far as the file shows (a base named `...Module`)."""
    for c in module_bases(file, cls):
        for base in c.bases:
            name = terminal_name(base)
            if name is not None and name.endswith("Module") and name != "ModuleList":
                return True
            q = file.qualname(base) or ""
            if q.startswith("torch.nn.") and q.count(".") == 2 and q[9:10].isupper():
                return True  # `class Conv(nn.Conv2d)`: a layer of torch.nn, subclassed
    return False


MODULE_METHODS = {"to", "cuda", "train", "eval", "half", "float", "bfloat16", "requires_grad_"}


def instance_classes(
    file: PythonFile,
    expr: ast.AST | None,
    at: ast.AST,
    depth: int = 0,
    outside: list[ast.Name] | None = None,
) -> list[ast.ClassDef]:
    """The local `nn.Module` classes `expr` is an instance of (or a container of), by the code
    that built it: `Net(...)`, `model = Net(...).to(device)`, `DDP(model)`, `self.blocks =
    nn.ModuleList([Block(...) for _ in range(n)])`, `nn.Sequential(*layers)`, a loop over one.
    Classes imported from another module are not followed: their names go to `outside`."""
    if expr is None or depth > 12:
        return []
    deeper = depth + 1
    if isinstance(expr, ast.Call):
        func = expr.func
        cls = local_class(file, func)
        if cls is not None:
            return [cls] if is_module_class(file, cls) else []
        if outside is not None and isinstance(func, ast.Name) and imported_name(file, func):
            outside.append(func)
            return []
        if isinstance(func, ast.Name):
            # `norm_layer = ActNorm if use_actnorm else nn.BatchNorm2d; norm_layer(n)`: the
            # classes a local alias may hold.
            aliased = aliased_classes(file, func, deeper, outside)
            if aliased is not None:
                return aliased
        name = terminal_name(func)
        if name in CONTAINERS:
            return [c for a in expr.args for c in instance_classes(file, a, at, deeper, outside)]
        if name in WRAPPERS and expr.args:
            return instance_classes(file, expr.args[0], at, deeper, outside)
        if isinstance(func, ast.Attribute) and name in MODULE_METHODS:
            return instance_classes(file, func.value, expr, deeper, outside)
        factory = file.model.resolve_callee(expr)
        if factory is not None:
            # `model = make_net(...)`: what the factory of this file returns
            return [
                c
                for node in file.model.members(factory)
                if isinstance(node, ast.Return) and node.value is not None
                for c in instance_classes(file, node.value, node, deeper, outside)
            ]
        return []
    if isinstance(expr, (ast.List, ast.Tuple)):
        return [c for e in expr.elts for c in instance_classes(file, e, at, deeper, outside)]
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return instance_classes(file, expr.elt, expr.elt, deeper, outside)
    if isinstance(expr, ast.Dict):
        return [
            c
            for v in expr.values
            if v is not None
            for c in instance_classes(file, v, at, deeper, outside)
        ]
    if isinstance(expr, (ast.Starred, ast.Subscript)):
        return instance_classes(file, expr.value, at, deeper, outside)
    if isinstance(expr, ast.Name):
        out: list[ast.ClassDef] = []
        for b in file.model.reaching(expr.id, before=expr):
            if b.kind == "for":
                iterable = getattr(b.node, "iter", None)
                if isinstance(iterable, ast.Call) and terminal_name(iterable.func) == "enumerate":
                    iterable = iterable.args[0] if iterable.args else None
                out += instance_classes(file, iterable, b.node, deeper, outside)
            elif b.kind in ("assign", "annassign", "augassign") and not is_compile_call(
                file, b.value
            ):
                out += instance_classes(file, b.value, b.node, deeper, outside)
        return out
    if isinstance(expr, ast.Attribute):
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            values = self_stores(file, expr.attr, file.model.enclosing_class(at))
            return [c for v, n in values for c in instance_classes(file, v, n, deeper, outside)]
        if isinstance(expr.value, ast.Attribute):
            return member_classes(file, expr.value, expr.attr, at, deeper, outside)
    return []


def aliased_classes(
    file: PythonFile, name: ast.Name, depth: int, outside: list[ast.Name] | None
) -> list[ast.ClassDef] | None:
    """The module classes a local name called as a constructor is bound to (`layer = Block`,
    `layer = A if flag else B`), or None when no binding is a class reference."""
    if depth > 12:
        return None
    refs: list[ast.AST] = []
    for b in file.model.reaching(name.id, before=name):
        if b.kind not in ("assign", "annassign") or b.value is None:
            continue
        value = b.value
        refs += [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
    out: list[ast.ClassDef] = []
    seen = False
    for ref in refs:
        if isinstance(ref, ast.Name):
            cls = local_class(file, ref)
            if cls is not None:
                seen = True
                if is_module_class(file, cls):
                    out.append(cls)
            elif outside is not None and imported_name(file, ref):
                seen = True
                outside.append(ref)
    return out if seen else None


def self_stores(
    file: PythonFile, attr: str, cls: ast.ClassDef | None
) -> list[tuple[ast.expr, ast.AST]]:
    """What `self.<attr> = value` assigns in `cls` or its local bases: (value, statement)."""
    if cls is None:
        return []
    family = set(module_bases(file, cls))
    out: list[tuple[ast.expr, ast.AST]] = []
    for store in file.model.attribute_stores(attr):
        target = store.target.value
        if (
            store.value is not None
            and isinstance(target, ast.Name)
            and target.id == "self"
            and file.model.enclosing_class(store.node) in family
            and not is_compile_call(file, store.value)
        ):
            out.append((store.value, store.node))
    return out


def member_classes(
    file: PythonFile,
    base: ast.Attribute,
    attr: str,
    at: ast.AST,
    depth: int,
    outside: list[ast.Name] | None = None,
) -> list[ast.ClassDef]:
    """`self.transformer.h`: the entry `h` of `self.transformer = nn.ModuleDict(dict(h=...))`
    (or `{"h": ...}`), or `self.h` of the local module `self.transformer` is built from."""
    if not (isinstance(base.value, ast.Name) and base.value.id == "self"):
        return []
    out: list[ast.ClassDef] = []
    for value, node in self_stores(file, base.attr, file.model.enclosing_class(at)):
        if isinstance(value, ast.Call) and terminal_name(value.func) == "ModuleDict":
            table = value.args[0] if value.args else None
            if isinstance(table, ast.Call) and terminal_name(table.func) == "dict":
                for k in table.keywords:
                    if k.arg == attr:
                        out += instance_classes(file, k.value, node, depth + 1, outside)
            elif isinstance(table, ast.Dict):
                for key, item in zip(table.keys, table.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == attr:
                        out += instance_classes(file, item, node, depth + 1, outside)
            continue
        for cls in instance_classes(file, value, node, depth + 1, outside):
            for inner, where in self_stores(file, attr, cls):
                out += instance_classes(file, inner, where, depth + 1, outside)
    return out


def is_compile_call(file: PythonFile, value: ast.AST | None) -> bool:
    return isinstance(value, ast.Call) and file.qualname(value) in COMPILE
