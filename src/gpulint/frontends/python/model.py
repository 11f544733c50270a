"""The semantic model of one Python file: scopes, bindings, qualified names, calls, memo.

One object per parsed file (`PythonFile.model`), built lazily and only as far as asked: a scope's
binding table is made the first time a name in it is looked up. Nothing is stored on AST nodes;
every table is keyed by `id(node)` and lives here, so the model and the tree stay acyclic.

Scopes follow Python: a function, lambda or class body is its own scope; comprehensions share
their function's (close enough for what rules ask). A name read in a nested function and not
bound there resolves through the enclosing functions to the module, skipping class bodies.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpulint.frontends import BackLink, Memo
from gpulint.frontends import MemoKey as MemoKey  # re-exported: rules import it from here

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
Function = ast.FunctionDef | ast.AsyncFunctionDef
Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Binding:
    """One place that binds `name` in a scope.

    `value` is the expression assigned to exactly this name (`x = expr`, `x: T = expr`, a
    parameter's default), or None when it cannot be told apart (tuple unpacking, loop and `with`
    targets, imports, parameters without a default). `kind` says which statement bound it.
    """

    name: str
    kind: str  # "assign" | "augassign" | "annassign" | "for" | "with" | "param" | "def" | "class" | "import" | "other"
    node: ast.AST  # the binding statement (or the ast.arg for a parameter)
    value: ast.expr | None
    position: Position

    @property
    def is_assignment(self) -> bool:
        return self.kind in ("assign", "augassign", "annassign")


@dataclass(frozen=True, slots=True)
class AttributeStore:
    """One assignment to an attribute (`self.start = time.time()`, `timer.t0: float = 0.0`).

    `target` is the `ast.Attribute` stored to, `node` the statement, `value` what it is given
    (for `a.x, a.y = p, q`, the matching element; None when that cannot be told)."""

    target: ast.Attribute
    node: ast.Assign | ast.AnnAssign
    value: ast.expr | None


def unpacked_value(binding: Binding) -> ast.expr | None:
    """What `binding` gives its name: its `value`, or for unpacking of a literal tuple
    (`BLOCK_M, BLOCK_N = 64, 128`) the element matched to the name."""
    if binding.value is not None or not isinstance(binding.node, ast.Assign):
        return binding.value
    for target in binding.node.targets:
        found = _matched(target, binding.node.value, binding.name, binding.position)
        if found is not None:
            return found
    return None


def unpacked_index(binding: Binding) -> int | None:
    """The position of `binding`'s name in the flat tuple it is unpacked from (`a, b = f()`
    binds `b` at 1), for an assignment whose value is not a literal tuple (`unpacked_value`
    answers those); None when not unpacked, or nested or starred."""
    node = binding.node
    if not isinstance(node, ast.Assign):
        return None
    for target in node.targets:
        if isinstance(target, (ast.Tuple, ast.List)) and not any(
            isinstance(e, ast.Starred) for e in target.elts
        ):
            for i, element in enumerate(target.elts):
                if (
                    isinstance(element, ast.Name)
                    and element.id == binding.name
                    and position(element) == binding.position
                ):
                    return i
    return None


def _matched(target: ast.expr, value: ast.expr, name: str, at: Position) -> ast.expr | None:
    if isinstance(target, ast.Name):
        return value if target.id == name and position(target) == at else None
    if not (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))):
        return None
    if len(target.elts) != len(value.elts) or any(
        isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)
    ):
        return None
    for t, v in zip(target.elts, value.elts, strict=True):
        found = _matched(t, v, name, at)
        if found is not None:
            return found
    return None


def position(node: ast.AST) -> Position:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def end_position(node: ast.AST) -> Position:
    return getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0


def scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function (or module) body, not descending into nested functions or classes
    (the nested def itself is yielded: its name binds here)."""
    if isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        stack: list[ast.AST] = list(reversed(scope.body))
    elif isinstance(scope, ast.Lambda):
        stack = [scope.body]
    else:
        stack = [scope]
    # The children are read by hand, as in PythonFile._index (ast.iter_child_nodes is a
    # generator over a generator: three times slower here, where every function body is walked).
    # Load/Store/Del singletons are skipped: they carry nothing a scope's reader looks for.
    pop, push = stack.pop, stack.append
    node_base, context = ast.AST, ast.expr_context
    while stack:
        node = pop()
        yield node
        if isinstance(node, SCOPES):
            continue
        for field in reversed(node._fields):
            value = getattr(node, field, None)
            if type(value) is list:
                for item in reversed(value):
                    if isinstance(item, node_base) and not isinstance(item, context):
                        push(item)
            elif isinstance(value, node_base) and not isinstance(value, context):
                push(value)


