"""Wall-clock timing in Python: which clock reads pair up, and what runs between them.

An *interval* is a pair of clock reads in one scope (a function, or the module body) whose
difference the code takes: `t0 = time.perf_counter()` ... `time.perf_counter() - t0`, or
`t1 = time.time()` ... `t1 - t0`. Its *region* is every node after the first read and before
the second, positionally, not descending into nested functions or classes.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.diagnostics import Related
from gpulint.frontends.python.loops import LOOPS, is_step_marker
from gpulint.frontends.python.model import (
    FUNCTIONS,
    SCOPES,
    MemoKey,
    end_position,
    position,
    scope_nodes,
)
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.syncs import host_sync
from gpulint.frontends.python.tensors import _torch_call

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

CLOCKS = {
    "time.time",
    "time.time_ns",
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "timeit.default_timer",
}
# The prefilter's words: every clock in CLOCKS is spelled with one of these.
CLOCK_TRIGGERS = (
    "time.time",
    "perf_counter",
    "monotonic",
    "default_timer",
    "from time import",
    "time_ns",
)
# The prefilter's words for a timing decorator imported from another module of the tree (a
# file that applies one need not read a clock itself): its name says it times.
TIMER_NAME_TRIGGERS = ("timed", "timer", "timing", "time_it", "_time", "elapsed", "stopwatch")
# Callees that run a model on the device: `model(x)`, `self.net(x)`, `teacher_model(x)`,
# `model.forward(x)`. Whole words only: `pipeline.add_model(m)` is not a model call.
_MODEL = re.compile(
    r"^(model|net|network|module|encoder|decoder|classifier|policy|backbone|transformer|gpt|llm)$"
    r"|_(model|net|encoder|decoder|backbone)$|^(model|net)_\w+$|^forward$",
    re.IGNORECASE,
)
_DEVICE_ARG = re.compile(r"cuda|device|dev\b|rank|gpu", re.IGNORECASE)
# Building or loading a model is setup, not device work.
_SETUP = re.compile(
    r"^(build|load|get|create|make|init|save|setup|prepare|register|add|set|wrap|export|convert|print|log)_"
    r"|_(builder|factory|config|cfg|cls|class|args|kwargs|path|name|type|init|provider)$",
    re.IGNORECASE,
)
# Tensor factories launch at most a fill kernel: not the work anyone times.
_FACTORIES = {
    "arange", "zeros", "ones", "empty", "full", "tensor", "as_tensor", "from_numpy", "rand", "randn",
    "randint", "randperm", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "linspace", "manual_seed", "empty_strided", "eye",
    # Not device work at all: files, seeds, grad modes.
    "load", "save", "seed", "no_grad", "inference_mode", "enable_grad", "autocast", "Generator",
}  # fmt: skip
# Helpers whose name says they wait: `synchronize()`, `cuda_sync()`, `barrier()`. Hugging Face
# `generate()` reads the stopping criteria back to the host after every token.
_SYNC_NAME = re.compile(r"sync|barrier|block_until_ready|^generate$", re.IGNORECASE)
# Ops whose output size depends on the data: the host waits for the device to know it.
_DATA_DEPENDENT = {"nonzero", "unique", "unique_consecutive", "masked_select", "argwhere"}


def is_clock(file: PythonFile, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and not node.args and file.qualname(node) in CLOCKS


@dataclass(frozen=True)
class Interval:
    start: ast.Call  # the first clock read
    end: ast.Call  # the second clock read
    scope: ast.AST

    def region(self, file: PythonFile | None = None) -> list[ast.AST]:
        """The scope's nodes between the two clock reads, in the scope's own order. Found by
        bisection in the scope's nodes sorted once by position: a function with thousands of
        timed regions rescanned the whole scope for each (2,000 regions took a minute)."""
        lo, hi = end_position(self.start), position(self.end)
        positions, entries = _positioned(self.scope, file)
        picked = entries[bisect.bisect_left(positions, lo) : bisect.bisect_left(positions, hi)]
        return [node for _, node in sorted(picked, key=lambda e: e[0])]


# id(scope) -> (positions sorted, [(index in scope order, node)] in the same order)
_BY_POSITION: MemoKey[dict[int, tuple[list, list]]] = MemoKey("scope nodes by position")


def _positioned(scope: ast.AST, file: PythonFile | None) -> tuple[list, list]:
    table = file.memo.get(_BY_POSITION, dict) if file is not None else {}
    found = table.get(id(scope))
    if found is None:
        ordered = sorted(
            ((position(n), i, n) for i, n in enumerate(scope_nodes(scope)) if hasattr(n, "lineno")),
            key=lambda e: (e[0], e[1]),
        )
        found = table[id(scope)] = ([p for p, _, _ in ordered], [(i, n) for _, i, n in ordered])
    return found


def _clock_starts(
    file: PythonFile, scope: ast.AST, read: ast.Name | ast.Attribute
) -> list[ast.Call]:
    """The clock calls assigned in `scope`'s own body to what `read` names (`t0 = time.time()`,
    `self.start = perf_counter()`), from the model's bindings and attribute stores."""
    model = file.model
    if isinstance(read, ast.Name):
        values = [b.value for b in model.bindings_in(scope, read.id) if b.kind != "augassign"]
    else:
        text = file.segment(read)
        values = [
            s.value
            for s in model.attribute_stores(read.attr)
            if model.scope_of(s.node) is scope and file.segment(s.target) == text
        ]
    return [v for v in values if isinstance(v, ast.Call) and is_clock(file, v)]


