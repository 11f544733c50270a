import ast

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import SCOPES
from gpulint.frontends.python.names import keyword
from gpulint.frontends.python.transfers import host_built_move
from gpulint.rule import Rule

_GRAPH = {"torch.cuda.graph", "torch.cuda.graphs.graph"}
_HOST_DATA = {"torch.tensor", "torch.as_tensor"}
_HOST_RNG = ("random.", "numpy.random.")


class HostStateInGraphCapture(Rule):
    """
    ## What it does
    Finds host-side work inside a CUDA graph capture region (the body of
    `with torch.cuda.graph(g):`) that a replay will not redo: a tensor built on the host and
    copied to the device there (`torch.tensor([...]).cuda()`, `torch.arange(n).to(device)`,
    `torch.tensor(values, device="cuda")`), and host random numbers (`random.random()`,
    `np.random.rand()`). Device-side random numbers (`torch.rand(..., device="cuda")`,
    dropout) are fine: PyTorch makes them graph-safe. GPU504 reports host syncs there.

    ## Why is this bad?
    Capture records device work once; `g.replay()` reruns the recorded kernels and copies,
    not the Python that issued them. A host random number drawn during capture is frozen into
    the graph: every replay uses the same value. A copy from host memory is recorded with the
    host address it read: from pageable memory the copy cannot be captured at all (capture
    fails with "operation not permitted when stream is capturing"), and from pinned memory every
    replay copies whatever that buffer holds later, or freed memory. Build such inputs before
    capture into static tensors and update them in place (`static_x.copy_(x)`) before each
    replay.

    ## Example
    ```python
    with torch.cuda.graph(g):
        scale = random.uniform(0.9, 1.1)
        positions = torch.arange(seq_len).cuda()
        static_out = model(static_in * scale, positions)
    ```

    ## Use instead
    ```python
    static_scale = torch.ones((), device="cuda")
    positions = torch.arange(seq_len, device="cuda")
    with torch.cuda.graph(g):
        static_out = model(static_in * static_scale, positions)
    static_scale.fill_(random.uniform(0.9, 1.1))
    g.replay()
    ```

    ## References
    - [CUDA semantics: CUDA Graphs (constraints)](https://docs.pytorch.org/docs/stable/notes/cuda.html#constraints)
    - [torch.cuda.graph](https://docs.pytorch.org/docs/stable/generated/torch.cuda.graph.html)
    """

    code = "GPU506"
    name = "host-state-in-graph-capture"
    severity = Severity.ERROR
    triggers = ("cuda.graph", "graphs.graph", "import graph")
    message = (
        "{what} inside the CUDA graph capture at line {line}: {why}; build it before the "
        "capture into a static tensor and update that in place before each replay"
    )
    tags = ("graphs",)
    tier = "preview"
    bench = "graph-capture"

    VALID = [
        "import torch\npositions = torch.arange(16, device='cuda')\n"
        "with torch.cuda.graph(g):\n    out = model(static_in, positions)\n",
        "import torch\nwith torch.cuda.graph(g):\n"
        "    noise = torch.randn(4, 8, device='cuda')\n    out = model(static_in + noise)\n",
        "import random\nimport torch\nscale = random.random()\n"
        "with torch.cuda.graph(g):\n    out = model(static_in)\n",
    ]
    INVALID = [
        "import random\nimport torch\nwith torch.cuda.graph(g):\n"
        "    scale = random.uniform(0.9, 1.1)\n    out = model(static_in * scale)\n",
        "import torch\nwith torch.cuda.graph(g, pool=pool):\n"
        "    positions = torch.arange(seq_len).cuda()\n    out = model(static_in, positions)\n",
        "import numpy as np\nimport torch\nwith torch.cuda.graph(g):\n"
        "    ids = torch.tensor(np.random.permutation(8), device='cuda')\n",
    ]

    def visit_With(self, node: ast.With, file: PythonFile):
        if not any(
            isinstance(item.context_expr, ast.Call) and file.qualname(item.context_expr) in _GRAPH
            for item in node.items
        ):
            return
        stack: list[ast.AST] = list(reversed(node.body))
        while stack:
            current = stack.pop()
            if isinstance(current, SCOPES):
                continue  # defined here, not necessarily run during capture
            found = _host_state(file, current)
            if found is not None:
                what, why = found
                yield self.report(file, current, what=what, line=node.lineno, why=why)
                continue
            stack.extend(reversed(list(ast.iter_child_nodes(current))))


def _host_state(file: PythonFile, node: ast.AST) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call):
        return None
    q = file.qualname(node) or ""
    if q.startswith(_HOST_RNG):
        return (
            f"host random number `{q.split('.', 1)[0]}...{q.rsplit('.', 1)[-1]}()`",
            "it is drawn once, at capture, and every replay reuses it",
        )
    copy = "the host-to-device copy is captured with its host address (pageable: capture fails)"
    if q in _HOST_DATA and keyword(node, "device") is not None:
        return f"`{q}(..., device=...)` of host data", copy
    inner = host_built_move(file, node)
    if inner is not None:
        return f"`{file.qualname(inner)}(...)` built on the host and moved", copy
    return None
