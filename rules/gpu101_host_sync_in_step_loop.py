import ast
import re
from collections.abc import Iterator

from gpulint.diagnostics import Finding, Related
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import Loop, under_branch
from gpulint.frontends.python.model import FUNCTIONS, MemoKey
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.options import off_by_default
from gpulint.frontends.python.summaries import summaries
from gpulint.frontends.python.syncs import (
    READBACK_METHODS,
    data_dependent,
    host_sync,
    implicit_sync,
    python_side,
)
from gpulint.frontends.python.tensors import assigned_values
from gpulint.frontends.python.timing import is_clock
from gpulint.rule import Rule

_BULK = {"`.cpu()`", "`.numpy()`", "`.tolist()`"}
_DEVICE_SYNC = "`torch.cuda.synchronize()`"
_EVENT_METHODS = {"record", "elapsed_time"}


class HostSyncInStepLoop(Rule):
    """
    ## What it does
    Finds a host-device synchronisation that runs on every iteration of a training or evaluation
    step loop: `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `float()`/`int()`/`bool()` of a
    tensor, `print()` of a tensor, `torch.cuda.synchronize()`, and the implicit ones: an f-string
    or `%` formatting of a tensor, `if`/`while`/`assert` on a tensor, `nonzero()`-style ops and
    boolean-mask indexing (their output size is data-dependent). A helper that syncs (`.item()`
    per parameter in `clip_grads()`, a `meter.add(loss)` that calls `.item()`), called every step,
    is reported at the call in the loop with the line that syncs, also through further calls
    and across the modules of the checked tree (imports, `from m import *`, methods of an
    instance built in sight).

    A step loop is a loop whose own body calls `.backward()`, `optimizer.step()` or
    `scaler.step()` (directly or through a function it calls once per iteration: a closure,
    `self.training_step(batch)`), or takes a batch per iteration (iterates a data loader,
    `x, y = get_batch()`) and calls a model. NaN checks (`if not torch.isfinite(loss):`) are
    deliberate and left alone. Calls under a periodic guard
    (`if step % log_every == 0:`, `if should_log:`), before or after the loop, and in tests are
    left alone, and so are conversions of values that are plainly Python numbers. A
    `torch.cuda.synchronize()` next to a clock read or a CUDA event record is there to time the
    step (GPU601 asks for it) and is left alone too.

    Only syncs the default path pays on every step are reported. A helper's sync counts at the
    call only where it runs on every call of the helper (not under an `if` of the helper's,
    unless both sides of that `if` sync, nor past a guard that may return early), where the call itself is not under an `if` in the loop
    (a branch a config value or a flag may never take), and where the caller hands it device
    data (`all_reduce_mean(loss_value)` with `loss_value = loss.item()` gets a Python number). A
    sync that follows an unconditional `torch.cuda.synchronize()` of the same iteration, with
    only host work between them, costs nothing extra: the device is already idle, so the host
    waits for nothing. A value read before the statement that moves its batch to the device
    (`batch = move_to_device(batch, device)`) is still on the CPU. A warm-up loop, a profiler
    pass or a loop under a `--profile`/`--benchmark` flag is opt-in measurement, not a per-step
    cost of training. A block of statements that fill one dict with readbacks of the same kind
    (`metrics["kl"] = kl.item()`, `metrics["entropy"] = ent.item()`...) is one finding, at its
    first line: the first read drains the queue and the fix is one. A sync on a side of an `if` that the script's command-line defaults do not
    take (`if args.caption_dropout > 0:` with `default=0.0`) is not on the default path either,
    unless the README or a launch script in the script's folder passes that option. One line
    with two reads is one finding, and a helper called from several places of one loop is
    reported once, at the first call.

    ## Why is this bad?
    CUDA runs asynchronously: the CPU queues kernels and races ahead. Reading a value back makes
    the CPU wait until every queued kernel has finished, so the GPU drains and idles while Python
    catches up. Once per step, that bubble is paid on every step. On an NVIDIA H200 a small MLP
    step with `.item()` every step took 1,606 µs against 1,399 µs with `.item()` every 50 steps
    (+15%). The slower the host relative to the GPU, the smaller the bubble's share of a step: on
    a host that took twice the GPU's time to issue the step, the same bench measured no
    difference beyond run-to-run spread.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    ```

    ## Use instead
    ```python
    running_loss = torch.zeros((), device="cuda")
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        if step % log_every == 0:
            print(f"loss {running_loss.item() / (step + 1):.4f}")
    ```

    ## References
    - [CUDA semantics: asynchronous execution](https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution)
    - [PyTorch performance tuning guide: avoid unnecessary CPU-GPU synchronization](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    code = "GPU101"
    name = "host-sync-in-step-loop"
    bench = "sync"
    # A step loop cannot exist without one of these.
    triggers = ("backward", "step(", "loader", "Loader", "_batch(", "next(")
    message = (
        "{what} forces a host-device sync on every iteration of the step loop at line {loop}; "
        "keep the value on the device and read it every N steps (`if step % log_every == 0:`)"
    )
    callee_message = (
        "`{callee}()` syncs on every step: {what} at {where}{chain}, in the step loop at line "
        "{loop}; keep the value on the device and read it every N steps"
    )
    tags = ("sync",)

    VALID = [
        # Periodic guard.
        """