_INTERVALS: MemoKey[list[Interval]] = MemoKey("timing intervals")


def intervals(file: PythonFile) -> list[Interval]:
    return file.memo.get(_INTERVALS, lambda: _intervals(file))


def _subtractions(file: PythonFile) -> dict[int, list[ast.BinOp]]:
    """id(scope) -> the `a - b` (b a name or an attribute) in the module's or a def's own body,
    in `scope_nodes` order: read off the file's index, not by walking every function again."""
    out: dict[int, list[ast.BinOp]] = {}
    parent = file.parent
    for node in file.nodes(ast.BinOp):
        if not isinstance(node.op, ast.Sub) or not isinstance(
            node.right, (ast.Name, ast.Attribute)
        ):
            continue
        child: ast.AST = node
        up = parent(node)
        while up is not None and not isinstance(up, SCOPES):
            child, up = up, parent(up)
        if up is None:
            scope: ast.AST = file.tree
        elif isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            child is stmt for stmt in up.body
        ):
            scope = up
        else:  # a lambda's or a class's body, a decorator, a default: no scope walk sees it
            continue
        out.setdefault(id(scope), []).append(node)
    return out


def _intervals(file: PythonFile) -> list[Interval]:
    found: dict[tuple[int, int], Interval] = {}
    scopes = [file.tree, *file.nodes(ast.FunctionDef, ast.AsyncFunctionDef)]
    subtractions = _subtractions(file)
    for scope in scopes:
        for node in subtractions.get(id(scope), ()):
            if not isinstance(node.right, (ast.Name, ast.Attribute)):
                continue  # (said by _subtractions; for the type checker)
            starts = _clock_starts(file, scope, node.right)
            if not starts:
                continue
            end: ast.Call
            if isinstance(node.left, ast.Call) and is_clock(file, node.left):
                end = node.left
            elif isinstance(node.left, (ast.Name, ast.Attribute)):
                ends = [
                    c for c in _clock_starts(file, scope, node.left) if position(c) < position(node)
                ]
                if not ends:
                    continue
                end = max(ends, key=position)
            else:
                continue
            before = [c for c in starts if position(c) < position(end)]
            if not before:
                continue
            start = max(before, key=position)
            found.setdefault((id(start), id(end)), Interval(start, end, scope))
    return list(found.values())


def local_function(file: PythonFile, name: str | None) -> ast.AST | None:
    """The first def named `name` in the file, if any."""
    found = file.model.functions(name) if name else []
    return found[0] if found else None


_SYNCS: MemoKey[dict[tuple[int, int], bool]] = MemoKey("is_sync by node")
_PIPELINE = re.compile(r"Pipeline|\bpipeline\(")
_FIRST_SYNC: MemoKey[dict[tuple[int, bool], tuple | None]] = MemoKey("first sync by scope")


def is_sync(file: PythonFile, node: ast.AST, depth: int = 1) -> bool:
    """A call that waits for the device, directly or (one level) through a helper in this file.
    Remembered per node: rules ask it of every node of a scope, once per call they judge."""
    table = file.memo.get(_SYNCS, dict)
    key = (id(node), depth)
    found = table.get(key)
    if found is None:
        found = table[key] = _is_sync(file, node, depth)
    return found


