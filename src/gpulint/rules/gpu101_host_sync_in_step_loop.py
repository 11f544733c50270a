import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpulint.diagnostics import Finding, Related
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import Loop, body_nodes, under_branch
from gpulint.frontends.python.model import FUNCTIONS, MemoKey, position
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.options import off_by_default
from gpulint.frontends.python.summaries import summaries
from gpulint.frontends.python.syncs import (
    READBACK_METHODS,
    already_synced,
    data_dependent,
    host_sync,
    implicit_sync,
    python_side,
)
from gpulint.frontends.python.tensors import assigned_values
from gpulint.frontends.python.timing import is_clock
from gpulint.rule import Exemption, Rule

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
    boolean-mask indexing (their output size is data-dependent). A NaN check (`if not
    torch.isfinite(loss):`) is a deliberate guard, not counted as a sync. A helper that syncs
    (`.item()` per parameter in `clip_grads()`, a `meter.add(loss)` that calls `.item()`),
    called every step, is reported at the call in the loop with the line that syncs, also
    through further calls and across the modules of the checked tree (imports, `from m import
    *`, methods of an instance built in sight).

    A step loop is a loop whose own body calls `.backward()`, `optimizer.step()` or
    `scaler.step()` (directly or through a function it calls once per iteration: a closure,
    `self.training_step(batch)`), or takes a batch per iteration (iterates a data loader,
    `x, y = get_batch()`) and calls a model. Every iteration means in the loop's body, not
    before or after the loop, and not under a periodic guard (`if step % log_every == 0:`,
    `if should_log:`).

    A gradient-accumulation block (`if (i + 1) % accum == 0:` that steps the optimizer, or a
    WGAN's `if i % n_critic == 0:` generator turn) is a periodic guard too: it runs once per
    `accum` iterations of the loop, and a sync there shares its wait with that many forward and
    backward passes, as under a `% log_every` guard. Per optimizer step is not per iteration:
    with `accum` 4 the bubble is paid a quarter as often as the loop's own steps. Where the
    count is known to be 1 (a constant, or the option's `default=1`, as in most fine-tuning
    scripts) the block runs on every iteration and its syncs are reported; a `% 2` alternation
    whose `else:` steps another model runs one side on every iteration and is not a guard.

    Only syncs the default path pays on every step are reported. A helper's sync counts at the
    call only where it runs on every call of the helper (not under an `if` of the helper's,
    unless both sides of that `if` sync, nor past a guard that may return early). A value read
    before the statement that moves its batch to the device (`batch = move_to_device(batch,
    device)`) is still on the CPU. Readbacks that follow one another in an iteration are one
    finding, at the first: once the host has waited there, a later readback on every path
    after it, with no forward, backward or optimizer step queued between them (`loss.item()`,
    then `acc.item()`, then a metrics dict), waits only for the few kernels in between. The
    finding names the others (lines, and SARIF related locations); a readback after the next
    forward waits for a whole step again and is its own finding. One line with two reads is
    one finding, and a helper called from several places of one loop is reported once, at the
    first call.

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

    ## Known problems
    Whether a value is a tensor is judged from the module and the callees in sight: a sync on a
    value the rule cannot trace to a torch op, a model call or a tensor method is missed, and a
    flag or a branch it cannot read (a config object, an environment switch) counts as taken.
    A sync a step's own code needs (a data-dependent shape the next op consumes) is reported
    like any other: suppress it where it is meant.

    ## References
    - [CUDA semantics: asynchronous execution](https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution)
    - [PyTorch performance tuning guide: avoid unnecessary CPU-GPU synchronization](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    code = "GPU101"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "host-sync-in-step-loop"
    bench = "sync"
    # A step loop cannot exist without one of these.
    triggers = ("backward", "step(", "loader", "Loader", "_batch(", "next(")
    message = (
        "{what} forces a host-device sync on every iteration of the step loop at line {loop}"
        "{others}; "
        "keep the value on the device and read it every N steps (`if step % log_every == 0:`)"
    )
    callee_message = (
        "`{callee}()` syncs on every step: {what} at {where}{chain}, in the step loop at line "
        "{loop}{others}; keep the value on the device and read it every N steps"
    )
    tags = ("sync",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loop runs a few steps to check results, not to train.",
            """
import torch
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    assert loss.item() < 10
""",
            filename="tests/test_training.py",
        ),
        Exemption(
            "value-on-host",
            "A conversion of a value already on the host (built by `.numpy()`, `.cpu()` or "
            "`.tolist()`, or a batch element the loop never moves to the device): no sync at "
            "all.",
            """
import torch
for x, meta in train_loader:
    loss = model(x.cuda())
    loss.backward()
    optimizer.step()
    ids = meta.tolist()
""",
        ),
        Exemption(
            "loop-control",
            "A readback that decides whether the loop goes on (`if stop.item(): break`, a "
            "`while` on it): the value has to be on the host, nothing to defer.",
            """
import torch
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if loss.item() < target_loss:
        break
""",
        ),
        Exemption(
            "times-the-step",
            "A `torch.cuda.synchronize()` within two statements of a clock read or a CUDA event "
            "record: it is there so the timing measures the device (GPU601 asks for it).",
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
        ),
        Exemption(
            "eval-output-copy",
            "A bulk copy (`.cpu()`, `.numpy()`, `.tolist()`) in a loop that does not train: an "
            "evaluation pass collecting its outputs must copy them to the host anyway.",
            """
import torch
for x, y in val_loader:
    preds = model(x.cuda())
    outputs.append(preds.cpu())
""",
        ),
        Exemption(
            "after-device-sync",
            "A sync that follows an unconditional `torch.cuda.synchronize()` of the same "
            "iteration with only host work between them: the device is idle already, so the "
            "host waits for nothing.",
            """
import time
import torch
for x, y in train_loader:
    t0 = time.time()
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    total += loss.item()
    step_time = time.time() - t0
""",
        ),
        Exemption(
            "only-when-failing",
            "A readback inside a `raise`: it runs once, on the way out, not every step.",
            """
import torch
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if diverged:
        raise RuntimeError(f"diverged: loss {loss.item()}")
""",
        ),
        Exemption(
            "opt-in-measurement",
            "A warm-up loop, a profiler pass, or a loop under a `--profile`/`--benchmark` flag: "
            "opt-in measurement, not a per-step cost of training.",
            """
import torch
for _ in range(warmup_steps):
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    print(loss.item())
""",
        ),
        Exemption(
            "off-by-default-option",
            "A sync on a side of an `if` that the script's command-line defaults do not take "
            "(`if args.caption_dropout > 0:` with `default=0.0`), unless the README or a launch "
            "script in the script's folder passes that option.",
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
        ),
        Exemption(
            "call-under-branch",
            "A call of a syncing helper under an `if` in the loop: a branch a config value or a "
            "flag may never take.",
            """
import torch
def log_metrics(loss):
    print(loss.item())
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if model.training:
        log_metrics(loss)
""",
        ),
        Exemption(
            "callee-given-host-values",
            "A syncing helper the loop hands only Python values (`all_reduce_mean(loss_value)` "
            "with `loss_value = loss.item()`): it has no device data of the caller's to wait "
            "for.",
            """
import torch
import torch.distributed as dist
def all_reduce_mean(value):
    t = torch.tensor(value, device="cuda")
    dist.all_reduce(t)
    return (t / dist.get_world_size()).item()
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    lr = all_reduce_mean(float(args.lr))
""",
        ),
    )

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
        yield from self._emit(self._call_site(node, file), file)

    def visit_JoinedStr(self, node: ast.JoinedStr, file: PythonFile) -> Iterator[Finding]:
        """`f"loss {loss:.3f}"`: formatting a tensor reads its value back."""
        yield from self._emit(self._site(node, file), file)

    def visit_BinOp(self, node: ast.BinOp, file: PythonFile) -> Iterator[Finding]:
        """`"%g" % loss`: as an f-string."""
        yield from self._emit(self._site(node, file), file)

    def visit_If(self, node: ast.If, file: PythonFile) -> Iterator[Finding]:
        yield from self._emit(self._site(node, file), file)

    def visit_While(self, node: ast.While, file: PythonFile) -> Iterator[Finding]:
        yield from self._emit(self._site(node, file), file)

    def visit_Assert(self, node: ast.Assert, file: PythonFile) -> Iterator[Finding]:
        yield from self._emit(self._site(node, file), file)

    def visit_Subscript(self, node: ast.Subscript, file: PythonFile) -> Iterator[Finding]:
        """`logits[labels != -100]`: a boolean mask's result size is read back to the host."""
        yield from self._emit(self._site(node, file), file)

    def _site(self, node: ast.AST, file: PythonFile) -> "_Site | None":
        """The sync `node` is on every step of a step loop, or None. Answers for any node (the
        visitors and the walk over a loop's other syncs ask the same question)."""
        if isinstance(node, ast.Call):
            return self._call_site(node, file)
        if isinstance(node, (ast.JoinedStr, ast.BinOp)):
            if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Mod):
                return None
            return None if _printed(file, node) else self._implicit(node, file)
        if isinstance(node, (ast.If, ast.While, ast.Assert)):
            return self._implicit(node, file)
        if isinstance(node, ast.Subscript) and isinstance(
            node.slice, (ast.Compare, ast.UnaryOp, ast.Call, ast.Name)
        ):
            return self._implicit(node, file)
        return None

    def _call_site(self, node: ast.Call, file: PythonFile) -> "_Site | None":
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return None
        what = self._sync(node, file)
        if what is None:
            return self._callee_site(node, file)
        loop = self._every_step(node, file)
        if loop is None:
            return None
        if self.exempt(
            "value-on-host",
            isinstance(node.func, ast.Attribute) and _host_value(file, node.func.value, loop),
        ):
            return None  # not a sync at all
        # (real syncs, still grouped with the others of the iteration, but not reported)
        exempt = (
            self.exempt("loop-control", _loop_control(file, node))
            or self.exempt("times-the-step", what == _DEVICE_SYNC and _times_something(node, file))
            or self.exempt("eval-output-copy", what in _BULK and not file.loops.trains(loop))
        )
        if self.exempt("after-device-sync", _after_sync(file, node, loop)):
            return None
        return _Site(node, what, loop, reported=not exempt)

    def _implicit(self, node: ast.AST, file: PythonFile) -> "_Site | None":
        """`if torch.isnan(loss).any():`... (`syncs.implicit_sync`) on every step."""
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return None
        found = implicit_sync(file, node)
        if found is None:
            return None
        what, at = found
        loop = self._every_step(at, file)
        if loop is None or self.exempt("after-device-sync", _after_sync(file, at, loop)):
            return None
        return _Site(at, what, loop)

    def _emit(self, site: "_Site | None", file: PythonFile) -> Iterator[Finding]:
        """Report a site that heads its group of syncs (`_groups`), once per line, naming the
        readbacks after it in the iteration that its wait already paid for."""
        if site is None or not site.reported:
            return
        group = _groups(self, file, site.loop).get(_line(site.at))
        if group is None:
            return  # a later readback of a group another sync heads: named in its finding
        if not self._first_on_line(file, site.at, site.key):
            return
        head = _line(site.at)
        others = [s for s in group if _line(s.at) != head]
        text = ""
        related: tuple[Related, ...] = ()
        if others:
            n = len(others)
            lines = ", ".join(str(_line(s.at)) for s in others)
            text = (
                f", and {n} more readback{'s' if n > 1 else ''} in this iteration after it "
                f"(line{'s' if n > 1 else ''} {lines}) cost{'' if n > 1 else 's'} little once "
                "this one has waited"
            )
            related = tuple(
                Related(
                    file.display_path,
                    *file.span(s.at)[:2],
                    f"{s.what}: the host already waited at line {head}",
                    *file.span(s.at)[2:],
                )
                for s in others
            )
        if site.callee is None:
            yield self.report(
                file, site.at, what=site.what, loop=site.loop.lineno, others=text, related=related
            )
            return
        fmt, callee_related = site.callee
        yield self.report(
            file,
            site.at,
            self.callee_message,
            others=text,
            related=callee_related + related,
            **fmt,
        )

    def _every_step(self, node: ast.AST, file: PythonFile) -> Loop | None:
        loop = file.loops.runs_every_step(node)
        if (
            loop is None
            or self.exempt("only-when-failing", _only_when_failing(node, file, loop))
            or self.exempt("opt-in-measurement", _opt_in(file, node, loop))
            # `if args.caption_dropout > 0:` with `default=0.0`
            or self.exempt("off-by-default-option", off_by_default(file, node, loop))
        ):
            return None
        return loop

    def _first_on_line(self, file: PythonFile, node: ast.AST, key: object = None) -> bool:
        """One finding per line (`f"{a.item()} {b.item()}"` is one fix), and one per callee
        sync site per step loop (a helper called from four places of one loop is one fix, in the
        helper; a second training loop that calls it pays it again and is reported there)."""
        seen = file.memo.get(_REPORTED, set)
        line = (getattr(node, "lineno", 0), key)
        if line in seen or (key is not None and key in seen):
            return False
        seen.add(line)
        if key is not None:
            seen.add(key)
        return True

    def _callee_site(self, node: ast.Call, file: PythonFile) -> "_Site | None":
        """`log_metrics(d)` / `self.clip_grads()` every step, where the callee (or its callee)
        reads a tensor back: reported here, where the loop makes it cost, naming the line."""
        func = node.func
        if isinstance(func, ast.Attribute) and (
            func.attr in READBACK_METHODS
            or not (isinstance(func.value, ast.Name) or _self_attribute(func.value))
        ):
            return None  # `x.item()` is the sync itself; `a.b.f()` resolves to nothing we know
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return None
        loop = self._every_step(node, file)  # first: the summaries are asked only in loops
        if loop is None:
            return None
        summary = summaries(file).of_call(node)
        if summary is None or summary.sync is None:
            return None
        site = summary.sync
        if self.exempt("call-under-branch", under_branch(file, node, loop)):
            return None
        if self.exempt("callee-given-host-values", _host_arguments(file, node)):
            return None
        if self.exempt("after-device-sync", _after_sync(file, node, loop)):
            return None
        callee = terminal_name(node.func) or "the callee"
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id not in ("self", "cls"):
                callee = f"{func.value.id}.{callee}"  # `meter.add()`, `utils.clip_grads()`
        elif isinstance(func, ast.Attribute) and _self_attribute(func.value):
            callee = f"self.{func.value.attr}.{callee}"  # type: ignore[attr-defined]
        fmt = {
            "callee": callee,
            "what": site.what,
            "where": f"{_short(site.path, file.display_path)}:{site.line}",
            "chain": f" (through {site.via})" if site.via else "",
            "loop": loop.lineno,
        }
        related = site.chain(f"{site.what} syncs here")
        return _Site(
            node,
            f"`{callee}()`",
            loop,
            reported=not self.exempt(
                "eval-output-copy", site.what in _BULK and not file.loops.trains(loop)
            ),
            key=(site.path, site.line, loop.lineno),
            callee=(fmt, related),
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
_GROUPS: MemoKey[dict] = MemoKey("GPU101 sync groups by step loop")


@dataclass
class _Site:
    """A sync on every step of `loop`: where, what, and whether it is reported (a sync that
    times the step or decides the loop is real but deliberate: it still drains the queue)."""

    at: ast.AST
    what: str
    loop: Loop
    reported: bool = True
    key: object = None  # a callee's sync site: one finding per loop
    callee: tuple[dict, tuple[Related, ...]] | None = None


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def _groups(rule: "HostSyncInStepLoop", file: PythonFile, loop: Loop) -> dict[int, list[_Site]]:
    """The syncs of one iteration of `loop`, grouped: a sync the host already paid for at an
    earlier one on its path (`syncs.already_synced`) joins that one's group. Keyed by the
    line of each group's head, the head's own group; a line not a key is a later member."""
    table = file.memo.get(_GROUPS, dict)
    found = table.get(id(loop))
    if found is not None:
        return found
    sites: dict[int, _Site] = {}  # the first sync of each line
    for node in body_nodes(loop):
        if not isinstance(node, _VISITED):
            continue
        site = rule._site(node, file)
        if site is None or site.loop is not loop:
            continue
        line = _line(site.at)
        if line not in sites or position(site.at) < position(sites[line].at):
            sites[line] = site
    ordered = sorted(sites.values(), key=lambda s: position(s.at))
    heads: dict[int, _Site] = {}  # id of a site -> its group's head
    groups: dict[int, list[_Site]] = {}
    for i, site in enumerate(ordered):
        payer = next((p for p in ordered[:i] if already_synced(file, p.at, site.at, loop)), None)
        head = heads[id(payer)] if payer is not None else site
        heads[id(site)] = head
        groups.setdefault(id(head), []).append(site)
    found = {_line(h.at): groups[id(h)] for h in ordered if heads[id(h)] is h}
    table[id(loop)] = found
    return found


_VISITED = (ast.Call, ast.JoinedStr, ast.BinOp, ast.If, ast.While, ast.Assert, ast.Subscript)
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


def _self_attribute(node: ast.AST) -> bool:
    """`self.mp_trainer` in `self.mp_trainer.optimize(opt)`: the object's own helper."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )
