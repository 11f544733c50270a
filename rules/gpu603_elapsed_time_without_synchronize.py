import ast

from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.timing import is_sync, position, scope_nodes
from gpulint.rule import Rule

_EVENT = {"torch.cuda.Event", "torch.cuda.streams.Event", "torch.Event"}


class ElapsedTimeWithoutSynchronize(Rule):
    """
    ## What it does
    Finds `start.elapsed_time(end)` on CUDA events (`torch.cuda.Event(enable_timing=True)`)
    read with no `synchronize()` before it in the same function: not on the end event, the
    stream, or the device. Events whose origin is unknown (function parameters) are left alone.

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
    name = "elapsed-time-without-synchronize"
    triggers = ("elapsed_time",)
    message = (
        "`elapsed_time` read with no `synchronize()` before it: the end event may not have "
        "completed; call `{end}.synchronize()` (or `torch.cuda.synchronize()`) first"
    )
    tags = ("benchmarking",)

    VALID = [
        "import torch\nstart = torch.cuda.Event(enable_timing=True)\nend = torch.cuda.Event(enable_timing=True)\n"
        "def bench(f):\n    start.record()\n    f()\n    end.record()\n    end.synchronize()\n"
        "    return start.elapsed_time(end)\n",
        "import torch\ndef bench(f):\n    s, e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]\n"
        "    s.record()\n    f()\n    e.record()\n    torch.cuda.synchronize()\n    return s.elapsed_time(e)\n",
        # Unknown events.
        "def report(start, end):\n    return start.elapsed_time(end)\n",
    ]
    INVALID = [
        "import torch\ndef bench(f):\n    start = torch.cuda.Event(enable_timing=True)\n"
        "    end = torch.cuda.Event(enable_timing=True)\n    start.record()\n    f()\n    end.record()\n"
        "    return start.elapsed_time(end)\n",
    ]

    def visit_Call(self, node: ast.Call, file):
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != "elapsed_time" or file.is_test:
            return
        if not self._is_event(func.value, file):
            return
        scope = file.enclosing_function(node)
        root = scope if scope is not None else file.tree
        if any(
            hasattr(n, "lineno") and position(n) < position(node) and is_sync(file, n)
            for n in scope_nodes(root)
        ):
            return
        # A closure (`def elapsed(): return start.elapsed_time(end)`) is called by the function
        # around it, which may synchronise before calling it.
        for outer in file.ancestors(root):
            if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                is_sync(file, n) for n in ast.walk(outer)
            ):
                return
        # Events kept on `self` are recorded and synchronised in other methods of the class.
        if _base(func.value) == "self":
            cls = next((a for a in file.ancestors(node) if isinstance(a, ast.ClassDef)), None)
            if cls is None or any(is_sync(file, n) for n in ast.walk(cls)):
                return
        end = node.args[0] if node.args else None
        yield self.report(file, node, end=file.segment(end) if end is not None else "end")

    @staticmethod
    def _is_event(receiver: ast.AST, file) -> bool:
        """The receiver's name is bound to `torch.cuda.Event(...)` somewhere in the file."""
        while isinstance(receiver, ast.Subscript):
            receiver = receiver.value
        name = terminal_name(receiver)
        if name is None:
            return False
        events = file.__dict__.get("_cuda_event_names")
        if events is None:
            events = set()
            for assign in file.nodes(ast.Assign, ast.AnnAssign):
                value = assign.value
                if value is None or not any(
                    isinstance(c, ast.Call) and file.qualname(c) in _EVENT for c in ast.walk(value)
                ):
                    continue
                targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
                for target in targets:
                    for t in ast.walk(target):
                        if isinstance(t, (ast.Name, ast.Attribute)):
                            events.add(terminal_name(t))
            file.__dict__["_cuda_event_names"] = events
        return name in events


def _base(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