import torch
for step, (x, y) in enumerate(train_loader):
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print(loss.item())
""",
        # After the loop.
        """
import torch
for x, y in train_loader:
    loss = model(x.to("cuda"))
    loss.backward()
    optimizer.step()
print(loss.item())
""",
        # A Python number.
        """
import torch
for x in train_loader:
    loss = model(x.cuda())
    loss.backward()
    optimizer.step()
    lr = float(args.lr)
""",
        # A sync that brackets an event timing: the measurement needs it.
        """
import torch
for i in range(iters):
    torch.cuda.synchronize()
    start[i].record()
    out.backward(grad)
    end[i].record()
    torch.cuda.synchronize()
""",
        # A sync before reading the wall clock for the step time.
        """
import time
import torch
for step in range(max_steps):
    t0 = time.time()
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if device_type == "cuda":
        torch.cuda.synchronize()
    dt = time.time() - t0
""",
        # Behind a command-line option that is off by default.
        """
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--caption_dropout", type=float, default=0.0)
args = parser.parse_args()
for x, y in train_loader:
    emb = encoder(x.cuda())
    if args.caption_dropout > 0:
        drop = torch.rand(emb.shape[0], device=emb.device) < args.caption_dropout
        if drop.any():
            emb[drop] = 0
    loss = model(emb, y.cuda())
    loss.backward()
    optimizer.step()
""",
    ]
    INVALID = [
        # A sync with nothing to time.
        """
import torch
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
""",
        """
import torch
for step, (x, y) in enumerate(train_loader):
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    total += loss.item()
""",
        """
import torch
for x, y in loader:
    logits = model(x.to("cuda"))
    correct += (logits.argmax(-1) == y).sum().item()