def _names_in(target: ast.AST) -> Iterator[ast.Name]:
    """Names a target binds: `a, (b, *c)` binds a, b, c; `x[i] = ...` and `self.a = ...` bind
    nothing (x and self are read)."""
    for t in ast.walk(target):
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
            yield t


class SemanticModel:
    file: BackLink[PythonFile] = BackLink()  # weak: the file caches this model

    def __init__(self, file: PythonFile):
        self.file = file
        self.memo = Memo()
        self._tables: dict[int, dict[str, list[Binding]]] = {}
        self._tables_built = False
        self._members: dict[int, list[ast.AST]] = {}
        self._scope_of: dict[int, ast.AST] = {}
        self._calls: dict[str, list[ast.Call]] | None = None
        self._functions: dict[str, list[Function]] | None = None
        self._attribute_stores: dict[str, list[AttributeStore]] | None = None
        # Per class: `self.<attr>` -> the values assigned to it anywhere in the class (one walk
        # of the class, not one per question: model classes are thousands of nodes).
        self._self_stores: dict[int, dict[str, list[ast.expr]]] = {}

    # -- scopes ------------------------------------------------------------------------------
    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function, lambda, class or module whose body holds `node` (a def's own scope is
        the one around it)."""
        key = id(node)
        found = self._scope_of.get(key)
        if found is None:
            found = self.file.tree
            for ancestor in self.file.ancestors(node):
                if isinstance(ancestor, SCOPES):
                    found = ancestor
                    break
            self._scope_of[key] = found
        return found

    def enclosing_scopes(self, scope: ast.AST) -> Iterator[ast.AST]:
        """`scope`, then the functions around it, then the module: where a free name resolves
        (class bodies around a function are not searched, as in Python)."""
        yield scope
        node = scope
        while not isinstance(node, ast.Module):
            node = self.scope_of(node)
            if not isinstance(node, ast.ClassDef):
                yield node

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        for ancestor in self.file.ancestors(node):
            if isinstance(ancestor, ast.ClassDef):
                return ancestor
        return None

    def members(self, scope: ast.AST) -> list[ast.AST]:
        """`scope_nodes(scope)` as a list, walked once per scope: the bindings table and the
        function summaries both read every function's body."""
        key = id(scope)
        found = self._members.get(key)
        if found is None:
            found = self._members[key] = list(scope_nodes(scope))
        return found

    # -- bindings ----------------------------------------------------------------------------
    def table(self, scope: ast.AST) -> dict[str, list[Binding]]:
        """Every binding in `scope`'s own body by name, in source order."""
        if not self._tables_built:
            self._build_tables()
        key = id(scope)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                _add_params(table, scope)
        return table

    def _build_tables(self) -> None:
        """All scopes' tables in one pass over the binding nodes the file's index already
        holds (no walk of the tree per scope): each goes to the scope around it."""
        self._tables_built = True
        by_type = self.file.nodes_by_type
        tables = self._tables
        tree = self.file.tree
        parent = self.file.parent
        scope_cache = self._scope_of
        for kind in _BINDING_KINDS:
            bind = _BINDERS[kind]
            for node in by_type.get(kind, ()):
                # The scope around the node: its nearest function/lambda/class ancestor.
                found: ast.AST = tree
                up = parent(node)
                while up is not None:
                    if isinstance(up, SCOPES):
                        found = up
                        break
                    up = parent(up)
                scope_cache.setdefault(id(node), found)
                table = tables.get(id(found))
                if table is None:
                    table = tables[id(found)] = {}
                    if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                        _add_params(table, found)
                bind(table, node)
        for table in tables.values():
            for bindings in table.values():
                bindings.sort(key=_by_position)

    def bindings_in(self, scope: ast.AST, name: str) -> list[Binding]:
        return self.table(scope).get(name, [])

    def defining_scope(self, name: str, at: ast.AST) -> ast.AST | None:
        """The scope whose binding of `name` a read at `at` sees, or None (a builtin, a global
        from elsewhere)."""
        for scope in self.enclosing_scopes(self.scope_of(at)):
            if name in self.table(scope):
                return scope
        return None

    def bindings_of(self, name: str, before: ast.AST) -> list[Binding]:
        """The bindings of `name` that may reach the read at `before`: in its own scope, those
        earlier in the text plus those later in a loop around it (the next iteration sees
        them); in an enclosing scope (a closure or a global), all of them."""
        scope = self.defining_scope(name, before)
        if scope is None:
            return []
        bindings = self.table(scope)[name]
        if scope is not self.scope_of(before):
            return bindings
        at = position(before)
        around = list(self._ancestors_in_scope(before))
        loops = [loop for loop in around if isinstance(loop, LOOPS)]
        # `[v.item() for v in xs]`: the element is read before its target in the text.
        generators = {
            id(g)
            for a in around
            if isinstance(a, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
            for g in a.generators
        }
        out = []
        for b in bindings:
            if (
                b.position < at
                or id(b.node) in generators
                or any(_inside(b.node, loop) for loop in loops)
            ):
                out.append(b)
        return out

    def reaching(self, name: str, before: ast.AST) -> list[Binding]:
        """`bindings_of`, less those that a later plain assignment always overwrites before
        the read: in `z = F.normalize(z); sim = z @ z.T`, only `z = F.normalize(z)` reaches
        the `z` of the second line, not the parameter. An assignment kills the earlier ones
        when it is a statement of a block that holds the read in a later statement (it runs
        on every path to the read)."""
        # A read in the right-hand side of its own assignment (`z = f(z)`) sees the earlier one.
        bound = [
            b
            for b in self.bindings_of(name, before)
            if not (b.is_assignment and _inside(before, b.node))
        ]
        at = position(before)
        earlier = sorted((b for b in bound if b.position < at), key=_by_position, reverse=True)
        for b in earlier:
            if b.kind not in ("assign", "annassign") or not isinstance(b.node, ast.stmt):
                continue
            block = self.file.statement_block(b.node)
            if block is None:
                continue
            index = block.index(b.node)
            for ancestor in self.file.ancestors(before):
                if ancestor is b.node:
                    break  # the read is inside the assignment itself (`z = f(z)`)
                if ancestor in block[index + 1 :]:
                    return [x for x in bound if x.position >= b.position]
            # not dominating the read: an earlier binding may still reach it
        return bound

    def values_of(self, name: str, scope: ast.AST | None) -> list[ast.expr | None]:
        """Every value bound to `name` in `scope` (the module when None) or, where it does not
        bind it, the scope it resolves to; None stands for a value that cannot be told."""
        start = scope if scope is not None else self.file.tree
        for s in self.enclosing_scopes(start):
            found = self.table(s).get(name)
            if found:
                return [b.value for b in found]
        return []

    def attribute_stores(self, attr: str) -> list[AttributeStore]:
        """Every assignment (`=` or annotated, with a value) to an attribute named `attr`, on
        any object, anywhere in the file, in source order: the table is built once from the
        file's indexed assignments. Which object it is on is the caller's question
        (`store.target.value`), as is which scope (`scope_of(store.node)`)."""
        if self._attribute_stores is None:
            table: dict[str, list[AttributeStore]] = {}
            for node in self.file.nodes(ast.Assign, ast.AnnAssign):
                if node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for t, value in _attribute_targets(target, node.value):
                        table.setdefault(t.attr, []).append(AttributeStore(t, node, value))
            for stores in table.values():
                stores.sort(key=lambda s: position(s.target))
            self._attribute_stores = table
        return self._attribute_stores.get(attr, [])

    def targets_of(self, value: ast.expr) -> list[ast.expr]:
        """The targets an assignment statement gives exactly `value` (`a = b = value`,
        `self.loader: DataLoader = value`); empty when `value` is not a statement's value."""
        stmt = self.file.parent(value)
        if isinstance(stmt, ast.Assign) and stmt.value is value:
            return list(stmt.targets)
        if isinstance(stmt, ast.AnnAssign) and stmt.value is value:
            return [stmt.target]
        return []

    def _ancestors_in_scope(self, node: ast.AST) -> Iterator[ast.AST]:
        for ancestor in self.file.ancestors(node):
            if isinstance(ancestor, SCOPES):
                return
            yield ancestor

    # -- names and calls -----------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        return self.file.qualname(node)

    def calls_to(self, *qualnames: str) -> list[ast.Call]:
        """Calls whose callee resolves to one of `qualnames`, in source order; the table is
        built once from the file's indexed Call nodes."""
        if self._calls is None:
            calls: dict[str, list[ast.Call]] = {}
            qualname = self.file.qualname
            for call in self.file.nodes(ast.Call):
                q = qualname(call)
                if q is not None:
                    calls.setdefault(q, []).append(call)
            self._calls = calls
        if len(qualnames) == 1:
            return self._calls.get(qualnames[0], [])
        out = [c for q in qualnames for c in self._calls.get(q, ())]
        return sorted(out, key=position)

    def functions(self, name: str) -> list[Function]:
        """Every def named `name` anywhere in the file (methods included)."""
        if self._functions is None:
            table: dict[str, list[Function]] = {}
            for f in self.file.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
                table.setdefault(f.name, []).append(f)
            self._functions = table
        return self._functions.get(name, [])

    def resolve_callee(self, call: ast.Call) -> Function | None:
        """The def a call runs, where this file says so: `f(...)` with `f` a def (or a closure)
        in scope, `self.m(...)`/`cls.m(...)` inside a class that defines `m`."""
        func = call.func
        if isinstance(func, ast.Name):
            scope = self.defining_scope(func.id, call)
            if scope is None:
                return None
            bound = self.table(scope)[func.id]
            defs = [b.node for b in bound if b.kind == "def"]
            if len(defs) == len(bound) and len(defs) == 1 and isinstance(defs[0], FUNCTIONS):
                return defs[0]  # (a "def" binding is a FunctionDef or AsyncFunctionDef)
            return None
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            cls = self.enclosing_class(call)
            if cls is None:
                return None
            for stmt in cls.body:
                if isinstance(stmt, FUNCTIONS) and stmt.name == func.attr:
                    return stmt
            return None
        if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)):
            # `meter = Meter()` ... `meter.add(loss)`: a method of a class of this file
            built = self.constructed_class(func.value)
            cls_node = self._local_class(built) if built is not None else None
            if cls_node is not None:
                for stmt in cls_node.body:
                    if isinstance(stmt, FUNCTIONS) and stmt.name == func.attr:
                        return stmt
        return None

    def constructed_class(self, name: ast.AST) -> ast.Name | None:
        """`Meter` in `meter = Meter(...)`, where that is the one binding of `meter` reaching
        `name` (a class's instance, by the call that built it), or in `self.meter = Meter(...)`,
        the one assignment to `self.meter` in the class around `name`; None otherwise."""
        if (
            isinstance(name, ast.Attribute)
            and isinstance(name.value, ast.Name)
            and name.value.id == "self"
        ):
            return self._attribute_class(name)
        if not isinstance(name, ast.Name):
            return None
        bound = self.reaching(name.id, name)
        if len(bound) != 1 or bound[0].kind != "assign":
            return None
        value = bound[0].value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return value.func
        return None

    def _attribute_class(self, attribute: ast.Attribute) -> ast.Name | None:
        cls = self.enclosing_class(attribute)
        if cls is None:
            return None
        stores = self._self_stores.get(id(cls))
        if stores is None:
            stores = self._self_stores[id(cls)] = {}
            for node in ast.walk(cls):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            stores.setdefault(target.attr, []).append(node.value)  # type: ignore[arg-type]
        built = stores.get(attribute.attr, [])
        if len(built) != 1:
            return None  # reassigned somewhere: which instance is it at the call?
        value = built[0]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return value.func
        return None

    def _local_class(self, name: ast.Name) -> ast.ClassDef | None:
        scope = self.defining_scope(name.id, name)
        if scope is None:
            return None
        bound = self.table(scope)[name.id]
        if len(bound) == 1 and isinstance(bound[0].node, ast.ClassDef):
            return bound[0].node
        return None

    def dict_keys(self, node: ast.expr, _depth: int = 0) -> frozenset[str] | None:
        """The keys the dict `node` may hold, where the file says: a dict display with string
        keys (`{"preserve_rng_state": True}`), `dict(a=1)`, either branch of `x if c else y`,
        a `{**base, "k": v}` whose `base` is known, or a name every binding of which that reaches
        `node` is one of those and that nothing may change: its only other reads are `**name`,
        `name[...]`, `k in name` and `name.get/keys/items/values/copy(...)`. None where any key
        may be unknown (a computed key, a parameter, `kw["k"] = v`, `kw.update(...)`, a dict
        handed to a call that may fill it)."""
        if _depth > 4:
            return None
        if isinstance(node, ast.Dict):
            keys: set[str] = set()
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:  # `**base`
                    inner = self.dict_keys(value, _depth + 1)
                    if inner is None:
                        return None
                    keys |= inner
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keys.add(key.value)
                else:
                    return None
            return frozenset(keys)
        if isinstance(node, ast.IfExp):
            body = self.dict_keys(node.body, _depth + 1)
            orelse = self.dict_keys(node.orelse, _depth + 1) if body is not None else None
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(node, ast.Call):
            func = node.func
            if not (
                isinstance(func, ast.Name)
                and func.id == "dict"
                and self.defining_scope("dict", node) is None
                and len(node.args) <= 1
            ):
                return None
            keys = set()
            for arg in node.args:  # `dict({...})`
                inner = self.dict_keys(arg, _depth + 1)
                if inner is None:
                    return None
                keys |= inner
            for kw in node.keywords:
                if kw.arg is None:
                    inner = self.dict_keys(kw.value, _depth + 1)
                    if inner is None:
                        return None
                    keys |= inner
                else:
                    keys.add(kw.arg)
            return frozenset(keys)
        if not isinstance(node, ast.Name):
            return None
        bound = self.reaching(node.id, node)
        if not bound or any(b.kind not in ("assign", "annassign") for b in bound):
            return None
        if not self._unchanged_dict(node.id, self.defining_scope(node.id, node)):
            return None
        keys = set()
        for b in bound:
            if b.value is None:
                return None
            inner = self.dict_keys(b.value, _depth + 1)
            if inner is None:
                return None
            keys |= inner
        return frozenset(keys)

    def _unchanged_dict(self, name: str, scope: ast.AST | None) -> bool:
        """No read of `name` (bound in `scope`) anywhere in the file may change the dict."""
        if scope is None:
            return False
        parent = self.file.parent
        for use in self.file.nodes(ast.Name):
            if use.id != name or not isinstance(use.ctx, ast.Load):
                continue
            if self.defining_scope(name, use) is not scope:
                continue
            up = parent(use)
            if isinstance(up, ast.keyword) and up.arg is None:
                continue  # `f(**kw)`: the callee gets a copy
            if isinstance(up, ast.Subscript) and up.value is use and isinstance(up.ctx, ast.Load):
                continue
            if isinstance(up, ast.Compare) and use in up.comparators:
                continue  # `"k" in kw`
            if (
                isinstance(up, ast.Attribute)
                and up.attr in _DICT_READS
                and isinstance(parent(up), ast.Call)
            ):
                continue
            if (
                isinstance(up, ast.Dict)
                and use in up.values
                and up.keys[up.values.index(use)] is None
            ):
                continue  # `{**kw, "k": v}`: a copy
            return False
        return True

    def in_loop(self, node: ast.AST) -> ast.AST | None:
        """The nearest loop around `node` in its own scope, or None."""
        for ancestor in self._ancestors_in_scope(node):
            if isinstance(ancestor, LOOPS):
                return ancestor
        return None


