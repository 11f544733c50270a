import ast

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import SCOPES
from gpulint.frontends.python.syncs import host_sync
from gpulint.rule import Rule

_GRAPH = {"torch.cuda.graph", "torch.cuda.graphs.graph"}


class HostSyncInGraphCapture(Rule):
    """
    ## What it does
    Finds a host-device synchronisation inside a CUDA graph capture region, the body of
    `with torch.cuda.graph(g):`: `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `float()`/`int()`
    or `print()` of a tensor, `torch.cuda.synchronize()`, event or stream `.synchronize()`.

    ## Why is this bad?
    During capture nothing runs: kernels are recorded into the graph, not executed. A sync asks
    the host to wait for work that is only being recorded, so CUDA rejects it and the capture
    fails (`operation not permitted when stream is capturing`); a value read back during capture
    would in any case be frozen into the graph instead of recomputed on each replay. Host reads
    belong outside the captured region, after `g.replay()`.

    ## Example
    ```python
    with torch.cuda.graph(g):
        static_out = model(static_in)
        n_tokens = static_out.argmax(-1).sum().item()
    ```

    ## Use instead
    ```python
    with torch.cuda.graph(g):
        static_out = model(static_in)
        static_tokens = static_out.argmax(-1).sum()
    g.replay()
    n_tokens = static_tokens.item()
    ```

    ## References
    - [CUDA semantics: CUDA Graphs (constraints)](https://docs.pytorch.org/docs/stable/notes/cuda.html#constraints)
    - [torch.cuda.graph](https://docs.pytorch.org/docs/stable/generated/torch.cuda.graph.html)
    """

    code = "GPU504"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "host-sync-in-graph-capture"
    severity = Severity.ERROR
    triggers = ("cuda.graph", "graphs.graph", "import graph")
    message = (
        "{what} inside the CUDA graph capture at line {line}: capture fails on a host sync; "
        "move the read after `g.replay()`"
    )
    tags = ("sync", "graphs")

    VALID = [
        "import torch\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    out = model(x)\n"
        "g.replay()\nprint(out.sum().item())\n",
        "import torch\nimport numpy as np\nwith torch.cuda.graph(g):\n    out = model(x)\n"
        "    sizes = np.array(shape).tolist()\n",
    ]
    INVALID = [
        "import torch\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    out = model(x)\n"
        "    n = out.sum().item()\n",
        "import torch\nfrom torch.cuda import graph\nwith graph(g, pool=pool):\n    y = f(x)\n"
        "    torch.cuda.synchronize()\n",
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
            what = host_sync(file, current)
            if what is not None:
                yield self.report(file, current, what=what, line=node.lineno)
                # `x.cpu().numpy()` is one sync: do not look inside a reported call's receiver.
                continue
            stack.extend(reversed(list(ast.iter_child_nodes(current))))
