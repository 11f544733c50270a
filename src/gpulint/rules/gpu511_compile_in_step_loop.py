import ast

from gpulint.frontends.python.compiled import compile_calls, is_module_method
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.model import FUNCTIONS, SCOPES
from gpulint.rule import Exemption, Rule


class CompileInStepLoop(Rule):
    """
    ## What it does
    Finds `torch.compile` applied again and again: a `torch.compile(...)` call (or a def
    decorated `@torch.compile`) that runs on every iteration of a training or evaluation step
    loop, and one in a module's `forward`, which runs on every call.

    ## Why is this bad?
    `torch.compile(fn)` builds a new compiled wrapper each time it is called. Dynamo keeps its
    compiled graphs per code object, so a re-wrap of the same function, or a fresh `lambda`
    with the same code, usually finds the graph already compiled; the wrapping and the guard
    checks still run on the host on every step, and a closure that captures a value changing
    each step (the step index, a learning rate) recompiles until Dynamo makes it dynamic or
    reaches its `recompile_limit` and runs the frame eagerly from then on.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss_fn = torch.compile(lambda out: F.cross_entropy(out, y.cuda()))
        loss = loss_fn(model(x.cuda()))
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    loss_fn = torch.compile(F.cross_entropy)
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## References
    - [torch.compile](https://docs.pytorch.org/docs/stable/generated/torch.compile.html)
    - [torch.compile: dealing with recompilations](https://docs.pytorch.org/docs/stable/compile/programming_model.recompilation.html)
    - [Where to apply torch.compile](https://docs.pytorch.org/docs/stable/compile/programming_model.where_to_apply_compile.html)
    """

    code = "GPU511"
    name = "compile-in-step-loop"
    triggers = ("compile",)
    requires = ("torch",)
    message = (
        "`torch.compile` {where}: it wraps the function again on every {unit} (and recompiles "
        "when what it captures changes); compile once, {instead}"
    )
    tags = ("compile", "host-overhead")
    tier = "preview"
    bench = "recompile"

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test compiles to check a result, not to train.",
            "import torch\nfor x, y in loader:\n    fn = torch.compile(model)\n"
            "    loss = fn(x.cuda()).sum()\n    loss.backward()\n    optimizer.step()\n",
            filename="tests/test_compile.py",
        ),
        Exemption(
            "guarded-compile",
            "A compile under an `if`, `try` or `except` (the lazy, once-only `if self._fn is "
            "None: self._fn = torch.compile(...)`, `if step == 0:`): it runs once, or only on "
            "some iterations.",
            "import torch\nfor step, (x, y) in enumerate(loader):\n    if step == 0:\n"
            "        model = torch.compile(model)\n    loss = model(x.cuda()).sum()\n"
            "    loss.backward()\n    optimizer.step()\n",
        ),
        Exemption(
            "setup-loop",
            "A compile in a loop that is not a step loop (one per model or kernel of a list, a "
            "check over backends): each wrap runs once, at setup.",
            fixture="python/gpu511_silent_compile_once.py",
        ),
    )

    VALID = [
        "import torch\nmodel = torch.compile(model)\nfor x, y in loader:\n"
        "    loss = model(x.cuda()).sum()\n    loss.backward()\n    optimizer.step()\n",
        # a setup loop over kernels, not a step loop
        "import torch\ncompiled = {}\nfor name, fn in KERNELS.items():\n"
        "    compiled[name] = torch.compile(fn)\n",
        "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n"
        "    @torch.compile\n    def forward(self, x):\n        return self.block(x)\n"
        "class Lazy(nn.Module):\n    def forward(self, x):\n        if self._fn is None:\n"
        "            self._fn = torch.compile(self.block)\n        return self._fn(x)\n",
    ]
    INVALID = [
        "import torch\nimport torch.nn.functional as F\nfor step, (x, y) in enumerate(loader):\n"
        "    loss_fn = torch.compile(lambda out: F.cross_entropy(out, y.cuda()))\n"
        "    loss = loss_fn(model(x.cuda()))\n    loss.backward()\n    optimizer.step()\n",
        "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n"
        "    def forward(self, x):\n        return torch.compile(self.block)(x)\n",
    ]

    def finish(self, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        for site in compile_calls(file):
            where = self._where(file, site)
            if where is not None:
                yield self.report(file, site, **where)

    def _where(self, file: PythonFile, site: ast.AST) -> dict | None:
        child = site
        for parent in file.ancestors(site):
            if self.exempt(
                "guarded-compile",
                isinstance(parent, (ast.If, ast.IfExp, ast.ExceptHandler, ast.Try))
                and child is not getattr(parent, "test", None),
            ):
                return None  # once, or only some iterations
            if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and child is not getattr(
                parent, "iter", None
            ):
                if self.exempt("setup-loop", not file.loops.is_step_loop(parent)):
                    return None
                return {
                    "where": f"on every iteration of the step loop at line {parent.lineno}",
                    "unit": "step",
                    "instead": "before the loop",
                }
            if isinstance(parent, SCOPES):
                if isinstance(parent, FUNCTIONS) and child in parent.decorator_list:
                    child = parent
                    continue  # `@torch.compile def f`: runs where the def statement runs
                cls = file.model.enclosing_class(parent)
                if cls is not None and is_module_method(file, parent, "forward"):
                    return {
                        "where": f"in `{cls.name}.forward`",
                        "unit": "call",
                        "instead": "in `__init__` or where the model is built",
                    }
                return None
            child = parent
        return None