def first_sync(file: PythonFile, root: ast.AST, nested: bool = False) -> tuple | None:
    """Where the first sync of `root`'s own scope is (`nested`: of its nested functions too),
    or None: found once per scope, so a rule asking "a sync before this call?" for each of
    thousands of calls stays linear."""
    table = file.memo.get(_FIRST_SYNC, dict)
    key = (id(root), nested)
    if key not in table:
        nodes = ast.walk(root) if nested else scope_nodes(root)
        table[key] = min(
            (position(n) for n in nodes if hasattr(n, "lineno") and is_sync(file, n)),
            default=None,
        )
    return table[key]


def _is_sync(file: PythonFile, node: ast.AST, depth: int) -> bool:
    if isinstance(node, ast.Subscript) and _boolean_mask(node.slice):
        return True  # x[x[:, 4] > threshold]: the result's size is read back
    if not isinstance(node, ast.Call):
        return False
    if host_sync(file, node) is not None:
        return True
    name = terminal_name(node.func)
    if name and (_SYNC_NAME.search(name) or name in _DATA_DEPENDENT):
        return True
    if isinstance(node.func, ast.Name) and _pipeline(file, node.func, node):
        return True  # pipelines hand back host objects (images, text): they read back
    helper = local_function(file, name) if depth else None
    if helper is not None:
        return any(is_sync(file, n, depth - 1) for n in scope_nodes(helper))
    return False


def _pipeline(file: PythonFile, name: ast.Name, at: ast.AST) -> bool:
    """`pipe = DiffusionPipeline.from_pretrained(...)` / `pipe = pipeline("text-generation")`."""
    scope = file.enclosing_function(at) or file.tree
    return any(
        b.kind == "assign"
        and b.value is not None
        and _PIPELINE.search(file.segment(b.value)) is not None
        for b in file.model.bindings_in(scope, name.id)
    )


def _boolean_mask(index: ast.AST) -> bool:
    if isinstance(index, ast.Tuple):
        return any(_boolean_mask(e) for e in index.elts)
    return isinstance(index, ast.Compare) or (
        isinstance(index, ast.BinOp) and isinstance(index.op, (ast.BitAnd, ast.BitOr))
    )


def cuda_work(file: PythonFile, node: ast.AST, scope: ast.AST) -> bool:
    """A call that queues work on the GPU: a model call, backward, optimizer step, a copy to the
    device, a Triton launch, or a torch op in a function that uses CUDA."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if is_step_marker(node):
        return True
    if isinstance(func, ast.Attribute) and func.attr in {"cuda", "to"}:
        # A copy from pageable host memory returns when the copy is done; only
        # `non_blocking=True` leaves it running on the device.
        blocking = keyword(node, "non_blocking")
        if (
            blocking is not None
            and isinstance(blocking.value, ast.Constant)
            and blocking.value.value is True
        ):
            return func.attr == "cuda" or any(
                _DEVICE_ARG.search(file.segment(a)) for a in node.args
            )
        return False
    if isinstance(func, ast.Subscript) and "triton" in file.bindings.values():
        return True  # kernel[grid](...)
    # A model is a local object: `model(x)`, `self.net(x)`; a library's `MLModel(...)` is not.
    # `Transformer(args)` builds a model; it does not run one.
    name = terminal_name(func)
    if (
        name
        and name[0].islower()
        and _MODEL.search(name)
        and not _SETUP.search(name)
        and file.qualname(node) is None
    ):
        return True
    launcher = local_function(file, name)
    if launcher is not None and _launches_triton(file, launcher):
        return True  # a launcher defined in this file: `def add(x, y): add_kernel[grid](x, y, ...)`
    if _torch_call(file, node) and _scope_uses_cuda(file, scope):
        return (file.qualname(node) or "").rsplit(".", 1)[-1] not in _FACTORIES
    return False


def _launches_triton(file: PythonFile, function: ast.AST) -> bool:
    if "triton" not in file.bindings.values():
        return False
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) for n in scope_nodes(function)
    )


def _scope_uses_cuda(file: PythonFile, scope: ast.AST) -> bool:
    if isinstance(scope, ast.Module):
        return file.uses_cuda
    return bool(re.search(r"\bcuda\b|device", file.segment(scope)))


def spans_training_steps(file: PythonFile, interval: Interval) -> bool:
    """The interval is a tick timer over a training loop: its end read sits in a loop that
    trains (a backward pass or optimizer step earlier in its body), and its start read is outside
    that loop or later in its body (reset once the tick is reported: `tick_start_time =
    time.time()`), so each interval spans a run of whole iterations. The device paces a
    training loop in steady state (the launch queue fills and blocks the host), so a time over
    many steps is off by at most the queue's depth, not the GPU time."""

    for loop in file.ancestors(interval.end):
        if loop is interval.scope:
            return False
        if not isinstance(loop, LOOPS):
            continue
        inside = any(a is loop for a in file.ancestors(interval.start))
        if inside and position(interval.start) < position(interval.end):
            continue  # both in one iteration: an interval within a step
        # the training work must come before the end read in the iteration: a data-time meter
        # (`data_time.update(time.time() - end)` first thing in the body) times the loader only
        return any(
            is_step_marker(n) and position(n) < position(interval.end) for n in ast.walk(loop)
        )
    return False


