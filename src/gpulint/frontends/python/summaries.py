"""Function summaries: what calling a function does, as far as GPU rules care.

For every function and method of a file, computed once: where it syncs the host (the first
unguarded readback, with its line), whether it runs a backward pass or an optimizer step, whether
it launches GPU work, moves tensors to a device, or times a callable. Facts flow from callees to
callers through the calls the model can resolve (`f()`, a closure, `self.m()`), repeated to a
fixed point, so a helper two calls away counts and recursion terminates. Calls into other modules
of the checked tree are answered by the project index (`gpulint.project`), when the engine has one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpulint.diagnostics import Related
from gpulint.frontends import BackLink
from gpulint.frontends.python.loaders import annotates_loader, builds_loader
from gpulint.frontends.python.loops import is_step_marker
from gpulint.frontends.python.model import FUNCTIONS, Function, MemoKey
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.syncs import data_dependent, host_sync, implicit_sync, nan_check
from gpulint.frontends.python.tensors import TENSOR_METHODS
from gpulint.frontends.python.transfers import HOST_DATA_FACTORIES, host_built_move

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile


@dataclass(frozen=True, slots=True)
class SyncSite:
    """Where a function (or one of its callees) makes the host wait: `.item()` at utils.py:88."""

    what: str  # as in messages: "`.item()`"
    path: str
    line: int
    col: int
    via: str = ""  # the callee chain below the summarised function, if the sync is not its own
    # The calls on the way down, outermost first (`helper()` calls `inner()` at utils.py:40),
    # then, as the last, the site itself with its span: a finding's related locations.
    hops: tuple[Related, ...] = ()
    end_line: int | None = None
    end_col: int | None = None

    def chain(self, last: str) -> tuple[Related, ...]:
        """The related locations of a finding at a call that reaches this site: each call on the
        way down, then the site (`last`: "`.item()` syncs here")."""
        site = Related(self.path, self.line, self.col, last, self.end_line, self.end_col)
        return (*self.hops, site)

    def to_list(self) -> list:
        return [
            self.what,
            self.path,
            self.line,
            self.col,
            self.via,
            [h.to_dict() for h in self.hops],
            self.end_line,
            self.end_col,
        ]

    @classmethod
    def from_list(cls, data: list) -> SyncSite:
        what, path, line, col, via, hops, end_line, end_col = data
        return cls(
            str(what),
            str(path),
            int(line),
            int(col),
            str(via),
            tuple(Related.from_dict(h) for h in hops),
            end_line,
            end_col,
        )


@dataclass(frozen=True, slots=True)
class Summary:
    sync: SyncSite | None = None
    steps: bool = False  # runs backward or an optimizer step
    launches: bool = False  # queues GPU work (a model call, a torch op, a kernel)
    moves: bool = False  # moves tensors to a device
    times: bool = False  # reads a clock before and after calling a callable it was given, no sync
    # builds a tensor on the host with a torch factory and moves it to the device, every call
    upload: SyncSite | None = None
    # returns a data loader: `DataLoader(...)`, a name bound to one, or what a callee that
    # returns one gives back (`return build_loader(cfg)`), through the same fixed point
    loader: bool = False
    # the positions of a returned tuple that are loaders (`return train_dl, valid_dl`)
    loader_items: tuple[int, ...] = ()

    def merge(
        self,
        callee: Summary,
        callee_name: str,
        hop: Related | None = None,
        returned: bool = False,
    ) -> Summary:
        """This summary with what calling `callee` adds; `hop` is the call's own place, the
        first related location of a finding that reaches the callee's sync through it;
        `returned`: the function returns what the call gives back."""
        sync = self.sync
        hops = (hop,) if hop is not None else ()
        if sync is None and callee.sync is not None:
            via = f"{callee_name}()" + (f" -> {callee.sync.via}" if callee.sync.via else "")
            sync = replace(callee.sync, via=via, hops=hops + callee.sync.hops)
        upload = self.upload
        if upload is None and callee.upload is not None:
            via = f"{callee_name}()" + (f" -> {callee.upload.via}" if callee.upload.via else "")
            upload = replace(callee.upload, via=via, hops=hops + callee.upload.hops)
        return Summary(
            sync,
            self.steps or callee.steps,
            self.launches or callee.launches,
            self.moves or callee.moves,
            self.times,
            upload,
            self.loader or (returned and callee.loader),
            self.loader_items or (callee.loader_items if returned else ()),
        )

    def to_list(self) -> list:
        return [
            self.sync.to_list() if self.sync else None,
            self.steps,
            self.launches,
            self.moves,
            self.times,
            self.upload.to_list() if self.upload else None,
            self.loader,
            list(self.loader_items),
        ]

    @classmethod
    def from_list(cls, data: list) -> Summary:
        sync, steps, launches, moves, times, upload, loader, items = data
        return cls(
            SyncSite.from_list(sync) if sync else None,
            bool(steps),
            bool(launches),
            bool(moves),
            bool(times),
            SyncSite.from_list(upload) if upload else None,
            bool(loader),
            tuple(int(i) for i in items),
        )


EMPTY = Summary()
# Names of calls that wait for the device: a timer helper with one of them measures honestly.
_WAITS = re.compile(r"sync|item$|cpu$|numpy$|tolist$|block_until_ready|elapsed_time", re.I)
# `synchronize()` in a helper is left to the timing rules: it is how code times itself.
_NOT_READBACKS = {None, "`synchronize()`", "`torch.cuda.synchronize()`"}
_CLOCK_NAMES = {"time", "perf_counter", "monotonic", "default_timer", "time_ns", "perf_counter_ns"}
# An external resolver: (file, call) -> the callee's summary from another module, or None.
External = Callable[["PythonFile", ast.Call], "Summary | None"]


class Summaries:
    """The summaries of one file's functions, to a fixed point over the calls it resolves.

    Lazy: asking about a function summarises it and the functions it can reach (its callees,
    theirs...), then solves that set to a fixed point; the rest of the file is never looked at.
    """

    file: BackLink[PythonFile] = BackLink()  # weak: the file's memo holds this

    def __init__(self, file: PythonFile, external: External | None = None):
        self.file = file
        self.external = external
        self._own: dict[int, Summary] = {}
        self._calls: dict[int, list[_Call]] = {}
        self._final: dict[int, Summary] = {}
        self._external: dict[int, Summary | None] = {}

    def of(self, function: Function) -> Summary:
        key = id(function)
        found = self._final.get(key)
        if found is None:
            self._solve(self._reachable(function))
            found = self._final.get(key, EMPTY)
        return found

    def _reachable(self, start: Function) -> list[Function]:
        """`start` and every function of this file it may call, not yet solved."""
        out: list[Function] = []
        stack = [start]
        seen = {id(start)}
        while stack:
            f = stack.pop()
            if id(f) in self._final:
                continue
            out.append(f)
            if id(f) not in self._own:
                self._own[id(f)], self._calls[id(f)] = self._direct(f)
            for site in self._calls[id(f)]:
                callee = site.callee
                if callee is not None and id(callee) not in seen:
                    seen.add(id(callee))
                    stack.append(callee)
        return out

    def exported(self) -> dict[str, Summary]:
        """Summaries other modules can call: top-level functions ("f") and the methods of
        top-level classes ("Class.m")."""
        out: dict[str, Summary] = {}
        for stmt in self.file.tree.body:
            if isinstance(stmt, FUNCTIONS):
                out[stmt.name] = self.of(stmt)
            elif isinstance(stmt, ast.ClassDef):
                for member in stmt.body:
                    if isinstance(member, FUNCTIONS):
                        out[f"{stmt.name}.{member.name}"] = self.of(member)
        return out

    def of_call(self, call: ast.Call) -> Summary | None:
        """What calling `call` does, where the callee is known (this file or the project)."""
        if not _resolvable(call):
            return None
        callee = self.file.model.resolve_callee(call)
        if callee is not None:
            return self.of(callee)
        return self._external_summary(call)

    def _direct(self, f: Function) -> tuple[Summary, list[_Call]]:
        file = self.file
        sync: SyncSite | None = None
        steps = launches = moves = times = False
        upload: SyncSite | None = None
        weak: SyncSite | None = None  # a sync read through `self` only, kept while no better
        calls: list[_Call] = []
        params = {a.arg for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]}
        clocks = 0  # clock reads so far
        timed = False  # a parameter called between two clock reads
        waits = False  # anything that waits for the device
        called_at = 0
        returned = _returned_calls(file, f)  # ids of calls whose value `f` returns
        loader, loader_items = _returns_loaders(file, f)
        for node in file.model.members(f):
            if type(node) in _IMPLICIT_KINDS:
                if sync is None or sync is weak:
                    sync = self._implicit(f, node) or sync
                continue
            if type(node) is not ast.Call:
                continue
            func = node.func
            name = terminal_name(func)
            if is_step_marker(node):
                launches = True
                # One step per call: a step inside the function's own loop is a training loop,
                # whose per-step costs GPU101 reports where they are.
                steps = steps or not _in_loop(file, node, f)
            elif name in ("to", "cuda") and isinstance(func, ast.Attribute):
                moves = True
                if upload is None and f.name != "forward":  # GPU104 reports `forward` itself
                    upload = self._upload(f, node)
            elif name in _CLOCK_NAMES:
                clocks += 1
                timed = timed or (called_at > 0 and clocks > called_at)
            elif isinstance(func, ast.Name) and func.id in params and clocks:
                called_at = clocks  # `fn(*args)` after a clock read: timed if one follows
            if name and _WAITS.search(name):
                waits = True
            if (sync is None or sync is weak) and data_dependent(file, node):
                sync = self._implicit(f, node) or sync
            if sync is None or sync is weak:
                what = host_sync(file, node, with_events=False)
                read = _read_value(node)
                if (
                    what is not None  # (None is one of _NOT_READBACKS)
                    and what not in _NOT_READBACKS
                    and read is not None
                    and device_rooted(file, read, 0)
                    and not _guarded(file, node, f)
                    and not _in_step_loop(file, node, f)
                    # Only a sync on every call counts for the caller: one under an `if` waits on
                    # a parameter, a config value or the data the caller may never set.
                    and _branch(file, node, f) is None
                    and not _moved_later(file, f, node, read)
                ):
                    line, col, end_line, end_col = file.span(node)
                    site = SyncSite(
                        what, file.display_path, line, col, end_line=end_line, end_col=end_col
                    )
                    if not device_rooted(file, read, 0, own=False):
                        # Only through `self` (`self.steps.item()`, maybe a CPU counter): kept
                        # only to be replaced by a sync of a model's or a parameter's tensor.
                        if sync is None:
                            sync = weak = site
                    else:
                        sync = site
            if not _resolvable(node):
                continue
            callee = file.model.resolve_callee(node)
            if callee is not None or self.external is not None:
                # A call in a step loop of `f` is reported there (GPU101): not `f`'s own sync.
                quiet = _guarded(file, node, f) or _in_step_loop(file, node, f)
                calls.append(
                    _Call(
                        node,
                        callee,
                        quiet,
                        _in_loop(file, node, f),
                        _branch(file, node, f),
                        id(node) in returned,
                    )
                )
        if sync is weak:
            # Read through `self` only (`int(self.steps.item())`, a step counter buffer that
            # may never leave the CPU): not evidence enough to blame the caller's loop.
            sync = None
        times = timed and not waits and sync is None
        return Summary(sync, steps, launches, moves, times, upload, loader, loader_items), calls

    def _implicit(self, f: Function, node: ast.AST) -> SyncSite | None:
        """An implicit sync of `f`'s own (`if torch.min(y) < -1.:`, `x[mask]`), where it runs
        on every call and reads data rooted in a device tensor (`syncs.implicit_sync`)."""
        file = self.file
        found = implicit_sync(file, node)
        if found is None:
            return None
        what, at = found
        roots: list[ast.AST] = [at]
        if isinstance(at, ast.JoinedStr):
            roots = [v.value for v in at.values if isinstance(v, ast.FormattedValue)]
        if not (
            any(device_rooted(file, r, 0) for r in roots)
            and not _guarded(file, at, f)
            and not _in_step_loop(file, at, f)
            and _branch(file, at, f) is None
            and not _moved_later(file, f, at, at)
        ):
            return None
        line, col, end_line, end_col = file.span(at)
        return SyncSite(
            _lower_first(what), file.display_path, line, col, end_line=end_line, end_col=end_col
        )

    def _upload(self, f: Function, node: ast.Call) -> SyncSite | None:
        """`torch.eye(n, dtype=torch.bool).to(device)` on every call of `f`."""
        file = self.file
        inner = host_built_move(file, node)
        if inner is None or _guarded(file, node, f) or _in_step_loop(file, node, f):
            return None
        if _branch(file, node, f) is not None:
            return None
        factory = file.qualname(inner) or "torch.tensor"
        if factory.rsplit(".", 1)[-1] in HOST_DATA_FACTORIES:
            # `torch.tensor(loss_value).cuda()`: the data is on the host; `device=` still copies
            return None
        line, col, end_line, end_col = file.span(node)
        what = f"`{factory}(...).{terminal_name(node.func)}()`"
        return SyncSite(what, file.display_path, line, col, end_line=end_line, end_col=end_col)

    def _solve(self, functions: list[Function]) -> None:
        final = self._final
        for f in functions:
            final[id(f)] = self._own[id(f)]
        changed = True
        rounds = 0
        while changed and rounds <= len(functions) + 1:  # monotone: ends by then at the latest
            changed = False
            rounds += 1
            for f in functions:
                key = id(f)
                current = final[key]
                for site in self._calls[key]:
                    if site.returned and site.callee is not f:
                        # what `f` returns is what this call returns, under an `if` or not
                        returned = self._returned_summary(site, final)
                        if returned is not None and (
                            (returned.loader and not current.loader)
                            or (returned.loader_items and not current.loader_items)
                        ):
                            current = replace(
                                current,
                                loader=current.loader or returned.loader,
                                loader_items=current.loader_items or returned.loader_items,
                            )
                            changed = True
                    if site.guarded or site.callee is f:
                        continue
                    if site.callee is not None:
                        other: Summary | None = final.get(id(site.callee), EMPTY)
                        callee_name = site.callee.name
                    else:
                        other = self._external_summary(site.call)
                        callee_name = terminal_name(site.call.func) or "?"
                    if other is None:
                        continue
                    if site.in_loop and other.steps:
                        other = replace(other, steps=False)
                    if other.upload is not None and site.branch is not None:
                        other = replace(other, upload=None)  # one side of an `if`: maybe never
                    if other.sync is not None and site.branch is not None:
                        if not self._both_branches_sync(key, site.branch, final) or (
                            site.branch[1] == 0
                        ):
                            # Both sides sync: name the `else` side's line, the one a flag off
                            # by default (`if self.use_fp16:`) leaves running.
                            other = replace(other, sync=None)
                    merged = current.merge(other, callee_name, self._hop(f, site.call, callee_name))
                    if merged != current:
                        current = merged
                        changed = True
                final[key] = current

    def _returned_summary(self, site: _Call, final: dict[int, Summary]) -> Summary | None:
        if site.callee is not None:
            return final.get(id(site.callee), EMPTY)
        return self._external_summary(site.call)

    def _hop(self, caller: Function, call: ast.Call, callee_name: str) -> Related:
        """The call in `caller` on the way to a callee's sync: a related location."""
        line, col, end_line, end_col = self.file.span(call)
        message = f"`{caller.name}()` calls `{callee_name}()` here"
        return Related(self.file.display_path, line, col, message, end_line, end_col)

    def _both_branches_sync(self, key: int, branch: tuple, final: dict[int, Summary]) -> bool:
        """`if use_fp16: self.opt_fp16() else: self.opt_normal()` where both sides sync: the
        sync runs whichever way the `if` goes. One side only (`if clip: clip_() else: norm()`)
        is a sync the default path may never take."""
        if_node, _ = branch
        if not isinstance(if_node, ast.If):
            return False
        sides = set()
        for other in self._calls[key]:
            if other.branch is None or other.branch[0] is not if_node or other.guarded:
                continue
            if other.callee is not None:
                summary: Summary | None = final.get(id(other.callee), EMPTY)
            else:
                summary = self._external_summary(other.call)
            if summary is not None and summary.sync is not None:
                sides.add(other.branch[1])
        return sides == {0, 1}

    def _external_summary(self, call: ast.Call) -> Summary | None:
        if self.external is None:
            return None
        key = id(call)
        if key not in self._external:
            self._external[key] = self.external(self.file, call)
        return self._external[key]


