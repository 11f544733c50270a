"""Data-parallel wrappers: which expressions hold a model wrapped for distributed training.

- `wraps(file)`: every wrapping call of the file, each with its kind ("ddp" for
  `DistributedDataParallel(...)`, "fsdp" for `FullyShardedDataParallel(...)`/`fully_shard(...)`,
  "deepspeed" for `deepspeed.initialize(...)`, "dp" for `nn.DataParallel(...)`) and the targets
  its value is stored in (`model = DDP(model, device_ids=[rank])` stores in `model`;
  `self.net = DDP(...).cuda()` in `self.net`; `engine, opt, _, _ = deepspeed.initialize(...)` in
  `engine`). A helper that returns the wrapped model (`def wrap(m): return DDP(m)`), of this
  file or of another module of the checked tree (`from utils import wrap_model`), passes the
  kind on to the targets of its calls.
- `wrapped_kinds(file, expr)`: the kinds of wrapper an expression may hold, by the targets it is
  written as (`model`, `self.model`) or, for a parameter, by its name: a function handed the
  wrapped `model` calls it `model` too, nearly always.
- `remote_wraps(file, name)`: for a parameter of a top-level function (`def
  train_one_epoch(args, model, ...)`), the kinds that callers in other modules of the checked
  tree pass to it (`train_one_epoch(model=ddp_model)` in train.py after `ddp_model =
  DDP(model)`), each with the call's place; `wrapped_kinds` counts them.
- `skips_grad_sync(file)`: the file turns DDP's gradient all-reduce off for some backward
  passes itself: `model.no_sync()`, `require_backward_grad_sync = False`, accelerate's
  `accelerator.accumulate(model)`/`accelerator.no_sync(model)`, a `no_sync` handed around as a
  context (`ctx = model.no_sync if not last else nullcontext`), or a helper named for it used
  as a context (`with misc.ddp_sync(ddp, last):`, whose body is in another module).
- `single_process(file)`: every `init_process_group(...)` of the file passes `world_size=1`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.diagnostics import Related
from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import keyword, structure, terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

DDP = "ddp"
FSDP = "fsdp"
DEEPSPEED = "deepspeed"
DATA_PARALLEL = "dp"

_KINDS = {
    "torch.nn.parallel.DistributedDataParallel": DDP,
    "torch.nn.parallel.distributed.DistributedDataParallel": DDP,
    "torch.nn.DistributedDataParallel": DDP,
    "torch.distributed.fsdp.FullyShardedDataParallel": FSDP,
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": FSDP,
    "torch.distributed.fsdp.fully_shard": FSDP,
    "torch.distributed._composable.fsdp.fully_shard": FSDP,
    "fairscale.nn.FullyShardedDataParallel": FSDP,
    "fairscale.nn.data_parallel.FullyShardedDataParallel": FSDP,
    "deepspeed.initialize": DEEPSPEED,
    "torch.nn.DataParallel": DATA_PARALLEL,
    "torch.nn.parallel.DataParallel": DATA_PARALLEL,
    "torch.nn.parallel.data_parallel.DataParallel": DATA_PARALLEL,
}
_INIT = {
    "torch.distributed.init_process_group",
    "torch.distributed.distributed_c10d.init_process_group",
}
# Names that turn the all-reduce off for a backward pass, wherever they are read or stored.
_SYNC_SWITCHES = {"no_sync", "require_backward_grad_sync"}


@dataclass(frozen=True, slots=True)
class Wrap:
    kind: str
    call: ast.Call
    targets: tuple[tuple[object, ...], ...]  # `structure` of each expression storing the result
    names: tuple[str, ...]  # the terminal name of each (`model` for `self.model`)
    # the module-level function of this file that returns the wrapped model, if any
    returned_by: str | None = None


# What a module whose function returns a wrapped model must spell (see `_KINDS`).
_SPELLINGS = (
    b"DistributedDataParallel",
    b"FullyShardedDataParallel",
    b"fully_shard",
    b"deepspeed",
    b"DataParallel",
)


@dataclass(frozen=True, slots=True)
class RemoteWrap:
    kind: str
    call: Related  # the call in another module that passes the wrapped model


_WRAPS: MemoKey[tuple[Wrap, ...]] = MemoKey("data-parallel wraps")
_REMOTE: MemoKey[dict[tuple[int, str], tuple[RemoteWrap, ...]]] = MemoKey(
    "data-parallel wraps passed in from other modules"
)
_SKIPS: MemoKey[bool] = MemoKey("skips grad sync")


def wrap_kind(file: PythonFile, call: ast.Call) -> str | None:
    """The kind of wrapper `call` builds, or None."""
    return _KINDS.get(file.qualname(call) or "")


def wraps(file: PythonFile) -> tuple[Wrap, ...]:
    return file.memo.get(_WRAPS, lambda: _wraps(file))


def _wraps(file: PythonFile) -> tuple[Wrap, ...]:
    out: list[Wrap] = []
    for call in file.nodes(ast.Call):
        kind = wrap_kind(file, call)
        if kind is None:
            continue
        targets = _stored_in(file, call)
        if kind == DEEPSPEED:
            targets = [_first(t) for t in targets]
        if not targets and kind == FSDP and isinstance(file.parent(call), ast.Expr):
            # `fully_shard(model)` as a statement: it shards the module in place
            targets = call.args[:1]
        returned = _returned_by(file, call)
        if returned is not None:
            for site in _calls_of(file, returned):
                targets += _stored_in(file, site)
        exported = (
            getattr(returned, "name", None)
            if returned is not None and isinstance(file.parent(returned), ast.Module)
            else None
        )
        kept = [t for t in targets if isinstance(t, (ast.Name, ast.Attribute))]
        if kept or exported:
            out.append(
                Wrap(
                    kind,
                    call,
                    tuple(structure(t) for t in kept),
                    tuple(n for t in kept if (n := terminal_name(t)) is not None),
                    exported,
                )
            )
    out += _remote_returned(file)
    return tuple(out)


def _remote_returned(file: PythonFile) -> list[Wrap]:
    """Calls of a function of another module of the tree that returns a wrapped model
    (`model = wrap_model(model, args)` with `from utils import wrap_model`), as wraps of
    this file. Only that module's own wraps count: one module away."""
    project = file.project
    if project is None:
        return []
    out = []
    for call in file.nodes(ast.Call):
        if not isinstance(call.func, (ast.Name, ast.Attribute)) or wrap_kind(file, call):
            continue
        targets = [t for t in _stored_in(file, call) if isinstance(t, (ast.Name, ast.Attribute))]
        if not targets:
            continue
        found = project.callee_module(file, call, _SPELLINGS)
        if found is None:
            continue
        module, function = found
        for kind in sorted({w.kind for w in wraps(module) if w.returned_by == function}):
            out.append(
                Wrap(
                    kind,
                    call,
                    tuple(structure(t) for t in targets),
                    tuple(n for t in targets if (n := terminal_name(t)) is not None),
                )
            )
    return out