# -- what a timer runs -----------------------------------------------------------------------
TIMEIT = {"timeit.timeit", "timeit.repeat", "timeit.Timer"}
_PARSED_STATEMENTS: MemoKey[dict[int, list[ast.AST] | None]] = MemoKey("timeit statements")


def timed_body(file: PythonFile, call: ast.Call) -> list[ast.AST] | None:
    """The nodes that `timeit.timeit(stmt, ...)` / `timeit.repeat` / `timeit.Timer(stmt)` run
    each repetition: a lambda's body; a def of this file by name; or a string statement
    (`"model(x)"`, a name bound once to one), parsed, with each call in it to a def of this file
    followed into that def's body. A string's names resolve where `globals=` says: `globals()`
    the module, `locals()` the calling function, a dict literal its values (read at the call);
    or through `setup="from __main__ import f"`. With neither, the statement's names are
    undefined at run time: None. The string's own nodes are included only where its text maps
    onto the file's (a one-line literal with no escapes); else only the defs it calls. None
    where the statement cannot be told."""
    stmt = call.args[0] if call.args else getattr(keyword(call, "stmt"), "value", None)
    found = callable_body(file, stmt, call)
    if found is not None:
        return found
    if isinstance(stmt, ast.Name):
        bound = file.model.bindings_of(stmt.id, before=call)
        if len(bound) == 1 and bound[0].kind == "assign" and _string(bound[0].value):
            stmt = bound[0].value  # `stmt = "model(x)"` ... `timeit.Timer(stmt)`
    if stmt is None or not _string(stmt):
        return None
    table = file.memo.get(_PARSED_STATEMENTS, dict)
    if id(call) not in table:
        table[id(call)] = _statement_body(file, call, stmt)  # type: ignore[arg-type]
    return table[id(call)]


def callable_body(file: PythonFile, stmt: ast.AST | None, at: ast.AST) -> list[ast.AST] | None:
    """The nodes a callable runs: a lambda's body, or a def of this file by name (the one
    binding of the name reaching `at`)."""
    if isinstance(stmt, ast.Lambda):
        return list(ast.walk(stmt.body))
    if isinstance(stmt, ast.Name):
        bound = file.model.bindings_of(stmt.id, before=at)
        defs = [b.node for b in bound if b.kind == "def"]
        if len(defs) == 1 and len(bound) == 1:
            return list(scope_nodes(defs[0]))
    return None


