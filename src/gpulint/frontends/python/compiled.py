"""What `torch.compile` compiles, and where Dynamo will break the graph in it.

Entry points: a def decorated `@torch.compile` / `@torch.compile(...)`; `torch.compile(f)` of a
def of this file (a name, `self.method`); `torch.compile(model)`, `torch.compile(Net(...))` and
`model.compile()` where the model is an instance of an `nn.Module` class of this file (by the
call that built it, `model = Net(...)` or `self.model = Net(...)`), whose `forward` is compiled.

From there the functions Dynamo traces into, as far as this file says: the defs a call resolves
to (`f(x)`, a closure, `self.m(x)`), and the `forward` of submodules (`self.attn(x)` with
`self.attn = Attention(...)`; `for block in self.blocks: x = block(x)` and `self.blocks[i](x)`
with `self.blocks = nn.ModuleList([Block(...) for _ in ...])`; `nn.Sequential(...)` of them).
Not followed: a def decorated `@torch.compiler.disable` (Dynamo skips it), calls in code Dynamo
never runs (`if not torch.compiler.is_compiling():`, exception handlers, `raise`).
`graph_breaks` holds the breaks; `graph_break_sites` also the code of the same kinds that
Dynamo handles (never traced, in a disabled def the compiled code calls, captured by the file's
`torch._dynamo.config`), each flagged with the reason.

Graph breaks are named by PyTorch's graph-break registry (`torch/_dynamo/graph_break_registry
.json`): each kind below was produced by torch 2.14 (`torch._dynamo.explain`, CPU) and, for
the rule's fixtures, by torch 2.11 on the GPU (`benchmarks/graph_break_logs.py`). Not breaks, though they sync the host at run
time: `.cpu()`, `.numpy()` and NumPy calls on tensors (Dynamo traces NumPy through
`torch._numpy`), f-strings of tensors, and `assert` on a tensor.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import FUNCTIONS, Function, MemoKey, position
from gpulint.frontends.python.module_classes import (
    COMPILE,
    class_method,
    imported_name,
    instance_classes,
    is_module_class,
)
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.syncs import (
    bool_mask,
    data_dependent,
    python_side,
    tensor_condition,
)
from gpulint.frontends.python.tensors import TENSOR_METHODS, looks_like_tensor

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

# Decorators under which Dynamo does not trace a function (calling it is a break of its own,
# the one the author asked for).
_DISABLED = {
    "torch.compiler.disable", "torch._dynamo.disable", "torch.compiler.allow_in_graph",
    "torch._dynamo.allow_in_graph", "torch.jit.ignore", "torch.jit.unused",
}  # fmt: skip
# True while Dynamo traces (or TorchScript compiles): code on the other side never runs there.
COMPILING_TESTS = {
    "torch.compiler.is_compiling", "torch._dynamo.is_compiling", "torch.compiler.is_dynamo_compiling",
    "torch._utils.is_compiling", "torch.jit.is_scripting", "torch.jit.is_tracing",
    "torch._dynamo.external_utils.is_compiling",
}  # fmt: skip
DYNAMIC_SHAPE_METHODS = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}
_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
# Tensor methods whose result used as a condition reads the tensor's values.
_VALUE_METHODS = TENSOR_METHODS - {
    "detach", "clone", "float", "half", "bfloat16", "double", "to", "cuda", "view", "reshape",
    "flatten", "squeeze", "unsqueeze",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Entry:
    """One place that compiles: the `torch.compile(...)` call, the decorator, or `m.compile()`."""

    site: ast.AST
    function: Function  # the def compiled (a model's `forward`)
    fullgraph: bool  # fullgraph=True: a break is an error at compile time, not a slow path

    @property
    def line(self) -> int:
        return getattr(self.site, "lineno", 0)


@dataclass(frozen=True, slots=True)
class Reached:
    """A function Dynamo traces when `entry` runs, and the calls that lead there from it."""

    function: Function
    entry: Entry
    via: tuple[str, ...] = ()  # function names from the compiled one down to this one


@dataclass(frozen=True, slots=True)
class GraphBreak:
    """Code in a compiled function that Dynamo cannot put in the graph. Where it would be a
    break but Dynamo handles it (`graph_break_sites`), a flag below says how; `graph_breaks`
    holds only those with none set."""

    node: ast.AST
    what: str  # as in messages: "`.item()`"
    gb_id: str  # the registry's id: "GB0124"
    gb_type: str  # the registry's name for it
    fix: str
    reached: Reached
    # Code Dynamo never traces: under `if not torch.compiler.is_compiling():`, in an exception
    # handler, a `raise` or an `assert` (`runs_compiled`).
    untraced: bool = False
    # In a def decorated `@torch.compiler.disable` that compiled code calls: Dynamo skips it.
    disabled: bool = False
    # `.item()`/`.tolist()` where the file sets `capture_scalar_outputs = True`, a dynamic-shape
    # op where it sets `capture_dynamic_output_shape_ops = True`: captured in the graph.
    captured: bool = False

    @property
    def breaks(self) -> bool:
        return not (self.untraced or self.disabled or self.captured)


# (gb id, registry name, what to do instead), by kind.
_ITEM = ("GB0124", "Unsupported Tensor.item() call with capture_scalar_outputs=False")
_TOLIST = ("GB0033", "Data dependent operator")
_PRINT = ("GB0059", "Failed to trace builtin operator")
_LOGGER = ("GB0291", "logging.Logger method not supported for non-export cases")
_LOGGING = ("GB4841", "Unsupported python_type() call")
_WARN = ("GB0007", "Attempted to call function marked as skipped")
_USER = ("GB0025", "Call to `torch._dynamo.graph_break()`")
_BACKWARD = ("GB0123", "Unsupported Tensor.backward() call")
_BRANCH = ("GB0170", "Data-dependent branching")
_DYNAMIC = ("GB0036", "Dynamic shape operator")

_FIX_SCALAR = "keep the value a tensor (or read it outside the compiled code)"
_FIX_HOST = "move it out of the compiled code, or under `if not torch.compiler.is_compiling():`"
_FIX_BRANCH = "make it branchless (`torch.where`, `torch.clamp`) or use `torch.cond`"
_FIX_SHAPE = "keep the shape fixed (`torch.where`, multiply by the mask)"
_FIX_BACKWARD = "compile the forward and the loss, and run the backward pass outside"
GB_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{}.html"


class CompiledCode:
    """The file's compile entry points and every function they reach, computed once."""

    def __init__(self, file: PythonFile, entries: list[Entry] | None = None):
        self.entries: list[Entry] = _entries(file) if entries is None else entries
        self.reached: dict[int, Reached] = {}
        # Defs decorated `@torch.compiler.disable` that reached code calls: not traced (and
        # not followed further).
        self.disabled: dict[int, Reached] = {}
        # Module classes imported from another module that the reached code calls as
        # submodules (`self.norm = ActNorm(n)`, `from .util import ActNorm`): where its
        # tracing goes on, read by the project.
        self.outside: list[ast.Name] = []
        # Entries that may break first: a function reached from both kinds is judged as the
        # one whose break is a slow path, not a compile error.
        ordered = sorted(self.entries, key=lambda e: e.fullgraph)
        stack = [Reached(e.function, e) for e in ordered]
        while stack:
            current = stack.pop(0)
            if id(current.function) in self.reached:
                continue
            self.reached[id(current.function)] = current
            for callee in _callees(file, current.function, self.outside):
                if id(callee) in self.reached:
                    continue
                reached = Reached(callee, current.entry, (*current.via, _label(file, callee)))
                if not _disabled(file, callee):
                    stack.append(reached)
                else:
                    self.disabled.setdefault(id(callee), reached)

    def of(self, function: ast.AST) -> Reached | None:
        return self.reached.get(id(function))