# Methods that read a dict without changing it.
_DICT_READS = frozenset({"get", "keys", "items", "values", "copy", "__contains__"})


def _inside(node: ast.AST, outer: ast.AST) -> bool:
    return position(outer) <= position(node) and end_position(node) <= end_position(outer)


_BINDING_KINDS = (
    ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.With,
    ast.AsyncWith, ast.NamedExpr, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
    ast.ImportFrom, ast.ExceptHandler,
)  # fmt: skip


def _attribute_targets(
    target: ast.expr, value: ast.expr | None
) -> Iterator[tuple[ast.Attribute, ast.expr | None]]:
    """The attributes a target stores to, each with its value where a literal tuple says it."""
    if isinstance(target, ast.Attribute):
        yield target, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values: list[ast.expr | None] = [None] * len(target.elts)
        if (
            isinstance(value, (ast.Tuple, ast.List))
            and len(value.elts) == len(target.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        ):
            values = list(value.elts)
        for t, v in zip(target.elts, values, strict=True):
            yield from _attribute_targets(t.value if isinstance(t, ast.Starred) else t, v)


def _by_position(binding: Binding) -> Position:
    return binding.position


def _add(
    table: dict[str, list[Binding]],
    name: str,
    kind: str,
    node: ast.AST,
    value: ast.expr | None,
    at: ast.AST,
) -> None:
    table.setdefault(name, []).append(Binding(name, kind, node, value, position(at)))


def _add_params(
    table: dict[str, list[Binding]], scope: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
) -> None:
    args = scope.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    for arg, default in zip(positional, defaults, strict=False):
        _add(table, arg.arg, "param", arg, default, arg)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
        _add(table, arg.arg, "param", arg, default, arg)
    for star in (args.vararg, args.kwarg):
        if star is not None:
            _add(table, star.arg, "param", star, None, star)


Table = dict[str, list[Binding]]


def _bind_assign(table: Table, node: ast.Assign) -> None:
    for target in node.targets:
        if type(target) is ast.Name:
            _add(table, target.id, "assign", node, node.value, target)
        else:
            for t in _names_in(target):
                _add(table, t.id, "assign", node, None, t)


def _bind_annassign(table: Table, node: ast.AnnAssign) -> None:
    target = node.target
    if type(target) is ast.Name and node.value is not None:
        _add(table, target.id, "annassign", node, node.value, target)


def _bind_augassign(table: Table, node: ast.AugAssign) -> None:
    target = node.target
    if type(target) is ast.Name:
        _add(table, target.id, "augassign", node, node.value, target)


def _bind_loop(table: Table, node: ast.For | ast.AsyncFor | ast.comprehension) -> None:
    for t in _names_in(node.target):
        _add(table, t.id, "for", node, None, t)


def _bind_with(table: Table, node: ast.With | ast.AsyncWith) -> None:
    for item in node.items:
        if item.optional_vars is not None:
            for t in _names_in(item.optional_vars):
                _add(table, t.id, "with", node, None, t)


def _bind_walrus(table: Table, node: ast.NamedExpr) -> None:
    _add(table, node.target.id, "assign", node, node.value, node)


def _bind_def(table: Table, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    _add(table, node.name, "def", node, None, node)


def _bind_class(table: Table, node: ast.ClassDef) -> None:
    _add(table, node.name, "class", node, None, node)


def _bind_import(table: Table, node: ast.Import | ast.ImportFrom) -> None:
    for alias in node.names:
        if alias.name != "*":
            _add(table, alias.asname or alias.name.split(".")[0], "import", node, None, node)


def _bind_except(table: Table, node: ast.ExceptHandler) -> None:
    if node.name:
        _add(table, node.name, "other", node, None, node)


# What each binding statement binds, by its exact node type (_BINDING_KINDS, in that order).
_BINDERS: dict[type[ast.AST], Callable[[Table, Any], None]] = {
    ast.Assign: _bind_assign,
    ast.AnnAssign: _bind_annassign,
    ast.AugAssign: _bind_augassign,
    ast.For: _bind_loop,
    ast.AsyncFor: _bind_loop,
    ast.comprehension: _bind_loop,
    ast.With: _bind_with,
    ast.AsyncWith: _bind_with,
    ast.NamedExpr: _bind_walrus,
    ast.FunctionDef: _bind_def,
    ast.AsyncFunctionDef: _bind_def,
    ast.ClassDef: _bind_class,
    ast.Import: _bind_import,
    ast.ImportFrom: _bind_import,
    ast.ExceptHandler: _bind_except,
}