def _string(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _statement_body(file: PythonFile, call: ast.Call, stmt: ast.Constant) -> list[ast.AST] | None:
    names = _timeit_namespace(file, call)
    if names is None:
        return None
    try:
        parsed = ast.parse(str(stmt.value))
    except (SyntaxError, ValueError):
        return None
    own = _placed(file, stmt, parsed)
    body: list[ast.AST] = list(ast.walk(parsed)) if own else []
    for node in ast.walk(parsed):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            function = names(node.func.id)
            if function is not None:
                body += scope_nodes(function)
    return body


def _timeit_namespace(file: PythonFile, call: ast.Call):
    """name -> the def of this file it means in the timed statement (or None), or None where
    the statement's namespace is unknown."""
    model = file.model

    def at_module(name: str):
        bound = model.bindings_in(file.tree, name)
        return bound[0].node if len(bound) == 1 and bound[0].kind == "def" else None

    def at_call(name: str):
        bound = model.bindings_of(name, before=call)
        return bound[0].node if len(bound) == 1 and bound[0].kind == "def" else None

    given = getattr(keyword(call, "globals"), "value", None)
    if isinstance(given, ast.Call) and isinstance(given.func, ast.Name) and not given.args:
        if given.func.id == "globals":
            return at_module
        if given.func.id == "locals":
            return at_call
        return None
    if isinstance(given, ast.Dict):
        mapped = {
            k.value: v
            for k, v in zip(given.keys, given.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }

        def in_dict(name: str):
            value = mapped.get(name)
            return at_call(value.id) if isinstance(value, ast.Name) else None

        return in_dict
    if given is not None:
        return None
    setup = getattr(keyword(call, "setup"), "value", None)
    if setup is None and len(call.args) > 1:
        setup = call.args[1]
    if not _string(setup):
        return None
    try:
        statements = ast.parse(setup.value).body  # type: ignore[union-attr]
    except (SyntaxError, ValueError):
        return None
    imported = {
        alias.asname or alias.name
        for s in statements
        if isinstance(s, ast.ImportFrom) and s.module == "__main__"
        for alias in s.names
    }
    if not imported:
        return None
    return lambda name: at_module(name) if name in imported else None


def _placed(file: PythonFile, literal: ast.Constant, parsed: ast.Module) -> bool:
    """Move the parsed statement's nodes onto the literal's place in the file, where its text
    is the string's own (`"model(x)"` on one line, no prefix or escapes): then the rules'
    questions about a node's text read the file. False where it is not."""
    text = file.segment(literal)
    if len(text) < 2 or text[0] not in "'\"" or text[1:-1] != literal.value or "\n" in text:
        return False  # a prefix, an escape, a triple-quoted or concatenated literal
    line = literal.lineno  # type: ignore[attr-defined]
    shift = literal.col_offset + 1  # type: ignore[attr-defined]  # (UTF-8 bytes, as the AST's)
    for node in ast.walk(parsed):
        if hasattr(node, "lineno"):
            node.lineno = line  # type: ignore[attr-defined]
            node.col_offset += shift  # type: ignore[attr-defined]
            if getattr(node, "end_lineno", None) is not None:
                node.end_lineno = line  # type: ignore[attr-defined]
                node.end_col_offset += shift  # type: ignore[attr-defined]
    return True


# -- timing decorators -------------------------------------------------------------------------
def timing_decorator(
    file: PythonFile, decorator: ast.AST, factory: bool = False
) -> tuple[Related, ...] | None:
    """Where a decorator of this file reads the clock around the call it wraps, with no sync:
    `def timed(fn)` whose nested wrapper reads a clock, calls `fn`, reads a clock again, and
    never waits for the device; with `factory`, a `def timed(name)` that defines such a
    decorator (`@timed("forward")`). The first and last reads, as related locations; None when
    it is not one."""
    if not isinstance(decorator, FUNCTIONS):
        return None
    if factory:
        for inner in decorator.body:
            found = timing_decorator(file, inner) if isinstance(inner, FUNCTIONS) else None
            if found is not None:
                return found
        return None
    if not decorator.args.args:
        return None
    wrapped = decorator.args.args[0].arg
    for wrapper in decorator.body:
        if not isinstance(wrapper, FUNCTIONS):
            continue
        nodes = list(scope_nodes(wrapper))
        if any(is_sync(file, n) for n in nodes):
            continue
        clocks = sorted((n for n in nodes if is_clock(file, n)), key=position)
        calls = [
            n
            for n in nodes
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == wrapped
        ]
        if len(clocks) < 2:
            continue
        first, last = clocks[0], clocks[-1]
        assert isinstance(first, ast.Call)  # (is_clock: a call)
        if any(position(first) < position(c) < position(last) for c in calls):
            what = file.segment(first.func)
            return (
                Related(
                    file.display_path,
                    *file.span(first)[:2],
                    f"`{what}()` is read here, before `{wrapped}()` runs",
                    *file.span(first)[2:],
                ),
                Related(
                    file.display_path,
                    *file.span(last)[:2],
                    "and here, after it, with no `torch.cuda.synchronize()` between",
                    *file.span(last)[2:],
                ),
            )
    return None