_COMPILED: MemoKey[CompiledCode] = MemoKey("compiled code")


def compiled_code(file: PythonFile) -> CompiledCode:
    return file.memo.get(_COMPILED, lambda: CompiledCode(file))


def graph_breaks(file: PythonFile) -> list[GraphBreak]:
    """Every graph break in the functions a compile of this file reaches, in source order; one
    per node (a function reached from two entries is reported for the first)."""
    return [b for b in graph_break_sites(file) if b.breaks]


def graph_break_sites(file: PythonFile) -> list[GraphBreak]:
    """`graph_breaks`, and the code of the same kinds that Dynamo handles without a break
    (never traced, in a disabled def, captured by the file's config), flagged so."""
    return file.memo.get(_BREAKS, lambda: _graph_breaks(file, compiled_code(file), every=True))


_BREAKS: MemoKey[list[GraphBreak]] = MemoKey("graph break sites")


def breaks_if_compiled(file: PythonFile, name: str) -> list[GraphBreak] | None:
    """The graph breaks `torch.compile` would meet in this module's top-level `name`: a
    function, or an `nn.Module` class (its `forward`), as another module compiles it. None when
    the module has no such function or module class."""
    found = _if_compiled(file, name)
    return None if found is None else found[0]


def submodules_elsewhere(file: PythonFile, name: str) -> list[ast.Name]:
    """The imported module classes that compiling this module's `name` traces into (their
    `forward`s are in other modules): one name each, in source order."""
    found = _if_compiled(file, name)
    if found is None:
        return []
    seen: dict[str, ast.Name] = {}
    for n in found[1]:
        seen.setdefault(n.id, n)
    return list(seen.values())