@dataclass(frozen=True, slots=True)
class _Call:
    call: ast.Call
    callee: Function | None  # in this file; None: ask the project index
    guarded: bool  # runs only some calls of `f`, or in a step loop of its own
    in_loop: bool
    branch: tuple | None = (
        None  # (the `if`, 0 body / 1 else) when under one `if` of `f`; see _branch
    )
    returned: bool = False  # `f` returns the call's value (`return build_loader(cfg)`)


def _returned_values(file: PythonFile, f: Function) -> list[ast.expr]:
    """What `f` may return: each `return` value, and for a returned name the values assigned
    to it in `f` (`loader = DataLoader(...)`; `return loader`)."""
    out: list[ast.expr] = []
    for node in file.model.members(f):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        out.append(value)
        if isinstance(value, ast.Name):
            out.extend(
                b.value
                for b in file.model.reaching(value.id, value)
                if b.is_assignment and b.value is not None
            )
    return out


def _returns_loaders(file: PythonFile, f: Function) -> tuple[bool, tuple[int, ...]]:
    """(whether `f` returns a loader it builds, the positions of a returned tuple that are
    loaders it builds), by the `return` values and the return annotation (`-> DataLoader`,
    `-> Tuple[DataLoader, DataLoader]`)."""
    loader = False
    items: set[int] = set()
    for value in _returned_values(file, f):
        if isinstance(value, ast.Call) and builds_loader(file, value):
            loader = True
        elif isinstance(value, ast.Tuple):
            for i, element in enumerate(value.elts):
                if any(
                    isinstance(v, ast.Call) and builds_loader(file, v)
                    for v in _values_of(file, element)
                ):
                    items.add(i)
    annotation = f.returns
    if annotation is not None:
        if annotates_loader(file, annotation):
            loader = True
        elif isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple):
            # `Tuple[DataLoader, DataLoader]`, `tuple[DataLoader, int]`
            for i, element in enumerate(annotation.slice.elts):
                if annotates_loader(file, element):
                    items.add(i)
    return loader, tuple(sorted(items))