""",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile) -> Iterator[Finding]:
        if file.is_test or not file.uses_cuda:
            return
        what = self._sync(node, file)
        if what is None:
            yield from self._callee_sync(node, file)
            return
        loop = self._every_step(node, file)
        if loop is None or _loop_control(file, node):
            return
        if what == _DEVICE_SYNC and _times_something(node, file):
            return  # the sync that makes a wall-clock or event timing honest
        if what in _BULK and not file.loops.trains(loop):
            return  # an eval loop copying its outputs to the host: the copy is the point
        if isinstance(node.func, ast.Attribute) and _host_value(file, node.func.value, loop):
            return
        if _after_sync(file, node, loop) or not self._first_on_line(file, node, what=what):
            return
        yield self.report(file, node, what=what, loop=loop.lineno)

    def visit_JoinedStr(self, node: ast.JoinedStr, file: PythonFile) -> Iterator[Finding]:
        """`f"loss {loss:.3f}"`: formatting a tensor reads its value back."""
        if not _printed(file, node):
            yield from self._implicit(node, file)

    def visit_BinOp(self, node: ast.BinOp, file: PythonFile) -> Iterator[Finding]:
        """`"%g" % loss`: as an f-string."""
        if isinstance(node.op, ast.Mod) and not _printed(file, node):
            yield from self._implicit(node, file)

    def visit_If(self, node: ast.If, file: PythonFile) -> Iterator[Finding]:
        yield from self._implicit(node, file)

    def visit_While(self, node: ast.While, file: PythonFile) -> Iterator[Finding]:
        yield from self._implicit(node, file)

    def visit_Assert(self, node: ast.Assert, file: PythonFile) -> Iterator[Finding]:
        yield from self._implicit(node, file)

    def visit_Subscript(self, node: ast.Subscript, file: PythonFile) -> Iterator[Finding]:
        """`logits[labels != -100]`: a boolean mask's result size is read back to the host."""
        if isinstance(node.slice, (ast.Compare, ast.UnaryOp, ast.Call, ast.Name)):
            yield from self._implicit(node, file)

    def _implicit(self, node: ast.AST, file: PythonFile) -> Iterator[Finding]:
        """`if torch.isnan(loss).any():`... (`syncs.implicit_sync`) on every step."""
        if file.is_test or not file.uses_cuda:
            return
        found = implicit_sync(file, node)
        if found is None:
            return
        what, at = found
        loop = self._every_step(at, file)
        if (
            loop is not None
            and not _after_sync(file, at, loop)
            and self._first_on_line(file, at, what=what)
        ):
            yield self.report(file, at, what=what, loop=loop.lineno)

    def _every_step(self, node: ast.AST, file: PythonFile) -> Loop | None:
        loop = file.loops.runs_every_step(node)
        if (
            loop is None
            or _only_when_failing(node, file, loop)
            or _opt_in(file, node, loop)
            or off_by_default(file, node, loop)  # `if args.caption_dropout > 0:`, default 0
        ):
            return None
        return loop

    def _first_on_line(
        self, file: PythonFile, node: ast.AST, key: object = None, what: str = ""
    ) -> bool:
        """One finding per line (`f"{a.item()} {b.item()}"` is one fix), one per block of
        statements filling one dict with readbacks (`m["kl"] = kl.item()` then `m["ent"] =
        ent.item()`...: the first drains the queue, and the fix is one), and one per callee
        sync site per step loop (a helper called from four places of one loop is one fix, in the
        helper; a second training loop that calls it pays it again and is reported there)."""
        seen = file.memo.get(_REPORTED, set)
        line = (getattr(node, "lineno", 0), key)
        if line in seen or (key is not None and key in seen):
            return False
        if key is None and _continues_reported(file, node, seen, what):
            return False
        seen.add(line)
        if key is not None:
            seen.add(key)
        return True

    def _callee_sync(self, node: ast.Call, file: PythonFile) -> Iterator[Finding]:
        """`log_metrics(d)` / `self.clip_grads()` every step, where the callee (or its callee)
        reads a tensor back: reported here, where the loop makes it cost, naming the line."""
        func = node.func
        if isinstance(func, ast.Attribute) and (
            func.attr in READBACK_METHODS
            or not (isinstance(func.value, ast.Name) or _self_attribute(func.value))
        ):
            return  # `x.item()` is the sync itself; `a.b.f()` resolves to nothing we know
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return
        loop = self._every_step(node, file)  # first: the summaries are asked only in loops
        if loop is None:
            return
        summary = summaries(file).of_call(node)
        if summary is None or summary.sync is None:
            return
        site = summary.sync
        if site.what in _BULK and not file.loops.trains(loop):
            return
        if under_branch(file, node, loop) or _host_arguments(file, node):
            return  # a branch the default path may not take; a callee given Python numbers
        if _after_sync(file, node, loop):
            return
        if not self._first_on_line(file, node, (site.path, site.line, loop.lineno)):
            return
        callee = terminal_name(node.func) or "the callee"
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id not in ("self", "cls"):
                callee = f"{func.value.id}.{callee}"  # `meter.add()`, `utils.clip_grads()`
        elif isinstance(func, ast.Attribute) and _self_attribute(func.value):
            callee = f"self.{func.value.attr}.{callee}"  # type: ignore[attr-defined]
        where = f"{_short(site.path, file.display_path)}:{site.line}"
        chain = f" (through {site.via})" if site.via else ""
        yield self.report(
            file,
            node,
            self.callee_message,
            callee=callee,
            what=site.what,
            where=where,
            chain=chain,
            loop=loop.lineno,
            related=(Related(site.path, site.line, site.col, f"{site.what} syncs here"),),
        )

    def _sync(self, node: ast.Call, file: PythonFile) -> str | None:
        func = node.func
        if file.qualname(func) == "torch.cuda.synchronize":
            return _DEVICE_SYNC
        if isinstance(func, ast.Attribute) and func.attr in READBACK_METHODS:
            inner = func.value
            # `x.cpu().numpy()` is one sync: report the first call in the chain only.
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr in READBACK_METHODS
            ):
                return None
        if data_dependent(file, node):
            return "`nonzero()`-style op (a data-dependent shape)"
        what = host_sync(file, node, with_events=False)
        # Event and stream syncs are the timing rules' business; a step loop's cost is the device.
        return None if what == "`synchronize()`" else what