def _if_compiled(file: PythonFile, name: str) -> tuple[list[GraphBreak], list[ast.Name]] | None:
    known = file.memo.get(_IF_COMPILED, dict)
    if name not in known:
        root: Function | None = None
        for stmt in file.tree.body:
            if isinstance(stmt, FUNCTIONS) and stmt.name == name:
                root = stmt
            elif (
                isinstance(stmt, ast.ClassDef) and stmt.name == name and is_module_class(file, stmt)
            ):
                root = class_method(file, stmt, "forward")
        if root is None or _disabled(file, root):
            known[name] = None
        else:
            code = CompiledCode(file, [Entry(root, root, False)])
            known[name] = (_graph_breaks(file, code), code.outside)
    return known[name]


_IF_COMPILED: MemoKey[dict[str, tuple[list[GraphBreak], list[ast.Name]] | None]] = MemoKey(
    "graph breaks if compiled"
)


@dataclass(frozen=True, slots=True)
class OutsideTarget:
    """A compile of this file whose target is defined in another module: `torch.compile(model)`
    with `model = GPT(config)` and `from .model import GPT`. `name` is the imported name."""

    site: ast.Call
    name: ast.Name
    fullgraph: bool


def outside_targets(file: PythonFile) -> list[OutsideTarget]:
    """The compiles whose function or module class comes from another module (the project
    index says what is in it)."""
    return file.memo.get(_OUTSIDE, lambda: _outside_targets(file))


_OUTSIDE: MemoKey[list[OutsideTarget]] = MemoKey("compile targets outside the file")


def _outside_targets(file: PythonFile) -> list[OutsideTarget]:
    out: list[OutsideTarget] = []
    for site, target in _compile_sites(file):
        names: list[ast.Name] = []
        if isinstance(target, ast.Name) and imported_name(file, target):
            names.append(target)  # `torch.compile(fused_step)` of an imported function
        else:
            instance_classes(file, target, site, outside=names)
        seen: set[str] = set()
        for name in names:
            if name.id not in seen:
                seen.add(name.id)
                out.append(OutsideTarget(site, name, _fullgraph(site)))
    return out