def _values_of(file: PythonFile, expr: ast.expr) -> list[ast.expr]:
    if not isinstance(expr, ast.Name):
        return [expr]
    return [
        b.value
        for b in file.model.reaching(expr.id, expr)
        if b.is_assignment and b.value is not None
    ]


def _returned_calls(file: PythonFile, f: Function) -> set[int]:
    return {id(v) for v in _returned_values(file, f) if isinstance(v, ast.Call)}


# Statements and expressions that may sync with no readback call (`syncs.implicit_sync`).
_IMPLICIT_KINDS = (ast.If, ast.While, ast.Assert, ast.Subscript, ast.JoinedStr, ast.BinOp)


def _lower_first(what: str) -> str:
    """ "An f-string of a tensor" reads "an f-string of a tensor" inside a message."""
    return what[0].lower() + what[1:] if what[:1].isupper() else what


def _read_value(call: ast.Call) -> ast.AST | None:
    """What a readback reads: the receiver of `.item()`, the argument of `float()`/`print()`."""
    if isinstance(call.func, ast.Attribute):
        return call.func.value
    return call.args[0] if call.args else None


_DEVICE_METHODS = {"cuda", "to"}
# Tensors built from Python values: on the host unless `device=` says otherwise.
_FACTORIES = {
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint",
    "randperm", "linspace", "logspace", "eye", "from_numpy", "Tensor", "LongTensor", "FloatTensor",
}  # fmt: skip


