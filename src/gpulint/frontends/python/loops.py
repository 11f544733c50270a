"""The loop-context model that GPU rules share.

A *step loop* runs once per training (or evaluation) step: its own body, not counting nested
loops or functions, calls `.backward()`, `optimizer.step()`/`scaler.step()`, or it iterates a data
loader and calls a model. A statement inside a step loop runs every step unless a *periodic guard*
stands between them: `if step % N == 0`, `if i % k == 0 and rank == 0`, `if should_log:`,
`if step == last:`, and a gradient-accumulation block (`if (i + 1) % accum == 0:` around the
optimizer step) unless its count is known to be 1, and a fill of what persists across steps
(`if mask is None: mask = ...` with `mask` set before the loop: `fills_once`). Code in a nested
loop of a step loop still runs every step.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gpulint.frontends import BackLink
from gpulint.frontends.python.loaders import is_loader
from gpulint.frontends.python.model import end_position, position
from gpulint.frontends.python.names import structure, terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

LOOPS = (ast.For, ast.AsyncFor, ast.While)
Loop = ast.For | ast.AsyncFor | ast.While
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)

_STEPPER = re.compile(r"optim|^opt(_|\d|$)|scaler", re.IGNORECASE)
_LOADER = re.compile(r"loader|batches$", re.IGNORECASE)
_MODEL = re.compile(
    r"model|^net$|net$|^module$|encoder|decoder|classifier|policy|backbone|transformer|^gpt|^llm",
    re.IGNORECASE,
)
_FACTORY = re.compile(r"(load|build|get|create|make|init|save|setup|wrap|unwrap|prepare)_?", re.I)
_ITER_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "islice", "track", "progress", "cycle"}
# Names that say "only sometimes": logging, evaluation, saving, intervals.
_PERIODIC_NAME = re.compile(
    r"log|every|interval|eval|save|print|report|display|verbose|debug|visual|ckpt|checkpoint"
    r"|profil|sample|valid|should|^do_|periodic|freq|tensorboard|wandb",
    re.IGNORECASE,
)


def own_nodes(loop: Loop) -> Iterator[ast.AST]:
    """Nodes of a loop's body and else, not descending into nested loops or scopes."""
    stack: list[ast.AST] = list(reversed([*loop.body, *loop.orelse]))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, LOOPS):
            stack.append(node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test)
            continue
        if isinstance(node, SCOPES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def body_nodes(loop: Loop) -> Iterator[ast.AST]:
    """Nodes of a loop's body, nested loops and comprehensions included, not nested scopes."""
    stack: list[ast.AST] = list(reversed(loop.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, SCOPES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def is_step_marker(node: ast.AST) -> bool:
    """`x.backward()`, `optimizer.step()`, `scaler.step(opt)`, `accelerator.backward(loss)`."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "backward":
        return True
    if node.func.attr == "step":
        receiver = terminal_name(node.func.value)
        return bool(receiver and _STEPPER.search(receiver))
    return False


def _fetches_batch(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = terminal_name(node.func)
    return bool(name and _BATCH_FETCH.search(name))


def _unwrap_iterable(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Call) and terminal_name(node.func) in _ITER_WRAPPERS and node.args:
        node = node.args[0]
    return node


# `x, y = get_batch("train")`, `batch = next(train_iter)`: the loop fetches its own batches.
_BATCH_FETCH = re.compile(r"^(get|next|sample|fetch|load|draw)_?(train_)?batch(es)?$|^next$")


class LoopModel:
    file: BackLink[PythonFile] = BackLink()  # weak: the file caches this model

    def __init__(self, file: PythonFile):
        self.file = file
        self._step: dict[int, bool] = {}
        self._basic: dict[int, bool] = {}

    def iterates_loader(self, loop: ast.AST) -> bool:
        """The loop iterates a data loader: a value the dataflow says is one (`loaders`:
        built by `DataLoader(...)`, returned by a function that returns one, stored on the
        object, passed by the callers), directly or wrapped (`enumerate(...)`, `tqdm(...)`,
        `metric_logger.log_every(data_loader, 10)`); else, where the dataflow cannot tell (a
        loader from a library or a module outside the tree), a name that says so."""
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            return False
        it = _unwrap_iterable(loop.iter)
        candidates = [it]
        if isinstance(it, ast.Call) and it.args:
            # `metric_logger.log_every(data_loader, 10)`, `prefetcher(loader)`: a loader wrapped.
            candidates.append(it.args[0])
        if any(is_loader(self.file, c) for c in candidates):
            return True
        name = terminal_name(candidates[-1])
        return bool(name and _LOADER.search(name))

    def is_step_loop(self, loop: Loop) -> bool:
        """Its own body steps (backward, optimizer step), directly or through a function it
        calls that steps once per call (a closure, `self.train_step(batch)`), or it takes a
        batch per iteration (iterates a loader, `x, y = get_batch()`) and calls a model."""
        key = id(loop)
        if key not in self._step:
            self._step[key] = False  # a loop reached again through its own callees: no
            nodes = list(own_nodes(loop))
            marker = self.basic_step_loop(loop, nodes) or (
                self._iterates_steps(loop) and self._steps_through_callee(nodes)
            )
            self._step[key] = marker
        return self._step[key]

    def basic_step_loop(self, loop: Loop, nodes: list[ast.AST] | None = None) -> bool:
        """`is_step_loop` from the loop's own text only (function summaries use this one)."""
        key = id(loop)
        found = self._basic.get(key)
        if found is None:
            found = self._basic[key] = self._basic_step_loop(
                loop, list(own_nodes(loop)) if nodes is None else nodes
            )
        return found

    def _basic_step_loop(self, loop: Loop, nodes: list[ast.AST]) -> bool:
        if any(is_step_marker(n) for n in nodes):
            return True
        # The model call first: a scan of the body's names, where `iterates_loader` follows
        # the iterated value through the dataflow (and the callers' summaries).
        calls_model = any(
            isinstance(n, ast.Call)
            and (name := terminal_name(n.func)) is not None
            and bool(_MODEL.search(name))
            for n in nodes
        )
        return calls_model and (any(_fetches_batch(n) for n in nodes) or self.iterates_loader(loop))

    def calls_model(self, loop: Loop) -> bool:
        """The loop's own body calls something named as a model (`model(x)`, `net(x)`,
        `self.encoder(h)`), not only functions (`render(camera, scene)`)."""
        return any(
            isinstance(n, ast.Call)
            and (name := terminal_name(n.func)) is not None
            and bool(_MODEL.search(name))
            for n in own_nodes(loop)
        )

    def _iterates_steps(self, loop: ast.AST) -> bool:
        """A loop over batches or step counts (`for batch in loader`, `for step in range(n)`,
        `while step < max_steps`), not over configurations or experiments."""
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            return True
        # What the loop's text says first; the dataflow (`iterates_loader`) only where it does not.
        it = _unwrap_iterable(loop.iter)
        if isinstance(it, ast.Call) and terminal_name(it.func) == "range":
            return True
        name = terminal_name(it) or ""
        if re.search(r"batch|step|iter|data|bar$|pbar", name, re.IGNORECASE):
            return True
        return self.iterates_loader(loop)

    def _steps_through_callee(self, nodes: list[ast.AST]) -> bool:
        calls = [n for n in nodes if isinstance(n, ast.Call) and not is_step_marker(n)]
        if not calls:
            return False
        table = self.file.summaries
        for call in calls:
            summary = table.of_call(call)
            if summary is not None and summary.steps:
                return True
        return False

    def model_calls(self, loop: Loop) -> list[ast.Call]:
        """Calls of a model in the loop's own body, by the callee's name (`model(x)`,
        `self.net(x)`, `encoder.forward(x)`); not methods of it (`model.generate`, `.eval()`)
        nor factories (`load_model(...)`)."""
        out = []
        for node in own_nodes(loop):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "forward":
                func = func.value
            name = terminal_name(func)
            if (
                name
                and _MODEL.search(name)
                and not _FACTORY.match(name)
                # a helper of this file (`run_model(img, model)`): its body says what it runs
                and self.file.model.resolve_callee(node) is None
            ):
                out.append(node)
        return out

    def trains(self, loop: Loop) -> bool:
        """A training step loop (backward/optimizer step), not only a loader-and-model loop."""
        if any(is_step_marker(n) for n in ast.walk(loop)):
            return True
        return self._steps_through_callee(list(own_nodes(loop)))

    def iteration_source(self, name: str, loop: ast.AST):
        """Where a loop variable comes from, for `name` bound by a `for` target at or inside
        `loop`: "batch" when it is an element of the step loop's own batch (the loader's
        output), else the iterated expression of the inner loop that binds it, else None."""
        for node in ast.walk(loop):
            if not isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                continue
            bound = {t.id for t in ast.walk(node.target) if isinstance(t, ast.Name)}
            if name not in bound:
                continue
            if node is loop and self.iterates_loader(loop):
                return "batch"
            return _unwrap_iterable(node.iter)
        return None

    def moved_to_device(self, name: str, loop: ast.AST) -> bool:
        """`x = x.to(device)`, `x = x.cuda()`, or any reassignment of `name` in the loop."""
        model = self.file.model
        first, last = position(loop), end_position(loop)
        return any(
            isinstance(b.node, ast.Assign) and first <= b.position and b.position <= last
            for b in model.bindings_in(model.scope_of(loop), name)
        )

    def enclosing_step_loop(self, node: ast.AST) -> Loop | None:
        """The nearest enclosing step loop in the same function, or None."""
        child = node
        for parent in self.file.ancestors(node):
            if isinstance(parent, SCOPES):
                return None
            if isinstance(parent, LOOPS) and self._in_body(parent, child):
                if self.is_step_loop(parent):
                    return parent
            child = parent
        return None

    @staticmethod
    def _in_body(loop: ast.AST, child: ast.AST) -> bool:
        # The loop's iterable/condition is evaluated per iteration for `while`, once for `for`.
        if isinstance(loop, (ast.For, ast.AsyncFor)) and child is loop.iter:
            return False
        return True

    def periodic_guard(self, node: ast.AST, loop: ast.AST) -> ast.AST | None:
        """The `if` between `node` and `loop` that makes `node` run only some steps, if any."""
        child = node
        for parent in self.file.ancestors(node):
            if parent is loop:
                return None
            if isinstance(parent, ast.ExceptHandler):
                return parent  # error handling runs only when something fails, not every step
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                in_body = (
                    child in parent.body if isinstance(parent, ast.If) else child is parent.body
                )
                if (
                    in_body
                    and self.periodic(parent.test)
                    and (not self._is_step_block(parent) or self._accumulates(parent))
                ):
                    return parent
                if in_body and isinstance(parent, ast.If) and fills_once(parent, loop):
                    return parent  # `if mask is None: mask = ...`: built on the first step only
            child = parent
        return None

    def periodic(self, test: ast.AST) -> bool:
        """`is_periodic_test`, also through a name bound to one: `is_log_step = i % k == 0`
        ... `if is_log_step:` (every binding that reaches the test must be periodic)."""
        if is_periodic_test(test):
            return True
        names: list[ast.AST] = [test]
        if isinstance(test, ast.BoolOp):
            names = list(test.values)
        for name in names:
            if isinstance(name, ast.Name):
                bound = self.file.model.bindings_of(name.id, before=name)
                if bound and all(b.value is not None and is_periodic_test(b.value) for b in bound):
                    return True
        return False

    @staticmethod
    def _is_step_block(guard: ast.AST) -> bool:
        # `if should_update: optimizer.step()` is the step itself, not a logging guard (with a
        # `%` test, an accumulation block: `_accumulates`).
        if not isinstance(guard, ast.If):
            return False
        return any(is_step_marker(n) for stmt in guard.body for n in ast.walk(stmt))

    def _accumulates(self, guard: ast.If | ast.IfExp) -> bool:
        """`(i + 1) % accum == 0` over a block that steps the optimizer: gradient accumulation,
        the block runs once per `accum` iterations, unless the count is known to be 1 (`default=1`
        of its option, a constant 1), where it runs on every one. An `else:` that steps too
        alternates two kinds of step (a GAN's generator and discriminator turns): one of them
        runs on every iteration, so neither side is periodic."""
        from gpulint.frontends.python.options import UNKNOWN, known_value

        if isinstance(guard, ast.If) and any(
            is_step_marker(n) for stmt in guard.orelse for n in ast.walk(stmt)
        ):
            return False
        for node in ast.walk(guard.test):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                value = known_value(self.file, node.right)
                if value is UNKNOWN or value != 1:
                    return True
        return False

    def known_trips(self, loop: Loop) -> int | None:
        """How many times `loop` runs where the module says it plainly: `range(10)`,
        `range(steps)` with `steps = 10` (or an option's default), a literal list or tuple;
        None otherwise (a loader, a `while`, a computed bound)."""
        from gpulint.frontends.python.options import known_value

        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            return None
        it = loop.iter
        if isinstance(it, ast.Call) and terminal_name(it.func) == "enumerate" and it.args:
            it = it.args[0]
        if isinstance(it, (ast.List, ast.Tuple)):
            return len(it.elts)
        if not (isinstance(it, ast.Call) and terminal_name(it.func) == "range" and it.args):
            return None
        if len(it.args) > 3 or it.keywords:
            return None
        bounds = [b for b in (known_value(self.file, a) for a in it.args) if type(b) is int]
        if len(bounds) != len(it.args):
            return None
        if len(bounds) == 1:
            bounds = [0, bounds[0]]
        if len(bounds) == 2:
            bounds.append(1)
        start, stop, step = bounds
        return len(range(start, stop, step)) if step else None

    def runs_every_step(self, node: ast.AST) -> Loop | None:
        """The step loop in which `node` runs on every iteration, or None."""
        loop = self.enclosing_step_loop(node)
        if loop is None or self.periodic_guard(node, loop) is not None:
            return None
        return loop


_PER_PROCESS = re.compile(r"rank|world|device|gpu|process|node|local", re.IGNORECASE)


def under_branch(file: PythonFile, node: ast.AST, loop: ast.AST) -> bool:
    """`node` runs in a branch of an `if` (or a conditional expression) inside `loop`, not in
    its test (`if clip: clip_() else: norm = f()`, `if is_rank0: acc(...)`): the default path
    may never take it."""
    child = node
    for parent in file.ancestors(node):
        if parent is loop:
            return False
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            return True
        child = parent
    return False


def is_periodic_test(test: ast.AST) -> bool:
    """`step % N == 0`, `should_log`, `i == 0`, `args.log and step % k == 0`..."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq) for op in node.ops):
            # `if step == 0:` / `if i == len(loader) - 1:` runs once; `if rank == 0:` every step.
            names = {name for n in ast.walk(node) if (name := terminal_name(n)) is not None}
            if not any(_PER_PROCESS.search(n) for n in names):
                return True
        name = terminal_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if name is None and isinstance(node, ast.Call):
            name = terminal_name(node.func)
        if name and _PERIODIC_NAME.search(name):
            return True
    return False


def runs_before_in_iteration(file: PythonFile, earlier: ast.AST, later: ast.AST) -> bool:
    """`earlier` runs, before `later`, on every path of one iteration that reaches `later`:
    it sits in a statement that precedes one holding `later` in a block they share (or earlier
    in `later`'s own statement), and nothing inside that statement makes it conditional (an
    `if` side, a loop body, a handler, a later operand of `and`/`or`, a comprehension's body,
    a nested function). Both must be in the same loop body or function; the caller checks the
    loop."""
    chain: dict[int, ast.AST] = {}  # id(block) -> the statement of that block holding `later`
    node: ast.AST | None = later
    while node is not None and not isinstance(node, SCOPES):
        if isinstance(node, ast.stmt):
            block = file.statement_block(node)
            if block is not None:
                chain[id(block)] = node
        node = file.parent(node)
    child: ast.AST = earlier
    for parent in file.ancestors(earlier):
        if isinstance(child, ast.stmt):
            block = file.statement_block(child)
            holder = chain.get(id(block)) if block is not None else None
            if holder is not None and block is not None:
                if holder is child:  # the same statement: evaluated left to right
                    return _ends_before(earlier, later) and _unconditional(file, earlier, child)
                return _index(block, child) < _index(block, holder) and _unconditional(
                    file, earlier, child
                )
        if isinstance(parent, SCOPES):
            return False
        child = parent
    return False


def _index(block: list[ast.stmt], statement: ast.AST) -> int:
    return next(i for i, s in enumerate(block) if s is statement)


def _ends_before(a: ast.AST, b: ast.AST) -> bool:
    return end_position(a) <= position(b)


def _unconditional(file: PythonFile, node: ast.AST, statement: ast.AST) -> bool:
    """Evaluating `statement` always evaluates `node`: no branch, loop body, handler, short
    circuit, comprehension body or nested scope between them."""
    child = node
    for parent in file.ancestors(node):
        if child is statement:
            return True
        if isinstance(parent, SCOPES) or isinstance(parent, ast.Match | ast.ExceptHandler):
            return False
        if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and child is not parent.test:
            return False
        if isinstance(parent, (ast.For, ast.AsyncFor)) and child is not parent.iter:
            return False
        if isinstance(parent, ast.Try) and not any(
            child is s for s in [*parent.body, *parent.finalbody]
        ):
            return False  # a handler or the `else:` of a `try`
        if isinstance(parent, ast.BoolOp) and child is not parent.values[0]:
            return False
        if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            if child is not parent.generators[0]:
                return False
        if isinstance(parent, ast.comprehension) and child is not parent.iter:
            return False
        child = parent
    return child is statement


def queues_step_work(file: PythonFile, node: ast.AST) -> bool:
    """A call that queues a step's worth of device work: a backward pass or optimizer step
    (`is_step_marker`), a model's forward (`model(x)`, `self.net(x)`), or a function that steps
    once per call (`self.training_step(batch)`)."""
    if not isinstance(node, ast.Call):
        return False
    if is_step_marker(node):
        return True
    name = terminal_name(node.func)
    if name is not None and _MODEL.search(name):
        return True
    summary = file.summaries.of_call(node)
    return summary is not None and bool(summary.steps)


def step_work_between(file: PythonFile, loop: Loop, earlier: ast.AST, later: ast.AST) -> bool:
    """Some statement of `loop`'s body, written between `earlier` and `later`, queues a step's
    worth of device work (`queues_step_work`); a branch that may not run counts too."""
    start, end = end_position(earlier), position(later)
    return any(
        hasattr(n, "lineno") and start <= position(n) < end and queues_step_work(file, n)
        for n in body_nodes(loop)
        if isinstance(n, ast.Call)
    )


def fills_once(guard: ast.If, around: ast.AST) -> bool:
    """`if self.table is None: self.table = ...`, `if not hasattr(self, "grid"): self.grid =
    ...`, `if key not in self._cache: self._cache[key] = ...`, `if not self.ready: ...
    self.ready = True` (also one side of an `or`: `if self.cache is None or self.cache.shape
    != x.shape:`): the body fills what the test finds missing, and what it fills outlives the
    pass (`_persists`), so it runs once (again only when the test's key changes). A default
    filled per call (`if attention_mask is None: attention_mask = torch.ones(...)` in
    `forward`) is not one: the next call comes without it again."""
    tests = guard.test.values if isinstance(guard.test, ast.BoolOp) else [guard.test]
    if isinstance(guard.test, ast.BoolOp) and not isinstance(guard.test.op, ast.Or):
        tests = [guard.test]
    stored = {
        structure(t)
        for node in guard.body
        for sub in ast.walk(node)
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
    }
    for test in tests:
        missing = _missing(test)
        if (
            missing is not None
            and structure(missing) in stored
            and _persists(missing, guard, around)
        ):
            return True
    return False


def _persists(filled: ast.AST, guard: ast.If, around: ast.AST) -> bool:
    """What `filled` names outlives one pass of `around`: the object's own state (`self.x`,
    `self._cache[k]`), or, in a loop, a name nothing in the loop rebinds but the fill (`mask =
    None` before the loop)."""
    root = filled
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    if root.id in ("self", "cls"):
        return True
    if not isinstance(around, LOOPS):
        return False
    inside_fill = {id(n) for stmt in guard.body for n in ast.walk(stmt)}
    targets = list(ast.walk(around.target)) if isinstance(around, (ast.For, ast.AsyncFor)) else []
    for node in [*targets, *(n for stmt in around.body for n in ast.walk(stmt))]:
        if (
            id(node) not in inside_fill
            and isinstance(node, ast.Name)
            and node.id == root.id
            and isinstance(node.ctx, ast.Store)
        ):
            return False
    return True


def _missing(test: ast.AST) -> ast.AST | None:
    """What `test` checks is not there yet, as the expression a fill would assign."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left  # `x is None`
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Name)
            and inner.func.id == "hasattr"
            and len(inner.args) == 2
            and isinstance(inner.args[1], ast.Constant)
            and isinstance(inner.args[1].value, str)
        ):
            return ast.Attribute(value=inner.args[0], attr=inner.args[1].value, ctx=ast.Load())
        if isinstance(inner, (ast.Name, ast.Attribute)):
            return inner  # `not self.ready`, set in the body
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn):
        return ast.Subscript(value=test.comparators[0], slice=test.left, ctx=ast.Load())
    return None


def filled_once(file: PythonFile, node: ast.AST, stop: ast.AST) -> bool:
    """`node` is in the body of a `fills_once` guard between it and `stop` (a function or a
    loop): a value built on the first call and kept (`if self.table is None: self.table =
    torch.tensor(np_table).to(x.device)`)."""
    child = node
    for parent in file.ancestors(node):
        if parent is stop:
            return False
        if isinstance(parent, ast.If) and any(child is s for s in parent.body):
            if fills_once(parent, stop):
                return True
        child = parent
    return False