def _graph_breaks(file: PythonFile, code: CompiledCode, every: bool = False) -> list[GraphBreak]:
    """The breaks in what `code` reaches; `every`: also the sites Dynamo handles, flagged."""
    scalars = not _config_set(file, "capture_scalar_outputs")
    shapes = not _config_set(file, "capture_dynamic_output_shape_ops")
    out: list[GraphBreak] = []
    reached_ones = [(r, False) for r in code.reached.values()]
    if every:
        reached_ones += [(r, True) for k, r in code.disabled.items() if k not in code.reached]
    for reached, disabled in reached_ones:
        f = reached.function
        for node in file.model.members(f):
            kind = _break_kind(file, node, f, scalars, shapes)
            captured = False
            if kind is None and every and not (scalars and shapes):
                kind = _break_kind(file, node, f, True, True)
                captured = kind is not None
            if kind is None:
                continue
            untraced = not runs_compiled(file, node, f)
            if not every and untraced:
                continue
            what, (gb_id, gb_type), fix = kind
            out.append(
                GraphBreak(node, what, gb_id, gb_type, fix, reached, untraced, disabled, captured)
            )
    out.sort(key=lambda b: (getattr(b.node, "lineno", 0), getattr(b.node, "col_offset", 0)))
    return out


def _break_kind(
    file: PythonFile, node: ast.AST, f: Function, scalars: bool, shapes: bool
) -> tuple[str, tuple[str, str], str] | None:
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        if _value_condition(file, node.test, f):
            kw = {ast.If: "`if`", ast.While: "`while`", ast.IfExp: "`... if ... else`"}[type(node)]
            return f"{kw} on a tensor's value", _BRANCH, _FIX_BRANCH
        return None
    if isinstance(node, ast.Subscript):
        if (
            shapes
            and isinstance(node.ctx, ast.Load)
            and (_tensor(file, node.value, f) or _param(file, node.value, f))
            and _mask(file, node.slice, f)
        ):
            return "boolean-mask indexing", _DYNAMIC, _FIX_SHAPE
        return None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    q = file.qualname(node)
    if q == "torch._dynamo.graph_break":
        return "`torch._dynamo.graph_break()`", _USER, "remove it"
    if q is not None and q.startswith("logging."):
        if q.rsplit(".", 1)[-1] in _LOG_METHODS and q.count(".") == 1:
            return f"`{q}()`", _LOGGING, _FIX_HOST
        return None
    if q in ("torch.autograd.backward", "torch.autograd.grad"):
        return f"`{q}()`", _BACKWARD, _FIX_BACKWARD
    if q == "warnings.warn":
        return "`warnings.warn()`", _WARN, _FIX_HOST
    if shapes and (
        data_dependent(file, node)
        or (
            isinstance(func, ast.Attribute)
            and func.attr in DYNAMIC_SHAPE_METHODS
            and not python_side(file, func.value)
            and (_tensor(file, func.value, f) or _param(file, func.value, f))
        )
    ):
        return f"`{terminal_name(func)}()` (a data-dependent shape)", _DYNAMIC, _FIX_SHAPE
    if isinstance(func, ast.Attribute):
        if func.attr == "item" and not node.args and scalars and not python_side(file, func.value):
            return "`.item()`", _ITEM, _FIX_SCALAR
        if func.attr == "tolist" and not node.args and scalars:
            if not python_side(file, func.value):
                return "`.tolist()`", _TOLIST, _FIX_SCALAR
        if func.attr == "backward" and q is None:
            return "`.backward()`", _BACKWARD, _FIX_BACKWARD
        if func.attr in _LOG_METHODS and _logger(file, func.value):
            return f"`{terminal_name(func.value)}.{func.attr}()`", _LOGGER, _FIX_HOST
        return None
    if isinstance(func, ast.Name) and func.id not in file.bindings:
        if func.id == "print" and file.model.defining_scope("print", node) is None:
            return "`print()`", _PRINT, _FIX_HOST
        if (
            func.id in ("float", "int", "bool")
            and scalars
            and len(node.args) == 1
            and file.model.defining_scope(func.id, node) is None
            and _tensor(file, node.args[0], f)
        ):
            return f"`{func.id}()` of a tensor", _ITEM, _FIX_SCALAR
    return None