def device_rooted(file: PythonFile, expr: ast.AST, depth: int, own: bool = True) -> bool:
    """The value comes from where a device tensor comes from: the function's parameters or
    `self` (the caller's tensors), a `.cuda()`/`.to(...)`, a model or loss call, or torch ops on
    such values. A tensor the helper builds itself (`torch.tensor(...)` with no device) or gets
    from an unknown call is not evidence: `.item()` on it may cost nothing."""
    if depth > 4:  # assignments followed back, at most
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        name = terminal_name(func)
        if (
            isinstance(func, ast.Attribute)
            and name in _DEVICE_METHODS
            and expr.args + expr.keywords
        ):
            return True
        if name == "cuda":
            return True
        q = file.qualname(expr)
        if q is not None:
            if not q.startswith("torch."):
                return False
            if q.rsplit(".", 1)[-1] in _FACTORIES:
                return any(k.arg == "device" for k in expr.keywords)
            return any(device_rooted(file, a, depth, own) for a in expr.args)
        if isinstance(func, ast.Attribute):
            # `x.sum()`, `out.float()`; a call that is not a tensor method (`self.model(x)`,
            # `self.model.parameters()`) reads the model's tensors, not a bare attribute
            return device_rooted(file, func.value, depth, own or name not in TENSOR_METHODS)
        if isinstance(func, ast.Name) and func.id in _REDUCERS:
            # `sum(p.grad.norm() ** 2 for p in model.parameters())`: the elements' root
            return any(device_rooted(file, a, depth, own) for a in expr.args)
        return bool(name and _MODEL_CALL.search(name))
    if isinstance(expr, (ast.GeneratorExp, ast.ListComp)):
        return device_rooted(file, expr.elt, depth, own)
    if isinstance(expr, ast.Attribute) and expr.attr == "grad":
        return device_rooted(file, expr.value, depth)  # a gradient lives with its parameter
    if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
        return device_rooted(file, expr.value, depth, own)
    if isinstance(expr, ast.BinOp):
        return device_rooted(file, expr.left, depth, own) or device_rooted(
            file, expr.right, depth, own
        )
    if isinstance(expr, ast.UnaryOp):
        return device_rooted(file, expr.operand, depth, own)
    if isinstance(expr, ast.Compare):
        return device_rooted(file, expr.left, depth, own)
    if isinstance(expr, ast.Name):
        if expr.id in ("self", "cls"):
            return own  # the object's own tensors: on the device, or a CPU step counter
        for b in file.model.bindings_of(expr.id, before=expr):
            if b.kind == "param":
                return True
            source: ast.AST | None = b.value
            if b.kind == "for":
                source = getattr(b.node, "iter", None)
            elif source is None and isinstance(b.node, ast.Assign):
                source = b.node.value  # `loss, logs = model(x)`: the whole right-hand side
            if source is not None and device_rooted(file, source, depth + 1, own):
                return True
        return False
    return False


