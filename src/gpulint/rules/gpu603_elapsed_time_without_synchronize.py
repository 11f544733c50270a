import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.model import position
from gpulint.frontends.python.timing import first_sync
from gpulint.rule import Exemption, Rule

_EVENT = {"torch.cuda.Event", "torch.cuda.streams.Event", "torch.Event"}


class ElapsedTimeWithoutSynchronize(Rule):
    """
    ## What it does
    Finds `start.elapsed_time(end)` on CUDA events (`torch.cuda.Event(enable_timing=True)`)
    read with no `synchronize()` before it in the same function: not on the end event, the
    stream, or the device.

    ## Why is this bad?
    `end.record()` only queues a marker on the stream; it completes when the GPU reaches it.
    Reading `elapsed_time` before then raises `RuntimeError: CUDA error: device not ready`, or,
    when the work happens to be finished, works by luck and fails on a busier GPU. Wait for the
    end event first.

    ## Example
    ```python
    start.record()
    out = model(x)
    end.record()
    ms = start.elapsed_time(end)
    ```

    ## Use instead
    ```python
    start.record()
    out = model(x)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    ```

    ## References
    - [torch.cuda.Event.elapsed_time](https://docs.pytorch.org/docs/stable/generated/torch.cuda.Event.html)
    - [CUDA semantics: asynchronous execution](https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution)
    """

    code = "GPU603"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "elapsed-time-without-synchronize"
    triggers = ("elapsed_time",)
    message = (
        "`elapsed_time` read with no `synchronize()` before it: the end event may not have "
        "completed; call `{end}.synchronize()` (or `torch.cuda.synchronize()`) first"
    )
    tags = ("benchmarking",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test that reads an event pair checks the API, not a measurement.",
            "import torch\ndef test_events():\n    start = torch.cuda.Event(enable_timing=True)\n"
            "    end = torch.cuda.Event(enable_timing=True)\n    start.record()\n"
            "    end.record()\n    assert start.elapsed_time(end) >= 0\n",
            filename="tests/test_events.py",
        ),
        Exemption(
            "events-of-unknown-origin",
            "Events the file does not show being made by `torch.cuda.Event(...)` (function "
            "parameters, attributes never assigned one): the caller may have synchronised them.",
            "def report(start, end):\n    return start.elapsed_time(end)\n",
        ),
        Exemption(
            "closure-in-syncing-function",
            "A closure (`def elapsed(): return start.elapsed_time(end)`) in a function that "
            "synchronises: the function around it may wait before calling it.",
            "import torch\ndef bench(f):\n    start = torch.cuda.Event(enable_timing=True)\n"
            "    end = torch.cuda.Event(enable_timing=True)\n"
            "    def elapsed():\n        return start.elapsed_time(end)\n"
            "    start.record()\n    f()\n    end.record()\n    torch.cuda.synchronize()\n"
            "    return elapsed()\n",
        ),
        Exemption(
            "events-on-self-synced-in-class",
            "Events kept on `self` in a class that synchronises in another method: they are "
            "recorded and waited for there.",
            """
import torch
class Timer:
    def __init__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
    def stop(self):
        self.end.record()
        self.end.synchronize()
    def elapsed(self):
        return self.start.elapsed_time(self.end)
""",
        ),
    )

    VALID = [
        "import torch\nstart = torch.cuda.Event(enable_timing=True)\nend = torch.cuda.Event(enable_timing=True)\n"
        "def bench(f):\n    start.record()\n    f()\n    end.record()\n    end.synchronize()\n"
        "    return start.elapsed_time(end)\n",
        "import torch\ndef bench(f):\n    s, e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]\n"
        "    s.record()\n    f()\n    e.record()\n    torch.cuda.synchronize()\n    return s.elapsed_time(e)\n",
    ]
    INVALID = [
        "import torch\ndef bench(f):\n    start = torch.cuda.Event(enable_timing=True)\n"
        "    end = torch.cuda.Event(enable_timing=True)\n    start.record()\n    f()\n    end.record()\n"
        "    return start.elapsed_time(end)\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != "elapsed_time":
            return
        if self.exempt("test-code", file.is_test):
            return
        if self.exempt("events-of-unknown-origin", not self._is_event(func.value, file)):
            return
        scope = file.enclosing_function(node)
        root = scope if scope is not None else file.tree
        first = first_sync(file, root)
        if first is not None and first < position(node):
            return
        # A closure (`def elapsed(): return start.elapsed_time(end)`) is called by the function
        # around it, which may synchronise before calling it.
        for outer in file.ancestors(root):
            if self.exempt(
                "closure-in-syncing-function",
                isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef))
                and first_sync(file, outer, nested=True) is not None,
            ):
                return
        # Events kept on `self` are recorded and synchronised in other methods of the class.
        if _base(func.value) == "self":
            cls = next((a for a in file.ancestors(node) if isinstance(a, ast.ClassDef)), None)
            if self.exempt(
                "events-on-self-synced-in-class",
                cls is None or first_sync(file, cls, nested=True) is not None,
            ):
                return
        end = node.args[0] if node.args else None
        yield self.report(file, node, end=file.segment(end) if end is not None else "end")

    @staticmethod
    def _is_event(receiver: ast.AST, file: PythonFile) -> bool:
        """The receiver is bound to `torch.cuda.Event(...)` where it is read (its own scope or
        an enclosing one), directly, through a list of events, or as the loop variable over such
        a list; an attribute (`self.start`), where the file assigns events to it. Parameters are
        unknown."""
        while isinstance(receiver, ast.Subscript):
            receiver = receiver.value
        if isinstance(receiver, ast.Attribute):
            return any(
                _makes_event(file, store.node.value)
                for store in file.model.attribute_stores(receiver.attr)
            )
        return isinstance(receiver, ast.Name) and _name_is_event(file, receiver)


def _base(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _makes_event(file: PythonFile, value: ast.AST | None) -> bool:
    return value is not None and any(
        isinstance(c, ast.Call) and file.qualname(c) in _EVENT for c in ast.walk(value)
    )


def _name_is_event(file: PythonFile, name: ast.Name, depth: int = 0) -> bool:
    """`name` as read here is bound to events, by the model's bindings in the scope it resolves
    to: `start = torch.cuda.Event(...)`, `starts = [Event() ...]`, or `for s, e in zip(starts,
    ends)` over such names. A parameter of that scope makes it unknown."""
    model = file.model
    scope = model.defining_scope(name.id, name)
    if scope is None:
        return False
    bound = model.bindings_in(scope, name.id)
    if any(b.kind == "param" for b in bound):
        return False
    for b in bound:
        if b.kind in ("assign", "annassign") and _makes_event(file, getattr(b.node, "value", None)):
            return True
        if b.kind == "for" and depth < 3 and isinstance(b.node, (ast.For, ast.comprehension)):
            if any(
                isinstance(n, ast.Name) and _name_is_event(file, n, depth + 1)
                for n in ast.walk(b.node.iter)
            ):
                return True
    return False