def runs_compiled(file: PythonFile, node: ast.AST, function: ast.AST) -> bool:
    """False where Dynamo never traces `node` inside `function`: under a test that the code is
    not being compiled (`if not torch.compiler.is_compiling():`, the `else` of `if
    is_compiling():`, after `if is_compiling(): return ...`), in an exception handler, a
    `raise` or an `assert` (Dynamo turns a tensor `assert` into a run-time check)."""
    child = node
    for parent in file.ancestors(node):
        if isinstance(parent, (ast.ExceptHandler, ast.Raise, ast.Assert)):
            return False
        if isinstance(parent, ast.If) and child is not parent.test:
            side = _compiling_test(file, parent.test)
            if side is not None and (child in parent.body) != side:
                return False
        if isinstance(child, ast.stmt):
            block = file.statement_block(child)
            if block is not None and any(
                isinstance(s, ast.If)
                and _compiling_test(file, s.test) is True
                and s.body
                and isinstance(s.body[-1], (ast.Return, ast.Raise))
                for s in block[: block.index(child)]
            ):
                return False
        if parent is function:
            return True
        child = parent
    return True


def _compiling_test(file: PythonFile, test: ast.AST) -> bool | None:
    """True for a test that holds while compiling (`is_compiling()`), False for its negation
    (`not is_compiling()`), None for any other test."""
    negated = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        negated = not negated
        test = test.operand
    if isinstance(test, ast.Call) and file.qualname(test) in COMPILING_TESTS:
        return not negated
    return None


def _config_set(file: PythonFile, option: str) -> bool:
    """`torch._dynamo.config.<option> = True` somewhere in the file."""
    for store in file.model.attribute_stores(option):
        value = store.value
        if isinstance(value, ast.Constant) and value.value is True:
            return True
    return False


def _logger(file: PythonFile, receiver: ast.AST) -> bool:
    """`logger` bound to `logging.getLogger(...)` (in the module or the function)."""
    if not isinstance(receiver, ast.Name):
        return False
    bound = file.model.bindings_of(receiver.id, before=receiver)
    return bool(bound) and all(
        isinstance(b.value, ast.Call) and file.qualname(b.value) == "logging.getLogger"
        for b in bound
    )


# -- tensors in compiled code ------------------------------------------------------------------


def _tensor(file: PythonFile, expr: ast.AST, f: Function, depth: int = 0) -> bool:
    """A tensor by evidence: what `syncs` and `tensors` accept, or, in a compiled function, a
    tensor method or torch op on one of its parameters (what a model's `forward` is given)."""
    if depth > 4:
        return False
    if looks_like_tensor(file, expr, f):
        return True
    if isinstance(expr, ast.Call):
        func = expr.func
        q = file.qualname(expr)
        if q is not None:
            return q.startswith("torch.") and any(_tensor(file, a, f, depth + 1) for a in expr.args)
        if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS:
            return _tensor(file, func.value, f, depth + 1) or _param(file, func.value, f)
        return False
    if isinstance(expr, ast.BinOp):
        return _tensor(file, expr.left, f, depth + 1) or _tensor(file, expr.right, f, depth + 1)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.Invert, ast.USub)):
        return _tensor(file, expr.operand, f, depth + 1)
    if isinstance(expr, ast.Name):
        # Every binding a tensor; a parameter counts where another binding shows it is one
        # (`x = torch.nan_to_num(x)` under an `if`): a lone parameter may be a Python number.
        bound = file.model.reaching(expr.id, before=expr)
        values = [b for b in bound if not (b.kind == "param" and file.model.scope_of(b.node) is f)]
        return bool(values) and all(
            b.value is not None and _tensor(file, b.value, f, depth + 1) for b in values
        )
    return False