_REDUCERS = {"sum", "max", "min", "abs"}  # builtins that reduce tensors to a tensor
_MODEL_CALL = re.compile(
    r"^(model|net|module|criterion|loss_fn|forward)$|_(model|net|criterion|loss)$", re.IGNORECASE
)


def _resolvable(call: ast.Call) -> bool:
    """A call the model or the project index may resolve: `f()`, `self.m()`, `mod.f()`,
    `self.trainer.optimize()`."""
    func = call.func
    return isinstance(func, ast.Name) or (
        isinstance(func, ast.Attribute)
        and (isinstance(func.value, ast.Name) or _self_attribute(func.value))
    )


def _self_attribute(node: ast.AST) -> bool:
    """`self.mp_trainer`: an attribute of the object, whose class `__init__` may say."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _in_step_loop(file: PythonFile, node: ast.AST, function: ast.AST) -> bool:
    """In a loop of `function` that steps by its own text: GPU101 reports that sync there."""
    for parent in file.ancestors(node):
        if parent is function:
            return False
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and file.loops.basic_step_loop(
            parent
        ):
            return True
    return False


def _in_loop(file: PythonFile, node: ast.AST, function: ast.AST) -> bool:
    for parent in file.ancestors(node):
        if parent is function:
            return False
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)):
            return True
    return False


def _guarded(file: PythonFile, node: ast.AST, function: ast.AST) -> bool:
    """Runs only some calls of `function`: under a periodic test (`if step % k == 0`,
    `if self.log_metrics:`), in an exception handler or a `raise`."""
    child = node
    for parent in file.ancestors(node):
        if parent is function:
            return False
        if isinstance(parent, (ast.ExceptHandler, ast.Raise)):
            return True
        if (
            isinstance(parent, ast.If)
            and child is not parent.test
            and file.loops.periodic(parent.test)
        ):
            return True
        child = parent
    return False


def _branch(file: PythonFile, node: ast.AST, function: ast.AST) -> tuple | None:
    """None where `node` runs on every call of `function` (as far as `if`s go); else the one
    `if` it sits under and the side (0 body, 1 else), or `("nested", 0)`: under several `if`s,
    a conditional expression or `and`/`or`, never paired with another side. After a guard
    that may return early (`if not active: return`), nothing runs on every call either."""
    if _after_early_return(file, node, function):
        return ("nested", 0)
    found: tuple | None = None
    child = node
    for parent in file.ancestors(node):
        if parent is function:
            return found
        if isinstance(parent, ast.If) and child is not parent.test:
            if child in parent.body and _has_grad(parent.test):
                child = parent
                continue  # `if p.grad is not None:`: true for every trained parameter
            if found is not None:
                return ("nested", 0)
            found = (parent, 0 if child in parent.body else 1)
        elif isinstance(parent, ast.IfExp) and child is not parent.test:
            return ("nested", 0)
        elif isinstance(parent, ast.BoolOp) and child is not parent.values[0]:
            return ("nested", 0)  # `ok and x.item()`: the first operand always runs
        elif isinstance(parent, ast.comprehension) and child in parent.ifs:
            return ("nested", 0)
        child = parent
    return found


def _has_grad(test: ast.AST) -> bool:
    """`p.grad is not None`: after a backward pass, so for every parameter being trained."""
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == "grad"
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _after_early_return(file: PythonFile, node: ast.AST, function: ast.AST) -> bool:
    """An `if` with a `return` in it comes before `node` in a block around it, in `function`."""
    child = node
    for parent in file.ancestors(node):
        if isinstance(child, ast.stmt):
            block = file.statement_block(child)
            if block is not None:
                for earlier in block[: block.index(child)]:
                    if (
                        isinstance(earlier, ast.If)
                        # skipping a step on overflow (`if not isfinite(...): return`) is the
                        # rare path, as an exception would be
                        and not nan_check(file, earlier.test)
                        and any(isinstance(n, ast.Return) for n in _own_statements(earlier))
                    ):
                        return True
        if parent is function:
            return False
        child = parent
    return False


def _own_statements(statement: ast.AST):
    """The statements under `statement`, not those of nested functions or classes."""
    stack = [statement]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(child, ast.stmt) and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                stack.append(child)


_TO_DEVICE = re.compile(r"^(to|cuda)$|to_device$|^(move|place|put)_to", re.IGNORECASE)


def _moved_later(file: PythonFile, function: ast.AST, node: ast.AST, read: ast.AST | None) -> bool:
    """`batch.get("mask").sum().item()` and only then `batch = move_to_device(batch, dev)`: the
    value read is still on the CPU. True where a name the read depends on (or the name its
    binding comes from) is rebound later in `function` from a device move of itself."""
    if read is None:
        return False
    names = {n.id for n in ast.walk(read) if isinstance(n, ast.Name)}
    for name in list(names):
        for b in file.model.bindings_of(name, before=node):
            source = b.value if b.value is not None else getattr(b.node, "value", None)
            if source is not None:
                names |= {n.id for n in ast.walk(source) if isinstance(n, ast.Name)}
    line = getattr(node, "lineno", 0)
    for name in names:
        for b in file.model.bindings_in(function, name):
            value = b.value
            if not (isinstance(b.node, ast.Assign) and b.node.lineno > line):
                continue
            if not (
                isinstance(value, ast.Call) and _TO_DEVICE.search(terminal_name(value.func) or "")
            ):
                continue
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(value)):
                return True  # `batch = move_to_device(batch, dev)`: rebound from itself
    return False


_SUMMARIES: MemoKey[Summaries] = MemoKey("function summaries")


def summaries(file: PythonFile) -> Summaries:
    return file.memo.get(_SUMMARIES, lambda: Summaries(file, file.project_lookup))
