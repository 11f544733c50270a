import ast
import re

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.timing import (
    CLOCK_TRIGGERS,
    CLOCKS,
    cuda_work,
    intervals,
    position,
    scope_nodes,
)
from gpulint.rule import Exemption, Rule

_WARM = re.compile(r"warm", re.IGNORECASE)
# Calls in a timed loop that are not the work being timed.
_NOT_WORK = {"range", "print", "append", "synchronize", "record", "len", "zero_grad", "update"}


_EPOCH = re.compile(r"epoch", re.IGNORECASE)


def _epoch_loop(loop: ast.For, file: PythonFile) -> bool:
    """`for epoch in range(epochs):`: the clock times a whole training run, where one-time costs
    are a rounding error and the total is what the user wants; not a benchmark."""
    target = loop.target.id if isinstance(loop.target, ast.Name) else ""
    return bool(_EPOCH.search(target) or _EPOCH.search(file.segment(loop.iter)))


class TimedLoopWithoutWarmup(Rule):
    """
    ## What it does
    Finds a timed loop over CUDA work with no warm-up before it: a clock read right before
    `for _ in range(n):` whose body runs CUDA work, the second read after the loop, and no
    earlier untimed call of the same work (or warm-up loop) in the function.

    ## Why is this bad?
    The first calls of CUDA work pay one-time costs: CUDA context and cuBLAS/cuDNN handle
    creation, kernel autotuning and module loading, `torch.compile`/Triton compilation, and the
    caching allocator's first `cudaMalloc`s. Timed together with the steady state, they inflate
    the average by an amount that depends on `n`, so the figure is neither the first-call cost
    nor the per-iteration cost.

    ## Example
    ```python
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(100):
        y = model(x)
    torch.cuda.synchronize()
    per_iter = (time.perf_counter() - start) / 100
    ```

    ## Use instead
    ```python
    for _ in range(10):  # warm-up: compile, autotune, allocate
        model(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(100):
        y = model(x)
    torch.cuda.synchronize()
    per_iter = (time.perf_counter() - start) / 100
    ```
    or `triton.testing.do_bench` / `torch.utils.benchmark.Timer`, which warm up for you.

    ## References
    - [PyTorch benchmark recipe (torch.utils.benchmark warms up)](https://docs.pytorch.org/tutorials/recipes/recipes/benchmark.html)
    - [triton.testing.do_bench (warmup)](https://triton-lang.org/main/python-api/generated/triton.testing.do_bench.html)
    """

    code = "GPU602"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "timed-loop-without-warmup"
    triggers = CLOCK_TRIGGERS
    message = (
        "timed loop over CUDA work with no warm-up: the first iterations include compilation, "
        "autotuning and allocation; run the work a few times untimed before line {line}"
    )
    tags = ("benchmarking",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a timed loop in a test checks a bound, not a benchmark figure.",
            "import time\nimport torch\ndef test_speed(model, x):\n    t0 = time.perf_counter()\n"
            "    for _ in range(100):\n        y = model(x)\n    torch.cuda.synchronize()\n"
            "    assert time.perf_counter() - t0 < 1.0\n",
            filename="tests/test_speed.py",
        ),
        Exemption(
            "training-run",
            "A clock around a whole training run (`for epoch in range(epochs):`): it reports "
            "the run's total time, where one-time costs are a rounding error.",
            "import time\nimport torch\ndef fit(model, loader, epochs):\n    start = time.time()\n"
            "    for epoch in range(epochs):\n        for x, y in loader:\n"
            "            model(x.cuda()).sum().backward()\n    print(time.time() - start)\n",
        ),
        Exemption(
            "warmup-parameter",
            "A function with a parameter named for a warm-up (`warmup`, `warmed_up`): a timing "
            "helper whose caller warms up.",
            "import time\nimport torch\ndef timed(model, x, iters, warmed_up=True):\n"
            "    t0 = time.perf_counter()\n    for _ in range(iters):\n        model(x)\n"
            "    torch.cuda.synchronize()\n    return (time.perf_counter() - t0) / iters\n",
        ),
    )

    VALID = [
        "import time\nimport torch\ndef bench(model, x):\n    for _ in range(5):\n        model(x)\n"
        "    torch.cuda.synchronize()\n    t0 = time.perf_counter()\n    for _ in range(100):\n"
        "        model(x)\n    torch.cuda.synchronize()\n    return time.perf_counter() - t0\n",
        "import time\nimport torch\ndef bench(model, x, warmup=10):\n    for _ in range(warmup):\n"
        "        model(x)\n    t0 = time.perf_counter()\n    for _ in range(100):\n"
        "        model(x)\n    torch.cuda.synchronize()\n    return time.perf_counter() - t0\n",
        # CPU-only work.
        "import time\ndef bench(f):\n    t0 = time.perf_counter()\n    for _ in range(100):\n"
        "        f()\n    return time.perf_counter() - t0\n",
    ]
    INVALID = [
        "import time\nimport torch\ndef bench(model, x):\n    torch.cuda.synchronize()\n"
        "    t0 = time.perf_counter()\n    for _ in range(100):\n        y = model(x)\n"
        "    torch.cuda.synchronize()\n    return (time.perf_counter() - t0) / 100\n",
    ]

    def visit_Module(self, node: ast.Module, file: PythonFile):
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return
        for interval in intervals(file):
            loop = self._timed_loop(interval, file)
            if loop is None or self.exempt("training-run", _epoch_loop(loop, file)):
                continue
            work = [n for n in ast.walk(loop) if cuda_work(file, n, interval.scope)]
            if not work:
                continue
            if self._warmed_up(interval, loop, work, file):
                continue
            if self.exempt("warmup-parameter", _warmup_parameter(interval.scope)):
                continue
            yield self.report(file, loop, line=loop.lineno)

    @staticmethod
    def _timed_loop(interval, file: PythonFile) -> ast.For | None:
        """`t0 = clock()` followed directly by `for _ in range(...)`, the second read after it."""
        statement = file.parent(interval.start)
        if not isinstance(statement, ast.Assign):
            return None
        siblings = file.statement_block(statement)
        if siblings is None:
            return None
        index = siblings.index(statement)
        following = siblings[index + 1] if index + 1 < len(siblings) else None
        if (
            isinstance(following, ast.For)
            and isinstance(following.iter, ast.Call)
            and terminal_name(following.iter.func) == "range"
            and position(interval.end) > (following.end_lineno, following.end_col_offset)
        ):
            return following
        return None

    @staticmethod
    def _warmed_up(interval, loop, work, file: PythonFile) -> bool:
        names = {
            file.segment(n.func)
            for n in ast.walk(loop)
            if isinstance(n, ast.Call)
            and terminal_name(n.func) not in _NOT_WORK
            and file.qualname(n) not in CLOCKS
        }
        names |= {file.segment(n.func) for n in work}
        for node in scope_nodes(interval.scope):
            if not hasattr(node, "lineno") or position(node) >= position(interval.start):
                continue
            if isinstance(node, ast.Call) and file.segment(node.func) in names:
                return True
            if isinstance(node, ast.Name) and _WARM.search(node.id):
                return True
            if isinstance(node, ast.Attribute) and _WARM.search(node.attr):
                return True
            if isinstance(node, ast.Call) and _WARM.search(terminal_name(node.func) or ""):
                return True
        return False


def _warmup_parameter(scope: ast.AST) -> bool:
    """The function itself may be a warmed-up helper: `warmup` anywhere in its parameters."""
    args = getattr(scope, "args", None)
    return bool(args and any(_WARM.search(a.arg) for a in [*args.args, *args.kwonlyargs]))