def _param(file: PythonFile, expr: ast.AST, f: Function) -> bool:
    """A parameter of `f` (not `self`/`cls`) read as it was given."""
    if not isinstance(expr, ast.Name) or expr.id in ("self", "cls"):
        return False
    bound = file.model.reaching(expr.id, before=expr)
    return len(bound) == 1 and bound[0].kind == "param" and file.model.scope_of(bound[0].node) is f


def _value_condition(file: PythonFile, test: ast.AST, f: Function) -> bool:
    """A condition that reads a tensor's values: `x.sum() > 0`, `torch.isnan(x).any()`,
    `(mask == 0).all()`; not its shape, dtype or a Python flag (`x.dim() == 3`, `self.training`,
    `mask is None`)."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.BoolOp):
        return any(_value_condition(file, v, f) for v in test.values)
    if tensor_condition(file, test, f):
        return True
    if isinstance(test, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return False
        return any(_valued(file, s, f) for s in [test.left, *test.comparators])
    return _valued(file, test, f)


def _valued(file: PythonFile, expr: ast.AST, f: Function) -> bool:
    """A tensor whose value (not shape) the expression reads: a value method of a tensor
    (`x.sum()`, `m.any()`), a torch predicate or op on one (`torch.isnan(x).any()`)."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in _VALUE_METHODS:
            inner = func.value
            if isinstance(inner, ast.Compare):
                return any(
                    _tensor(file, s, f) or _param(file, s, f)
                    for s in [inner.left, *inner.comparators]
                )
            return _tensor(file, inner, f) or _param(file, inner, f)
        q = file.qualname(expr)
        if q is not None and q.startswith("torch.") and q.rsplit(".", 1)[-1] in _PREDICATES:
            return any(_tensor(file, a, f) or _param(file, a, f) for a in expr.args)
    return False


_PREDICATES = {"any", "all", "equal", "allclose", "is_nonzero", "isnan", "isinf", "isfinite"}


def _mask(file: PythonFile, index: ast.AST, f: Function, depth: int = 0) -> bool:
    """A boolean tensor used as an index (`x[x > 0]`, `x[~mask]` with `mask = y != 0`)."""
    if depth > 3:
        return False
    if bool_mask(file, index, f):
        return True
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.Invert):
        return _mask(file, index.operand, f, depth + 1)
    if isinstance(index, ast.Name):
        bound = file.model.reaching(index.id, before=index)
        return bool(bound) and all(
            b.value is not None and _mask(file, b.value, f, depth + 1) for b in bound
        )
    if isinstance(index, ast.Compare) and not any(
        isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in index.ops
    ):
        return any(
            _tensor(file, s, f) or _param(file, s, f) for s in [index.left, *index.comparators]
        )
    return False


# -- entry points ------------------------------------------------------------------------------


def _entries(file: PythonFile) -> list[Entry]:
    out: list[Entry] = []
    for f in file.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
        for d in f.decorator_list:
            if file.qualname(d) in COMPILE:
                out.append(Entry(d, f, _fullgraph(d)))
    for call, target in _compile_sites(file):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "compile" and not call.args:
            for cls in instance_classes(file, target, call):
                if (
                    class_method(file, cls, "compile") is None
                ):  # nn.Module.compile, not the class's own
                    forward = class_method(file, cls, "forward")
                    if forward is not None:
                        out.append(Entry(call, forward, _fullgraph(call)))
            continue
        for f in _compiled_defs(file, target, call):
            out.append(Entry(call, f, _fullgraph(call)))
    return out


