import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.gradmode import ON, UNKNOWN, grad_mode
from gpulint.frontends.python.loops import is_step_marker
from gpulint.frontends.python.model import FUNCTIONS, LOOPS
from gpulint.rule import Exemption, Rule

# Attributes that say the code wants gradients (`optimizer.zero_grad()`: a training loop, even
# one that lost its backward pass).
_GRAD_USES = {"grad", "requires_grad_", "retain_grad", "backward", "zero_grad"}


class InferenceWithoutNoGrad(Rule):
    """
    ## What it does
    Finds an evaluation or inference loop over a data loader (or batches it fetches) that calls
    a model on every batch, never runs a backward pass or an optimizer step, and runs with
    autograd on: not inside `with torch.no_grad():` / `torch.inference_mode():`, not in a
    function decorated with either, and not in a function that every caller in the file calls
    with autograd off. Methods that turn autograd off on their own (`model.generate(...)`)
    are not model calls.

    ## Why is this bad?
    With autograd on, every forward pass records the graph a backward pass would need and keeps
    each layer's activations alive for it until the output is freed: more memory per batch (and
    across batches when outputs are collected, as evaluation loops do), and a little time per
    operation. `torch.inference_mode()` also skips the version counters and view tracking that
    `no_grad` keeps.

    ## Example
    ```python
    model.eval()
    for x, y in val_loader:
        logits = model(x.cuda(non_blocking=True))
        correct += (logits.argmax(-1) == y.cuda()).sum()
    ```

    ## Use instead
    ```python
    model.eval()
    with torch.inference_mode():
        for x, y in val_loader:
            logits = model(x.cuda(non_blocking=True))
            correct += (logits.argmax(-1) == y.cuda()).sum()
    ```

    ## References
    - [torch.inference_mode](https://docs.pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html)
    - [torch.no_grad](https://docs.pytorch.org/docs/stable/generated/torch.no_grad.html)
    - [Autograd mechanics: locally disabling gradient computation](https://docs.pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation)
    """

    code = "GPU505"
    name = "inference-without-no-grad"
    triggers = ("model", "net", "encoder", "decoder", "classifier", "backbone", "policy")
    requires = ("torch",)
    message = (
        "`{call}` runs forward only in the loop at line {loop}, with autograd on: each batch "
        "records a graph nothing uses and keeps its activations; wrap the loop in `with "
        "torch.inference_mode():` (or `torch.no_grad()`)"
    )
    tags = ("memory", "inference")
    tier = "preview"
    bench = "no-grad"

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loop runs a few batches to check results.",
            "import torch\nmodel.eval()\nfor x, y in val_loader:\n    out = model(x.cuda())\n",
            filename="tests/test_eval.py",
        ),
        Exemption(
            "training-loop",
            "A loop that runs a backward pass or an optimizer step (itself or through a "
            "function it calls): it trains, and needs the graph.",
            "import torch\ndef critic_step(x):\n    critic(x).mean().backward()\n"
            "    optimizer.step()\nfor x, z in train_loader:\n    fake = model(z.cuda())\n"
            "    critic_step(fake)\n",
        ),
        Exemption(
            "grad-mode-set-by-caller",
            "A loop in a function nothing in the file calls (or that only some callers call "
            "with autograd off): its caller elsewhere may turn autograd off.",
            "import torch\ndef evaluate(model, val_loader):\n    for x, y in val_loader:\n"
            "        out = model(x.cuda())\n",
        ),
        Exemption(
            "graph-used",
            "Code around the loop that wants the graph: a backward pass or optimizer step after "
            "the loop or in a loop around it, or a request for gradients "
            "(`torch.autograd.grad`, `.requires_grad_()`, `.grad`).",
            "import torch\ndef step(model, loader):\n    total = 0\n    for x in loader:\n"
            "        total = total + model(x.cuda()).sum()\n    total.backward()\n"
            "step(m, l)\n",
        ),
    )

    VALID = [
        "import torch\n@torch.no_grad()\ndef evaluate(model, val_loader):\n"
        "    for x, y in val_loader:\n        out = model(x.cuda())\n",
        "import torch\ndef evaluate(model, val_loader):\n    with torch.inference_mode():\n"
        "        for x, y in val_loader:\n            out = model(x.cuda())\n",
        # the caller turns autograd off
        "import torch\ndef evaluate(model, val_loader):\n    for x, y in val_loader:\n"
        "        out = model(x.cuda())\ndef main(model, val_loader):\n"
        "    with torch.no_grad():\n        evaluate(model, val_loader)\n",
        # a training loop
        "import torch\nfor x, y in train_loader:\n    loss = model(x.cuda()).sum()\n"
        "    loss.backward()\n    optimizer.step()\n",
    ]
    INVALID = [
        "import torch\nmodel.eval()\nfor x, y in val_loader:\n    logits = model(x.cuda())\n"
        "    correct += (logits.argmax(-1) == y.cuda()).sum()\n",
        "import torch\ndef evaluate(model, val_loader):\n    preds = []\n"
        "    for x, y in val_loader:\n        preds.append(model(x.cuda()))\n    return preds\n"
        "def main():\n    evaluate(model, val_loader)\nmain()\n",
    ]

    def visit_For(self, node: ast.For, file: PythonFile):
        yield from self._check(node, file)

    def visit_While(self, node: ast.While, file: PythonFile):
        yield from self._check(node, file)

    def _check(self, loop: ast.For | ast.While, file: PythonFile):
        if self.exempt("test-code", file.is_test) or not file.uses_cuda:
            return
        loops = file.loops
        if not loops.basic_step_loop(loop) or self.exempt("training-loop", loops.trains(loop)):
            return
        modes = [(c, grad_mode(file, c)) for c in loops.model_calls(loop)]
        calls = [
            c
            for c, mode in modes
            if mode == ON or (mode == UNKNOWN and not self.exempt("grad-mode-set-by-caller", True))
        ]
        if not calls:
            return
        if self.exempt("graph-used", _uses_grad(file, loop)):
            return
        yield self.report(file, loop, call=file.segment(calls[0].func) + "(...)", loop=loop.lineno)


def _uses_grad(file: PythonFile, loop: ast.AST) -> bool:
    """The function around `loop` (or the module) wants the graph: it asks for gradients, or
    runs a backward/optimizer step outside the loops beside this one (after it, or in a loop
    around it)."""
    scope = file.model.scope_of(loop)
    for node in file.model.members(scope):
        if isinstance(node, ast.Attribute) and node.attr in _GRAD_USES:
            if node.attr != "backward" or _outside_siblings(file, node, loop, scope):
                return True
        if isinstance(node, ast.Call) and is_step_marker(node):
            if _outside_siblings(file, node, loop, scope):
                return True
    return False


def _outside_siblings(file: PythonFile, node: ast.AST, loop: ast.AST, scope: ast.AST) -> bool:
    """`node` is not in a loop of its own that leaves `loop` out (a separate training loop of
    the same function): it is in `loop`, around it, or in no loop at all."""
    for parent in file.ancestors(node):
        if parent is scope or isinstance(parent, FUNCTIONS):
            return True
        if isinstance(parent, LOOPS):
            return parent is loop or any(a is parent for a in file.ancestors(loop))
    return True