_REPORTED: MemoKey[set] = MemoKey("GPU101 reported lines and callee sites")
# Opt-in measurement paths: a warm-up loop, a profiler pass, a `--benchmark` flag.
_OPT_IN = re.compile(r"warm_?up|profil|benchmark|\bbench\b|\btiming\b", re.IGNORECASE)


def _opt_in(file: PythonFile, node: ast.AST, loop: ast.AST) -> bool:
    """The loop is a warm-up (`for _ in range(warmup_steps)`), or the sync runs under a flag
    that turns on profiling or benchmarking (`if args.profile:`, `with profile(...)`): not a
    per-step cost of training."""
    iterable = getattr(loop, "iter", None)
    if iterable is not None:
        texts = [file.segment(iterable)]
        if isinstance(iterable, ast.Name):
            texts += [
                file.segment(b.value)
                for b in file.model.bindings_of(iterable.id, before=iterable)
                if b.value is not None
            ]
        if any(_OPT_IN.search(t) for t in texts):
            return True
    child = node
    for parent in file.ancestors(node):
        if isinstance(parent, (ast.If, ast.While)) and child is not parent.test:
            if _OPT_IN.search(file.segment(parent.test)):
                return True
        elif isinstance(parent, (ast.With, ast.AsyncWith)):
            if any(_OPT_IN.search(file.segment(item.context_expr)) for item in parent.items):
                return True
        elif isinstance(parent, FUNCTIONS):
            break
        child = parent
    return False


def _host_arguments(file: PythonFile, call: ast.Call) -> bool:
    """Every argument is a Python value already on the host (`all_reduce_mean(loss_value)`
    with `loss_value = loss.item()`): the callee has no device data of the caller's to wait
    for."""
    args = [*call.args, *(k.value for k in call.keywords)]
    func = call.func
    if not args:
        return False
    if isinstance(func, ast.Attribute) and not (
        isinstance(func.value, ast.Name) and func.value.id != "self"
    ):
        return False  # a method of `self` reads the object's tensors too
    return all(_host_scalar(file, a) for a in args)


def _host_scalar(file: PythonFile, expr: ast.AST) -> bool:
    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in {"item", "tolist"}:
            return True
        return isinstance(func, ast.Name) and func.id in {"float", "int", "len", "round"}
    if isinstance(expr, ast.Name):
        bound = file.model.bindings_of(expr.id, before=expr)
        return bool(bound) and all(
            b.value is not None and b.value is not expr and _host_scalar(file, b.value)
            for b in bound
        )
    return False


def _after_sync(file: PythonFile, node: ast.AST, loop: ast.AST) -> bool:
    """An explicit `torch.cuda.synchronize()` earlier in the same iteration, with nothing but
    host work between it and this statement: the device is already idle, so this sync waits
    for nothing."""
    statement: ast.AST = node  # the statement of the loop's body that holds `node`
    for parent in file.ancestors(node):
        if parent is loop:
            break
        statement = parent
    else:
        return False
    block = getattr(loop, "body", None)
    if not isinstance(block, list) or statement not in block:
        return False
    for previous in reversed(block[: block.index(statement)]):
        if (
            isinstance(previous, ast.Expr)
            and isinstance(previous.value, ast.Call)
            and file.qualname(previous.value.func) == "torch.cuda.synchronize"
        ):
            return True
        if not _host_only(file, previous):
            return False
    return False


def _host_only(file: PythonFile, statement: ast.stmt) -> bool:
    """A statement that queues no GPU work: no calls but host bookkeeping (`meter.update(
    loss=loss_value)`, `print(...)`) on Python values."""
    if isinstance(statement, (ast.For, ast.While, ast.With, ast.If, ast.Try)):
        return False
    for sub in ast.walk(statement):
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        if isinstance(func, ast.Attribute) and func.attr in {"item", "tolist"}:
            continue
        args = [*sub.args, *(k.value for k in sub.keywords)]
        if not args or not all(_host_scalar(file, a) or _host_name(file, a) for a in args):
            return False
    return True


def _host_name(file: PythonFile, name: ast.AST) -> bool:
    """`lr = optimizer.param_groups[0]["lr"]`: optimizer settings are Python numbers."""
    if not isinstance(name, ast.Name):
        return False
    bound = file.model.bindings_of(name.id, before=name)
    return bool(bound) and all(
        isinstance(b.value, ast.Subscript) and "param_groups" in file.segment(b.value)
        for b in bound
    )