def compile_calls(file: PythonFile) -> list[ast.AST]:
    """Every place that wraps a callable with `torch.compile`: the calls, and the decorators
    (`@torch.compile`, `@torch.compile(...)`), in source order."""
    out: list[ast.AST] = list(file.model.calls_to(*COMPILE))
    seen = {id(c) for c in out}
    for f in file.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
        for d in f.decorator_list:
            if id(d) not in seen and file.qualname(d) in COMPILE:
                out.append(d)
    return sorted(out, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


def is_module_method(file: PythonFile, f: ast.AST, name: str) -> bool:
    """`f` is the method `name` of an `nn.Module` class of this file."""
    cls = file.model.enclosing_class(f)
    return (
        isinstance(f, FUNCTIONS)
        and f.name == name
        and cls is not None
        and f in cls.body
        and is_module_class(file, cls)
    )


def _compile_sites(file: PythonFile) -> list[tuple[ast.Call, ast.AST]]:
    """`torch.compile(target, ...)` calls and `target.compile()` method calls, with targets."""
    out: list[tuple[ast.Call, ast.AST]] = []
    for call in file.model.calls_to(*COMPILE):
        target = call.args[0] if call.args else None
        if target is None:
            found = keyword(call, "model")
            target = found.value if found is not None else None
        if target is not None:  # (`@torch.compile(mode=...)` is a decorator)
            out.append((call, target))
    for call in file.nodes(ast.Call):
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "compile"
            and not call.args
            and file.qualname(call) is None
        ):
            out.append((call, func.value))
    out.sort(key=lambda pair: (pair[0].lineno, pair[0].col_offset))
    return out


def _fullgraph(site: ast.AST) -> bool:
    if not isinstance(site, ast.Call):
        return False
    found = keyword(site, "fullgraph")
    return found is not None and isinstance(found.value, ast.Constant) and found.value.value is True


def _compiled_defs(file: PythonFile, target: ast.AST, at: ast.AST) -> list[Function]:
    """The defs `torch.compile(target)` compiles: a def, a method, a module's `forward`."""
    if isinstance(target, ast.Name):
        # The def the name holds at the compile (`def f` twice in a script: the later one).
        bound = file.model.reaching(target.id, before=at)
        if not bound and file.model.defining_scope(target.id, at) is not None:
            bound = file.model.bindings_of(target.id, before=at)  # a global read in a function
        if file.model.scope_of(at) is file.model.defining_scope(target.id, at):
            earlier = [b for b in bound if b.position < position(at)]
            bound = earlier[-1:] if earlier else bound  # the last one before the compile
        defs = [b.node for b in bound if b.kind == "def" and isinstance(b.node, FUNCTIONS)]
        if len(defs) == 1 and len(bound) == 1:
            return defs
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id in ("self", "cls")
    ):
        cls = file.model.enclosing_class(at)
        method = class_method(file, cls, target.attr) if cls is not None else None
        if method is not None:
            return [method]
    out: list[Function] = []
    for cls in instance_classes(file, target, at):
        forward = class_method(file, cls, "forward")
        if forward is not None:
            out.append(forward)
    return out


# -- what a traced function calls --------------------------------------------------------------


def _callees(
    file: PythonFile, f: Function, outside: list[ast.Name] | None = None
) -> Iterator[Function]:
    for node in file.model.members(f):
        if not isinstance(node, ast.Call) or not runs_compiled(file, node, f):
            continue
        callee = file.model.resolve_callee(node)
        if callee is not None:
            yield callee
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value  # `self.block.forward(x)`
        if isinstance(func, (ast.Name, ast.Attribute, ast.Subscript)):
            for cls in instance_classes(file, func, node, outside=outside):
                forward = class_method(file, cls, "forward")
                if forward is not None:
                    yield forward


def _disabled(file: PythonFile, f: Function) -> bool:
    for d in f.decorator_list:
        q = file.qualname(d)
        if q in _DISABLED:
            return True
    return False


def _label(file: PythonFile, f: Function) -> str:
    cls = file.model.enclosing_class(f)
    return f"{cls.name}.{f.name}" if cls is not None and f in cls.body else f.name


def label(file: PythonFile, f: Function) -> str:
    """`Block.forward` for a method, `f` for a function: how messages name a compiled def."""
    return _label(file, f)
