import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.model import MemoKey, position
from gpulint.frontends.python.timing import first_sync
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

    def visit_Call(self, node: ast.Call, file: PythonFile):
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != "elapsed_time" or file.is_test:
            return
        if not self._is_event(func.value, file):
            return
        scope = file.enclosing_function(node)
        root = scope if scope is not None else file.tree
        first = first_sync(file, root)
        if first is not None and first < position(node):
            return
        # A closure (`def elapsed(): return start.elapsed_time(end)`) is called by the function
        # around it, which may synchronise before calling it.
        for outer in file.ancestors(root):
            if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                first_sync(file, outer, nested=True) is not None
            ):
                return
        # Events kept on `self` are recorded and synchronised in other methods of the class.
        if _base(func.value) == "self":
            cls = next((a for a in file.ancestors(node) if isinstance(a, ast.ClassDef)), None)
            if cls is None or first_sync(file, cls, nested=True) is not None:
                return
        end = node.args[0] if node.args else None
        yield self.report(file, node, end=file.segment(end) if end is not None else "end")

    @staticmethod
    def _is_event(receiver: ast.AST, file: PythonFile) -> bool:
        """The receiver is bound to `torch.cuda.Event(...)` in its own scope (or an enclosing one),
        directly, through a list of events, or as the loop variable over such a list. Parameters
        are unknown."""
        while isinstance(receiver, ast.Subscript):
            receiver = receiver.value
        if isinstance(receiver, ast.Attribute):
            return receiver.attr in _event_bindings(file, None)[1]
        if not isinstance(receiver, ast.Name):
            return False
        scopes = [
            a
            for a in file.ancestors(receiver)
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        ]
        for scope in [*scopes, None]:
            names, _, params = _event_bindings(file, scope)
            if receiver.id in params:
                return False
            if receiver.id in names:
                return True
        return False


def _base(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


_EventBindings = tuple[set[str], set[str], set[str]]
_EVENT_BINDINGS: MemoKey[dict[int, _EventBindings]] = MemoKey("GPU603 event bindings by scope")


def _event_bindings(file: PythonFile, scope: ast.AST | None) -> _EventBindings:
    """(names bound to events in `scope`, attribute names bound to events anywhere, parameters)."""
    cache = file.memo.get(_EVENT_BINDINGS, dict)
    key = id(scope)
    if key in cache:
        return cache[key]
    root = scope if scope is not None else file.tree
    names: set[str] = set()
    attrs: set[str] = set()
    if scope is None:
        nodes = list(ast.walk(root))  # attributes (`self.start`) are looked up file-wide
    else:
        nodes = [n for n in ast.walk(root) if file.enclosing_function(n) is scope]
    for node in nodes:
        value = getattr(node, "value", None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and value is not None:
            if any(isinstance(c, ast.Call) and file.qualname(c) in _EVENT for c in ast.walk(value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Attribute):
                            attrs.add(t.attr)
                        elif isinstance(t, ast.Name) and (
                            scope is not None or file.enclosing_function(t) is None
                        ):
                            names.add(t.id)
    # `for s, e in zip(starts, ends)` / `[s.elapsed_time(e) for s, e in zip(starts, ends)]`
    for node in ast.walk(root):
        if isinstance(node, (ast.For, ast.comprehension)):
            if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.iter)):
                names |= {t.id for t in ast.walk(node.target) if isinstance(t, ast.Name)}
    params: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = scope.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    cache[key] = (names, attrs, params)
    return cache[key]
