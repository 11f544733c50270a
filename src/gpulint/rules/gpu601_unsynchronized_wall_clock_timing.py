import ast
import re
from collections.abc import Iterator

from gpulint.diagnostics import Finding, Related
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import is_step_marker
from gpulint.frontends.python.model import scope_nodes
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.summaries import summaries
from gpulint.frontends.python.timing import (
    CLOCK_TRIGGERS,
    TIMEIT,
    TIMER_NAME_TRIGGERS,
    callable_body,
    cuda_work,
    intervals,
    is_clock,
    is_sync,
    spans_training_steps,
    timed_body,
    timing_decorator,
)
from gpulint.rule import Exemption, Rule

# `if device == "cpu":` / `if not torch.cuda.is_available():`: the work in there is CPU work.
_CPU_TEST = re.compile(r"""["']cpu["']|not\s+torch\.cuda\.is_available""")
# An argument that is the whole model: the callee may run (and sync) anything on it.
_MODEL_ARG = re.compile(r"^(model|net|module|pipe|pipeline)$|_model$", re.IGNORECASE)
# Callees that run whole loops of their own (and log, evaluate, sync inside): opaque.
_DRIVER = re.compile(r"train|eval|valid|test|epoch|fit|benchmark|bench|profile|loop", re.IGNORECASE)
# Searches and tuners return host values (a permutation, the best config and its timings) they
# can only compute once the device has finished; `mp.spawn(..., join=True)` waits for its
# processes to exit. Whatever they launch, the clock after them reads finished work.
_HOST_RESULT = re.compile(r"search|permut|autotune|tuner?$|policy|^spawn$", re.IGNORECASE)