def _first(target: ast.expr) -> ast.expr:
    if isinstance(target, (ast.Tuple, ast.List)) and target.elts:
        return target.elts[0]
    return target


def _stored_in(file: PythonFile, call: ast.Call) -> list[ast.expr]:
    """The targets assigned the value of `call`, through a method chain on it
    (`DDP(model).cuda()`)."""
    node: ast.expr = call
    while True:
        parent = file.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            grand = file.parent(parent)
            if isinstance(grand, ast.Call) and grand.func is parent:
                node = grand
                continue
        break
    return file.model.targets_of(node)


def _returned_by(file: PythonFile, call: ast.Call) -> ast.AST | None:
    """The function of this file that returns `call`'s value (`return DDP(model)`, or a name
    bound to it that is returned)."""
    function = file.enclosing_function(call)
    if function is None:
        return None
    parent = file.parent(call)
    if isinstance(parent, ast.Return):
        return function
    names = {terminal_name(t) for t in _stored_in(file, call) if isinstance(t, ast.Name)}
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Return)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            return function
    return None


def _calls_of(file: PythonFile, function: ast.AST) -> list[ast.Call]:
    name = getattr(function, "name", None)
    out = []
    for call in file.nodes(ast.Call):
        if terminal_name(call.func) == name and file.model.resolve_callee(call) is function:
            out.append(call)
    return out


def wrapped_kinds(file: PythonFile, expr: ast.AST, remote: bool = True) -> set[str]:
    """The kinds of wrapper `expr` (a model as called: `model`, `self.model`, `model.module`)
    may hold: those stored in an expression written the same way, or, where `expr` is a name
    (a parameter, say), stored in any target of that terminal name, or passed to that
    parameter by a caller in another module (`remote`: `remote_wraps`). `model.module` is the
    unwrapped module, not the wrapper."""
    if isinstance(expr, ast.Attribute) and expr.attr == "module":
        return set()
    key = structure(expr)
    name = terminal_name(expr)
    by_name = isinstance(expr, ast.Name) and not _bound_otherwise(file, expr)
    out: set[str] = set()
    for wrap in wraps(file):
        if (
            by_name
            and name in wrap.names
            or (isinstance(expr, ast.Attribute) and key in wrap.targets)
        ):
            out.add(wrap.kind)
    if remote and by_name and isinstance(expr, ast.Name):
        out |= {w.kind for w in remote_wraps(file, expr)}
    return out


def remote_wraps(file: PythonFile, name: ast.Name) -> tuple[RemoteWrap, ...]:
    """See the module docstring. Only the callers' own facts count (a wrap in the calling
    module, `wrapped_kinds(..., remote=False)`), not their callers': one module away. None
    when the file is linted without its project."""
    function = _parameter_of(file, name)
    project = file.project
    if function is None or project is None:
        return ()
    cache = file.memo.get(_REMOTE, dict)
    key = (id(function), name.id)
    if key not in cache:
        found: list[RemoteWrap] = []
        for host, session in project.modules_calling(function.name):
            for call in host.nodes(ast.Call):
                if not session.refers_to(host, call.func, project.name, function.name):
                    continue
                given = _argument(function, call, name.id)
                if not isinstance(given, (ast.Name, ast.Attribute)):
                    continue
                line, col, end_line, end_col = host.span(call)
                for kind in sorted(wrapped_kinds(host, given, remote=False)):
                    message = f"`{host.segment(given)}` is passed to `{function.name}()` here"
                    found.append(
                        RemoteWrap(
                            kind, Related(host.display_path, line, col, message, end_line, end_col)
                        )
                    )
        cache[key] = tuple(found)
    return cache[key]


def _parameter_of(
    file: PythonFile, name: ast.Name
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The module-level function whose parameter `name` reads, where no assignment in it
    rebinds the name."""
    scope = file.model.scope_of(name)
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if not isinstance(file.parent(scope), ast.Module):
        return None
    args = scope.args
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if name.id not in params:
        return None
    bound = file.model.reaching(name.id, name)
    if any(b.kind != "param" for b in bound):
        return None
    return scope


def _argument(
    function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, param: str
) -> ast.expr | None:
    """What `call` passes to `function`'s parameter `param`: by keyword or by position (none
    after a `*starred` argument)."""
    for k in call.keywords:
        if k.arg == param:
            return k.value
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if param not in positional:
        return None
    index = positional.index(param)
    if index < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[: index + 1]
    ):
        return call.args[index]
    return None


def _bound_otherwise(file: PythonFile, name: ast.Name) -> bool:
    """Every binding of `name` reaching the read is an assignment in its own function from
    something that is not a wrap (`model = LinearProbe().cuda()`): a model of its own, not
    one handed down under the same name."""
    scope = file.model.scope_of(name)
    if isinstance(scope, ast.Module) or name.id not in file.model.table(scope):
        return False
    bound = file.model.reaching(name.id, name)
    if not bound or any(not b.is_assignment or b.value is None for b in bound):
        return False
    wrapped = {id(w.call) for w in wraps(file)}
    for b in bound:
        for n in ast.walk(b.value):  # type: ignore[arg-type]
            if isinstance(n, ast.Call) and id(n) in wrapped:
                return False
            if isinstance(n, ast.Name) and n.id == name.id:
                return False  # `model = torch.compile(model)`: the same model, passed on
    return True


def skips_grad_sync(file: PythonFile) -> bool:
    """The file turns the gradient all-reduce off for some backward passes (module docstring)."""
    return file.memo.get(_SKIPS, lambda: _skips(file))


def _skips(file: PythonFile) -> bool:
    for node in file.nodes(ast.Attribute):
        if node.attr in _SYNC_SWITCHES:
            return True
        if node.attr in ("accumulate", "no_sync") and (
            terminal_name(node.value) or ""
        ).lower().endswith("accelerator"):
            return True
    for with_node in file.nodes(ast.With, ast.AsyncWith):
        for item in with_node.items:
            # `with misc.ddp_sync(ddp, last):`, `with maybe_no_sync(model):`: a helper of
            # another module that decides whether this backward synchronises; also through a
            # name (`ctx = sync_context(model, last)` ... `with ctx:`)
            exprs: list[ast.AST] = [item.context_expr]
            if isinstance(item.context_expr, ast.Name):
                exprs += [
                    b.value
                    for b in file.model.bindings_of(item.context_expr.id, item.context_expr)
                    if b.value is not None
                ]
            for expr in exprs:
                for call in ast.walk(expr):
                    called = terminal_name(call.func) if isinstance(call, ast.Call) else None
                    if called and "sync" in called.lower():
                        return True
    for call in file.nodes(ast.Call):
        # `setattr(model, "require_backward_grad_sync", last)`
        if (
            isinstance(call.func, ast.Name)
            and call.func.id == "setattr"
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Constant)
            and str(call.args[1].value) in _SYNC_SWITCHES
        ):
            return True
    return False


def single_process(file: PythonFile) -> bool:
    """Every `init_process_group(...)` in the file passes `world_size=1`, written as a literal
    (or a name bound only to one): one process, nothing to all-reduce with. An option's
    default (`--world-size`, default 1) is not enough: launchers set the real one."""
    calls = file.model.calls_to(*_INIT)
    if not calls:
        return False
    for call in calls:
        given = keyword(call, "world_size")
        if given is None or not _literal_one(file, given.value):
            return False
    return True


def _literal_one(file: PythonFile, expr: ast.AST) -> bool:
    if isinstance(expr, ast.Constant):
        return expr.value == 1 and type(expr.value) is int
    if isinstance(expr, ast.Name):
        bound = file.model.bindings_of(expr.id, before=expr)
        return bool(bound) and all(
            isinstance(b.value, ast.Constant) and b.value.value == 1 for b in bound
        )
    return False
