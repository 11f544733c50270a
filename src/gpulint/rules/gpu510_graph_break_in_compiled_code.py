from gpulint.diagnostics import Related
from gpulint.frontends.python.compiled import graph_break_sites, label, outside_targets
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule

_ELSEWHERE = (
    "`torch.compile` of `{name}` ({defined}) meets a graph break: {what} at {path}:{line} in "
    '`{function}` ({gb_id} "{gb_type}"){more}; each break splits the compiled graph'
)


class GraphBreakInCompiledCode(Rule):
    """
    ## What it does
    Finds code that `torch.compile` cannot put in its graph, inside a function or model that
    the file compiles: the def under `@torch.compile`, `torch.compile(fn)`, the `forward` of a
    module class compiled by `torch.compile(model)` or `model.compile()`, and what those call
    in the same file (helpers, `self.method()`, the `forward` of submodules held in
    `self.attn = Attention(...)` or `nn.ModuleList([Block(...) ...])`). Each finding names the
    graph-break kind of PyTorch's graph-break registry:

    - `.item()`, and `float()`/`int()`/`bool()` of a tensor: GB0124 *Unsupported Tensor.item()
      call with capture_scalar_outputs=False*; `.tolist()`: GB0033 *Data dependent operator*
      (GB0109 on a float tensor);
    - `print()`: GB0059 *Failed to trace builtin operator*; a `logging.getLogger()` logger's
      methods: GB0291; `logging.info()` and the like: GB4841; `warnings.warn()`: GB0007;
    - `if`/`while`/`x if c else y` on a tensor's values (`if x.sum() > 0:`,
      `if torch.isnan(x).any():`): GB0170 *Data-dependent branching*;
    - `nonzero()`, `unique()`, `masked_select()` and boolean-mask indexing (`x[x > 0]`):
      GB0036 *Dynamic shape operator*;
    - `.backward()` in the compiled function: GB0123 *Unsupported Tensor.backward() call*;
    - `torch._dynamo.graph_break()` left in: GB0025.

    Not breaks, and not reported here: `.cpu()`, `.numpy()` and NumPy calls on tensors (Dynamo
    traces NumPy), f-strings of tensors and `assert` on a tensor (torch 2.14).

    ## Why is this bad?
    At a graph break Dynamo ends the graph, runs the rest of the function in eager Python and
    starts a new graph after it: the compiled function becomes several smaller graphs with
    interpreted code between them, so fusion stops at the break, the host runs Python on every
    call, and a `.item()` or a data-dependent `if` also waits for the GPU there. A break inside
    a submodule called from a loop over blocks is worse: Dynamo cannot resume there, skips the
    whole outer `forward` and runs it eagerly ("Failed to handle graph break gracefully"). With
    `mode="reduce-overhead"` each piece is its own CUDA graph. Users find breaks only at run
    time, with `TORCH_LOGS=graph_breaks`; this rule finds them in the source.

    ## Example
    ```python
    class Block(nn.Module):
        def forward(self, x):
            h = self.mlp(self.norm(x))
            if h.abs().max() > 1e4:
                h = h.clamp(-1e4, 1e4)
            return x + h

    model = torch.compile(Block().cuda())
    ```

    ## Use instead
    ```python
    class Block(nn.Module):
        def forward(self, x):
            h = self.mlp(self.norm(x))
            h = h.clamp(-1e4, 1e4)  # branchless: a no-op on well-behaved inputs
            return x + h

    model = torch.compile(Block().cuda())
    ```

    ## References
    - [torch.compile: graph breaks](https://docs.pytorch.org/docs/stable/compile/programming_model.graph_breaks_index.html)
    - [PyTorch graph-break registry (the GBxxxx pages)](https://meta-pytorch.github.io/compile-graph-break-site/)
    - [torch.compiler.is_compiling](https://docs.pytorch.org/docs/stable/generated/torch.compiler.is_compiling.html)
    - [TORCH_LOGS (graph_breaks)](https://docs.pytorch.org/docs/stable/logging.html)
    """

    code = "GPU510"
    name = "graph-break-in-compiled-code"
    triggers = ("compile",)
    requires = ("torch",)
    message = (
        "{what} in `{function}`{via}, compiled at line {line}: a graph break "
        '({gb_id} "{gb_type}"); {instead}'
    )
    tags = ("compile", "graphs", "sync")
    bench = "graph-break"
    tier = "preview"

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test compiles code to check it, a break there costs nothing that matters.",
            "import torch\n@torch.compile\ndef f(x):\n    print(x.sum().item())\n    return x\n",
            filename="tests/test_compile.py",
        ),
        Exemption(
            "untraced-code",
            "Code Dynamo never traces: under `if not torch.compiler.is_compiling():` (or after "
            "`if torch.compiler.is_compiling(): return ...`), in an exception handler or a "
            "`raise`.",
            "import torch\n@torch.compile\ndef step(x):\n    y = x * 2\n"
            "    if not torch.compiler.is_compiling():\n        print(y.sum().item())\n"
            "    return y\n",
        ),
        Exemption(
            "disabled-function",
            "A def decorated `@torch.compiler.disable` that compiled code calls: Dynamo skips it "
            "(the call itself is the only break, and the author asked for it).",
            "import torch\n@torch.compiler.disable\ndef log(x):\n    print(x)\n"
            "@torch.compile\ndef f(x):\n    log(x)\n    return x * 2\n",
        ),
        Exemption(
            "captured-by-config",
            "`.item()`, `.tolist()` and `float()` of a tensor where the file sets "
            "`torch._dynamo.config.capture_scalar_outputs = True`, dynamic-shape ops where it "
            "sets `capture_dynamic_output_shape_ops = True`: Dynamo captures them in the graph.",
            "import torch\ntorch._dynamo.config.capture_scalar_outputs = True\n"
            "@torch.compile\ndef f(x):\n    return x * x.sum().item()\n",
        ),
        Exemption(
            "fullgraph",
            "Code compiled with `fullgraph=True`: a break there is an error at compile time, "
            "which the author sees, not a slow path.",
            "import torch\n@torch.compile(fullgraph=True)\ndef f(x):\n"
            "    return x + x.sum().item()\n",
        ),
    )

    VALID = [
        # shape and flag tests are resolved while tracing: no break
        "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n"
        "    def forward(self, x, mask=None):\n"
        "        if x.dim() == 3 and mask is not None and self.training:\n"
        "            x = x * mask\n        return x.sum()\n"
        "model = torch.compile(Net())\n",
        # the print is in code that is not compiled
        "import torch\ndef f(x):\n    return x * 2\ncf = torch.compile(f)\n"
        "def report(x):\n    print(x.sum().item())\n",
        # .cpu() and .numpy() are traced by Dynamo
        "import torch\n@torch.compile\ndef f(x):\n    return torch.from_numpy(x.cpu().numpy())\n",
    ]
    INVALID = [
        "import torch\nimport torch.nn as nn\nclass Block(nn.Module):\n"
        "    def forward(self, x):\n        h = self.mlp(x)\n"
        "        if h.abs().max() > 1e4:\n            h = h.clamp(-1e4, 1e4)\n        return x + h\n"
        "model = torch.compile(Block().cuda())\n",
        "import torch\n@torch.compile(mode='max-autotune')\ndef loss_fn(logits, y):\n"
        "    loss = torch.nn.functional.cross_entropy(logits, y)\n"
        "    print('loss', loss.item())\n    return loss\n",
        "import torch\nimport torch.nn as nn\nclass Attn(nn.Module):\n"
        "    def forward(self, x):\n        torch._dynamo.graph_break()\n        return x\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.layers = nn.ModuleList([Attn() for _ in range(4)])\n"
        "    def forward(self, x):\n        for layer in self.layers:\n            x = layer(x)\n"
        "        return x\nnet = Net()\nnet.compile()\n",
    ]

    def finish(self, file: PythonFile):
        yield from self._here(file)
        yield from self._elsewhere(file)

    def _elsewhere(self, file: PythonFile):
        """A compile of a model or function from another module of the tree: reported at the
        compile, naming the breaks in the other module (whose own lint cannot know that it is
        compiled)."""
        session = file.project
        if session is None or self.exempt("test-code", file.is_test):
            return
        for target in outside_targets(file):
            if self.exempt("fullgraph", target.fullgraph):
                continue
            found = session.breaks_if_compiled(file, target.name)
            if found is None or not found.sites:
                continue
            first = found.sites[0]
            more = len(found.sites) - 1
            yield self.report(
                file,
                target.site,
                _ELSEWHERE,
                name=target.name.id,
                defined=found.relpath,
                path=first.relpath,
                line=first.line,
                what=first.what,
                function=first.function,
                gb_id=first.gb_id,
                gb_type=first.gb_type,
                more=f" and {more} more" if more else "",
                related=tuple(
                    Related(s.relpath, s.line, 1, f"graph break: {s.what} in `{s.function}`")
                    for s in found.sites
                ),
            )

    def _here(self, file: PythonFile):
        for found in graph_break_sites(file):
            if (
                self.exempt("untraced-code", found.untraced)
                or self.exempt("disabled-function", found.disabled)
                or self.exempt("captured-by-config", found.captured)
            ):
                continue
            reached = found.reached
            if self.exempt("fullgraph", reached.entry.fullgraph) or self.exempt(
                "test-code", file.is_test
            ):
                continue
            chain = [label(file, reached.entry.function), *reached.via[:-1]]
            via = f" (called from {' -> '.join(f'`{c}`' for c in chain)})" if reached.via else ""
            yield self.report(
                file,
                found.node,
                what=found.what,
                function=label(file, reached.function),
                via=via,
                line=reached.entry.line,
                gb_id=found.gb_id,
                gb_type=found.gb_type,
                instead=found.fix,
                related=(
                    Related(
                        file.display_path,
                        *file.span(reached.entry.site)[:2],
                        f"compiled here (`{label(file, reached.entry.function)}`)",
                        *file.span(reached.entry.site)[2:],
                    ),
                ),
            )