class UnsynchronizedWallClockTiming(Rule):
    """
    ## What it does
    Finds wall-clock timing (`time.time()`, `time.perf_counter()`, `time.monotonic()`,
    `timeit.default_timer()`) around CUDA work, with no `torch.cuda.synchronize()`, event or
    stream `.synchronize()`, or other host sync (`.item()`, `.cpu()`, `.tolist()`, boolean-mask
    indexing, `nonzero()`...) between the work and the second clock read, in one function. CUDA
    work is a model call, `.backward()`, an optimizer step, a `non_blocking` copy to the device,
    a Triton launch, or a torch op (not a tensor factory) in a function that uses CUDA. Also
    `timeit.timeit`/`timeit.repeat`/`timeit.Timer` of a callable (a lambda, or a function of the
    file) or of a string statement (`timeit.timeit("forward()", globals=globals())`, names
    resolved through `globals()`, `locals()`, a `globals` dict or `setup="from __main__ import
    ..."`) that does CUDA work and never syncs, and the same through a helper of the project that
    reads the clock before and after calling a callable it is given (`bench(lambda: model(x))`),
    and a callback that opens an interval in one per-step hook and closes it in its pair
    (`on_train_batch_start` -> `on_train_batch_end`, `on_step_begin` -> `on_step_end`,
    `pre_step` -> `post_step`) with no sync in the closing hook, and a function that does CUDA
    work under a timing decorator (`@timed` or `@timed("name")`, whose wrapper reads the clock
    around the call) with no sync on either side: one of the file, or one imported from another
    module of the checked tree (`from utils import timed`), whose clock reads the finding points
    at. A file that only applies an imported decorator is read where the decorator's name says it
    times (`timed`, `timer`, `timing`, `elapsed`...).

    A sync anywhere in the interval counts, also one that Hugging Face `generate()` or a
    `pipeline` call does on its own; modules without CUDA are not checked.

    ## Why is this bad?
    CUDA calls return as soon as the kernel is queued. Without a sync, the second clock read
    measures how long Python took to launch the kernels, not how long the GPU took to run them;
    the number is too small by an arbitrary amount and moves with the queue depth. Whatever runs
    next then absorbs the missing time, so even neighbouring measurements are wrong.

    ## Example
    ```python
    start = time.perf_counter()
    out = model(x)
    elapsed = time.perf_counter() - start
    ```

    ## Use instead
    ```python
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model(x)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    ```
    or time on the device with `torch.cuda.Event(enable_timing=True)`, or use
    `torch.utils.benchmark.Timer` / `triton.testing.do_bench`, which synchronise for you.

    ## References
    - [CUDA semantics: asynchronous execution (timing with events and synchronize)](https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution)
    - [PyTorch benchmark recipe (torch.utils.benchmark)](https://docs.pytorch.org/tutorials/recipes/recipes/benchmark.html)
    - [triton.testing.do_bench](https://triton-lang.org/main/python-api/generated/triton.testing.do_bench.html)
    """

    code = "GPU601"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "unsynchronized-wall-clock-timing"
    triggers = (*CLOCK_TRIGGERS, "timeit", *TIMER_NAME_TRIGGERS)
    helper_message = (
        "`{helper}()` reads the wall clock around the callable it is given, and neither syncs: "
        "the time is that of the kernel launches, not their execution; end the callable with "
        "`torch.cuda.synchronize()` or time it with `torch.utils.benchmark.Timer`"
    )
    decorator_message = (
        "`@{helper}` reads the wall clock before and after `{function}()` runs, and neither "
        "syncs: the time is that of its kernel launches, not their execution; call "
        "`torch.cuda.synchronize()` in the wrapper before its second clock read (or time with "
        "`torch.cuda.Event`s)"
    )
    hook_message = (
        "interval opened in `{opening}()` and closed in `{closing}()` with no sync: the step "
        "the framework runs between the two hooks is only queued on the GPU when `{closing}()` "
        "reads the clock; call `torch.cuda.synchronize()` before that read (or record "
        "`torch.cuda.Event`s in both hooks)"
    )
    timeit_message = (
        "`{call}` times CUDA work with no sync in what it times: it measures kernel "
        "launches, not execution; end the timed code with `torch.cuda.synchronize()` or use "
        "`torch.utils.benchmark.Timer`, which synchronises"
    )
    message = (
        "wall-clock read of CUDA work started at line {line} with no sync before it: it measures "
        "kernel launches, not execution; call `torch.cuda.synchronize()` before reading the clock "
        "(or time with `torch.cuda.Event(enable_timing=True)`)"
    )
    tags = ("benchmarking",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a clock in a test checks a bound or logs, not a benchmark figure.",
            "import time\nimport torch\ndef test_speed(model, x):\n    t0 = time.perf_counter()\n"
            "    y = model(x.cuda())\n    assert time.perf_counter() - t0 < 1.0\n",
            filename="tests/test_speed.py",
        ),
        Exemption(
            "cpu-branch",
            'An interval under `if device == "cpu":` (or the `else` of a CUDA test): the work '
            "there runs on the CPU.",
            """
import time
import torch
def bench(model, x, device):
    if device == "cpu":
        t0 = time.perf_counter()
        y = model(x)
        return time.perf_counter() - t0
    return do_bench(lambda: model(x.cuda()))
""",
        ),
        Exemption(
            "whole-training-steps",
            "An interval over whole training steps (a forward pass and a backward pass or "
            "optimizer step): in steady state the device paces the step loop, so per-step times "
            "and totals come out right.",
            """
import time
import torch
def train_step(model, x, y, optimizer):
    t0 = time.time()
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    return time.time() - t0
""",
        ),
        Exemption(
            "tick-timer",
            "A tick timer over a training loop (the second read in a loop that trains, the "
            "first outside it or reset after the report, as in `tick_start_time = time.time()` "
            "... `sec/tick`): each interval spans a run of whole steps, off by at most the launch "
            "queue's depth.",
            fixture="python/gpu601_silent_tick_timer.py",
        ),
        Exemption(
            "opaque-callee",
            "An interval that calls something that may sync on its own: a callee that runs a "
            "loop of its own (`train_one_epoch(...)`, `evaluate(...)`), a helper handed the whole "
            "model, a search or tuner that returns host values, `mp.spawn(..., join=True)`.",
            fixture="python/gpu601_silent_opaque_host_results.py",
        ),
    )

    VALID = [
        "import time\nimport torch\ndef bench(model, x):\n    torch.cuda.synchronize()\n"
        "    t0 = time.perf_counter()\n    y = model(x.cuda())\n    torch.cuda.synchronize()\n"
        "    return time.perf_counter() - t0\n",
        "import time\nimport torch\ndef step(model, x):\n    t0 = time.time()\n    loss = model(x.cuda())\n"
        "    print(loss.item())\n    dt = time.time() - t0\n",
        # CPU-only work.
        "import time\ndef load(path):\n    t0 = time.time()\n    data = read(path)\n    return time.time() - t0\n",
    ]
    INVALID = [
        "import time\nimport torch\ndef bench(model, x):\n    t0 = time.perf_counter()\n"
        "    y = model(x.cuda())\n    return time.perf_counter() - t0\n",
        "import torch\nfrom timeit import default_timer as timer\nstart = timer()\n"
        "for _ in range(10):\n    out = net(inputs.to(device))\nend = timer()\nprint(end - start)\n",
        "import timeit\nimport torch\nx = torch.randn(64, 64, device='cuda')\n"
        "print(timeit.timeit(lambda: model(x), number=100))\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile) -> Iterator[Finding]:
        """`timeit.timeit(lambda: model(x), number=100)`, `timeit.Timer(run).timeit(10)`, and
        a helper of the project that reads a clock around a callable it is given
        (`bench(lambda: model(x))`)."""
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return
        q = file.qualname(node)
        if q in TIMEIT:
            body = timed_body(file, node)
            if body is not None and self._unsynced_work(file, body, node):
                yield self.report(file, node, self.timeit_message, call=q)
            return
        if q is not None or not any(isinstance(a, (ast.Lambda, ast.Name)) for a in node.args):
            return
        # The callables passed first (a lambda, a def of this file): most calls pass tensors,
        # and the helper's summary (its module's, for a call out of the file) is not needed.
        bodies = [callable_body(file, arg, node) for arg in node.args]
        if all(body is None for body in bodies):
            return
        summary = summaries(file).of_call(node)
        if summary is None or not summary.times:
            return
        for body in bodies:
            if body is not None and self._unsynced_work(file, body, node):
                helper = terminal_name(node.func) or "the helper"
                yield self.report(file, node, self.helper_message, helper=helper)
                return

    @staticmethod
    def _unsynced_work(file: PythonFile, body: list[ast.AST], at: ast.Call) -> bool:
        scope = file.enclosing_function(at) or file.tree
        return any(cuda_work(file, n, scope) for n in body) and not any(
            is_sync(file, n) for n in body
        )

    def visit_FunctionDef(self, node: ast.FunctionDef, file: PythonFile) -> Iterator[Finding]:
        """`@timed` on a function that does CUDA work and never syncs, where `timed` is a
        decorator of this file whose wrapper reads the clock around the wrapped call."""
        if self.exempt("test-code", file.is_test) or not file.uses_cuda or not node.decorator_list:
            return
        for decorator in node.decorator_list:
            clocks = _timing_decorator(file, decorator)
            if clocks is None:
                continue
            body = list(scope_nodes(node))
            if any(cuda_work(file, n, node) for n in body) and not any(
                is_sync(file, n) for n in body
            ):
                helper = file.segment(
                    decorator.func if isinstance(decorator, ast.Call) else decorator
                )
                yield self.report(
                    file,
                    decorator,
                    self.decorator_message,
                    helper=helper,
                    function=node.name,
                    related=clocks,
                )
                return

    def visit_ClassDef(self, node: ast.ClassDef, file: PythonFile) -> Iterator[Finding]:
        """A callback that opens an interval in one per-step hook and closes it in its pair
        (`on_train_batch_start` -> `on_train_batch_end`, `pre_step` -> `post_step`): the
        framework runs the step between them, and at the closing hook it is only queued."""
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        for name, opening in methods.items():
            closing = methods.get(_closing_hook(name) or "")
            if closing is None:
                continue
            # `now() - self.t0` in the closing hook, with `self.t0 = now()` in the opening one
            # (the model's attribute stores say where each `self.t0` was assigned).
            model = file.model
            ends = [
                sub
                for sub in scope_nodes(closing)
                if isinstance(sub, ast.BinOp)
                and isinstance(sub.op, ast.Sub)
                and isinstance(sub.right, ast.Attribute)
                and isinstance(sub.right.value, ast.Name)
                and sub.right.value.id == "self"
                and is_clock(file, sub.left)
                and any(
                    isinstance(store.target.value, ast.Name)
                    and store.target.value.id == "self"
                    and model.scope_of(store.node) is opening
                    and isinstance(store.node, ast.Assign)
                    and store.value is not None
                    and is_clock(file, store.value)
                    for store in model.attribute_stores(sub.right.attr)
                )
            ]
            if not ends or any(is_sync(file, n) for n in scope_nodes(closing)):
                continue  # the closing hook waits for the device (a sync, `.item()`...)
            yield self.report(
                file,
                ends[0],
                self.hook_message,
                opening=name,
                closing=closing.name,
            )

    def visit_Module(self, node: ast.Module, file: PythonFile):
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return
        for interval in intervals(file):
            region = interval.region(file)
            work = [n for n in region if cuda_work(file, n, interval.scope)]
            if not work:
                continue
            if self.exempt("cpu-branch", _cpu_branch(file, interval.end)):
                continue
            # Timing whole training steps (forward, backward, optimizer step): in steady state the
            # step loop is paced by the device (the launch queue fills), so per-step times and
            # running totals come out right. Timing the backward alone does not.
            if self.exempt(
                "whole-training-steps", _whole_steps(file, region, interval.scope)
            ) or self.exempt("tick-timer", spans_training_steps(file, interval)):
                continue
            if self.exempt(
                "opaque-callee", any(_opaque_driver(file, n, interval.scope) for n in region)
            ):
                continue
            # Any sync in the interval counts: inside loops "before" and "after" the work overlap.
            if any(is_sync(file, n) for n in region):
                continue
            yield self.report(file, interval.end, line=interval.start.lineno)


# Per-step hook pairs of training frameworks' callbacks (Lightning, Hugging Face, mmengine,
# olmo-core, Composer...): the opening hook's name and the closing one's differ only here.
_HOOK_PAIRS = (
    (re.compile(r"^(on_\w*(?:batch|step|iter)\w*)_(?:start|begin)$"), r"\1_end"),
    (re.compile(r"^pre_(\w*(?:batch|step|iter)\w*)$"), r"post_\1"),
    (re.compile(r"^before_(\w*(?:batch|step|iter)\w*)$"), r"after_\1"),
)


def _timing_decorator(file: PythonFile, decorator: ast.expr) -> tuple[Related, ...] | None:
    """The clock reads of a timing decorator (`timing.timing_decorator`): `@timed` or
    `@timed("fwd")` with `timed` a def of this file, else one imported from another module of
    the tree (`from utils import timed`, `@utils.timed`), as the project index reads it."""
    factory = isinstance(decorator, ast.Call)
    named = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(named, ast.Name):
        bound = file.model.bindings_of(named.id, before=named)
        if len(bound) == 1 and bound[0].kind == "def":
            return timing_decorator(file, bound[0].node, factory)
    if file.project is not None and isinstance(named, (ast.Name, ast.Attribute)):
        return file.project.timing_decorator(file, named, factory)
    return None


def _closing_hook(name: str) -> str | None:
    """`on_train_batch_start` -> `on_train_batch_end`, `pre_step` -> `post_step`,
    `before_train_iter` -> `after_train_iter`; per step only (an epoch's time is right in
    steady state, the queue being a few steps deep)."""
    for pattern, closing in _HOOK_PAIRS:
        if pattern.match(name):
            return pattern.sub(closing, name)
    return None


def _opaque_driver(file: PythonFile, node: ast.AST, scope: ast.AST) -> bool:
    """`train_one_epoch(...)`, `evaluate(...)`: a callee that runs (and syncs) a loop of its own."""
    if not isinstance(node, ast.Call):
        return False
    name = terminal_name(node.func) or ""
    if _HOST_RESULT.search(name) and not (file.qualname(node) or "").startswith("torch.cuda"):
        return _joined(node) if name == "spawn" else True
    if cuda_work(file, node, scope):
        return False
    if name in {"train", "eval"} and isinstance(node.func, ast.Attribute):
        return False  # model.train() / model.eval(): a mode switch
    if _DRIVER.search(name):
        return True
    # `quantize_(model, config)`, `sequential_quantize(model, data)`: a helper that takes the
    # whole model may run anything on it, syncs included; not torch's own ops.
    if (file.qualname(node) or "").startswith("torch."):
        return False
    return any(
        isinstance(a, (ast.Name, ast.Attribute)) and _MODEL_ARG.search(terminal_name(a) or "")
        for a in [*node.args, *(k.value for k in node.keywords)]
    )


def _joined(spawn: ast.Call) -> bool:
    """`mp.spawn(fn, ..., join=True)` (the default) waits for the processes; `join=False` does not."""
    join = keyword(spawn, "join")
    return join is None or not (isinstance(join.value, ast.Constant) and join.value.value is False)


def _cpu_branch(file: PythonFile, node: ast.AST) -> bool:
    """Inside `if device == "cpu":` (or the else of a CUDA test): CPU work."""
    child = node
    for parent in file.ancestors(node):
        if isinstance(parent, ast.If):
            test = file.segment(parent.test)
            if child in parent.body and _CPU_TEST.search(test):
                return True
            if child in parent.orelse and "cuda" in test and "not " not in test:
                return True
        child = parent
    return False


def _whole_steps(file: PythonFile, region: list, scope: ast.AST) -> bool:
    """The interval holds a forward pass and a backward pass or optimizer step."""
    if not any(is_step_marker(n) for n in region):
        return False
    return any(
        cuda_work(file, n, scope)
        and not is_step_marker(n)
        and _MODEL_ARG.search(terminal_name(n.func) or "")
        or isinstance(n, ast.Call)
        and (terminal_name(n.func) or "").lower() in {"model", "forward"}
        for n in region
        if isinstance(n, ast.Call)
    )