def _times_something(node: ast.Call, file: PythonFile) -> bool:
    """The sync sits within two statements of a clock read or a CUDA event record/elapsed_time
    in its own block (or, under `if device == "cuda":`, the block around that `if`): it is there
    so the timing measures the device, not the launch queue."""
    statement: ast.AST = node
    for parent in file.ancestors(node):
        if isinstance(statement, ast.stmt):
            block = file.statement_block(statement)
            if block is not None:
                if _timing_near(block, block.index(statement), file):
                    return True
                if not isinstance(parent, ast.If):
                    return False
        statement = parent
    return False


def _timing_near(block: list, at: int, file: PythonFile) -> bool:
    for neighbour in block[max(0, at - 2) : at + 3]:
        if neighbour is block[at] or isinstance(neighbour, (ast.For, ast.While)):
            continue
        for sub in ast.walk(neighbour):
            if not isinstance(sub, ast.Call):
                continue
            if is_clock(file, sub):
                return True
            if isinstance(sub.func, ast.Attribute) and sub.func.attr in _EVENT_METHODS:
                return True
    return False


def _short(path: str, here: str) -> str:
    """The callee's file as a reader finds it: its name when beside this file, else the path."""
    head, _, name = path.rpartition("/")
    return name if head == here.rpartition("/")[0] else path


def _printed(file: PythonFile, node: ast.AST) -> bool:
    """An argument of `print()`: the `print()` finding covers it."""
    parent = file.parent(node)
    return (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Name)
        and parent.func.id == "print"
    )


def _loop_control(file: PythonFile, node: ast.AST) -> bool:
    """`if signal.item() == 0: break`: the value decides whether the loop goes on, so it has
    to be on the host; nothing to defer."""
    child = node
    for parent in file.ancestors(node):
        if isinstance(parent, (ast.If, ast.While)):
            if child is not parent.test:
                return False
            if isinstance(parent, ast.While):
                return True
            return all(isinstance(s, (ast.Break, ast.Return, ast.Continue)) for s in parent.body)
        if isinstance(parent, ast.stmt):
            return False
        child = parent
    return False


def _only_when_failing(node, file: PythonFile, loop) -> bool:
    """Inside a `raise`: runs once, on the way out, not every step."""
    for ancestor in file.ancestors(node):
        if ancestor is loop:
            return False
        if isinstance(ancestor, ast.Raise):
            return True
    return False


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


def _host_value(file: PythonFile, receiver: ast.AST, loop, depth: int = 0) -> bool:
    """The receiver is already on the host: built by `.numpy()`/`.cpu()`/`.tolist()`, or an
    element of the loader's batch that the loop never moves to the device."""
    name = _root_name(receiver)
    if name is None or depth > 3:
        return False
    scope = file.enclosing_function(loop)
    values = assigned_values(file, scope, name.id)
    if values and all(
        v is not None
        and isinstance(v, ast.Call)
        and (
            (isinstance(v.func, ast.Attribute) and v.func.attr in READBACK_METHODS)
            or python_side(file, v)
        )
        for v in values
    ):
        return True
    source = file.loops.iteration_source(name.id, loop)
    if source is not None:
        if source == "batch":
            return not file.loops.moved_to_device(name.id, loop)
        return _host_value(file, source, loop, depth + 1)
    return False


def _continues_reported(file: PythonFile, node: ast.AST, seen: set, what: str) -> bool:
    """`node` is in a statement that fills the same dict as the statement right before it,
    which had a reported sync of the same kind (`metrics["kl"] = kl.item()` then
    `metrics["entropy"] = ent.item()`...): one metrics block, one fix, reported at its first
    line. Marks its own statement, so a block of any length is one finding."""
    statement = next((a for a in [node, *file.ancestors(node)] if isinstance(a, ast.stmt)), None)
    container = _filled_container(statement)
    if statement is None or container is None:
        return False
    seen.add(("statement", id(statement), what, container))
    block = file.statement_block(statement)
    if not block:
        return False
    at = block.index(statement)
    return at > 0 and ("statement", id(block[at - 1]), what, container) in seen


def _filled_container(statement: ast.AST | None) -> str | None:
    """`metrics` for `metrics["loss"] = ...`; None for any other statement."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target = statement.targets[0]
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        return target.value.id
    return None


def _self_attribute(node: ast.AST) -> bool:
    """`self.mp_trainer` in `self.mp_trainer.optimize(opt)`: the object's own helper."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )
