import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.gradmode import OFF, grad_mode
from gpulint.frontends.python.modes import eval_before, evaluation_loop, mode_dependent
from gpulint.rule import Exemption, Rule


class EvaluationWithoutEvalMode(Rule):
    """
    ## What it does
    Finds an evaluation loop (over a loader named for it, `val_loader`, `test_dl`, or in a
    function named for it, `def evaluate`) that runs a CUDA model's forward pass under
    `torch.no_grad()`/`torch.inference_mode()` with the model still in training mode: nothing
    calls `model.eval()` (or `model.train(False)`) before the loop, in the function, where
    the model is built, or, for a model handed in as a parameter, in the callers of this file
    before they call it. A model from `from_pretrained(...)` is returned in eval mode; a
    functional call (`torch.func.functional_call`) is not a call of the model.

    ## Why is this bad?
    `no_grad()` turns autograd off; it does not change the module's mode. In training mode,
    dropout keeps zeroing activations, so the metrics are those of a random sub-network, and
    batch norm normalises each batch with its own statistics and updates its running mean and
    variance from the evaluation data: the reported accuracy is wrong (and depends on the
    batch size), and the weights used at test time drift toward the validation set. Batch
    norm in training mode also computes the batch statistics every forward pass: the
    evaluation does more work than the model in eval mode does.

    ## Example
    ```python
    for epoch in range(epochs):
        model.train()
        train_one_epoch(model, train_loader, optimizer)
        with torch.no_grad():
            for images, labels in val_loader:
                correct += (model(images.cuda()).argmax(1) == labels.cuda()).sum()
    ```

    ## Use instead
    ```python
    for epoch in range(epochs):
        model.train()
        train_one_epoch(model, train_loader, optimizer)
        model.eval()
        with torch.no_grad():
            for images, labels in val_loader:
                correct += (model(images.cuda()).argmax(1) == labels.cuda()).sum()
    ```

    ## References
    - [nn.Module.eval](https://docs.pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval)
    - [Autograd mechanics: evaluation mode is not a mechanism to locally disable gradient computation](https://docs.pytorch.org/docs/stable/notes/autograd.html#evaluation-mode-nn-module-eval)
    - [BatchNorm2d: running statistics in training and evaluation mode](https://docs.pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html)
    """

    code = "GPU507"
    name = "evaluation-without-eval-mode"
    triggers = ("no_grad", "inference_mode")
    requires = ("torch",)
    message = (
        "`{call}` evaluates over `{loader}` (line {loop}) in training mode: nothing calls "
        "`{model}.eval()` before it{where}, so dropout stays on and batch norm uses and "
        "updates batch statistics; call `{model}.eval()` before the loop (and `.train()` "
        "after)"
    )
    tags = ("correctness", "inference")
    tier = "preview"
    bench = "eval-mode"

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's evaluation checks outputs, whatever the mode.",
            "import torch\nimport torchvision\nmodel = torchvision.models.resnet18().cuda()\n"
            "with torch.no_grad():\n    for x, y in val_loader:\n        out = model(x.cuda())\n",
            filename="tests/test_eval.py",
        ),
        Exemption(
            "training-loop",
            "A loop that runs a backward pass or an optimizer step (test-time adaptation): "
            "training mode is what it asks for.",
            """
import torch
import torch.nn.functional as F
import torchvision
model = torchvision.models.resnet18().cuda()
for x, _ in test_loader:
    with torch.no_grad():
        pseudo = model(x.cuda()).argmax(-1)
    loss = F.cross_entropy(model(x.cuda()), pseudo)
    loss.backward()
    optimizer.step()
""",
        ),
        Exemption(
            "mode-independent-model",
            "A model built here from layers whose mode changes nothing (`torch.nn` layers with "
            "no dropout, batch norm or instance norm, and no read of `self.training`).",
            "import torch\nimport torch.nn as nn\n"
            "model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()\n"
            "with torch.no_grad():\n    for x, y in val_loader:\n        out = model(x.cuda())\n",
        ),
        Exemption(
            "mode-not-in-sight",
            "A model whose mode the file cannot tell: in a function nothing here calls, handed "
            "before the loop to a function defined elsewhere, loaded with its mode "
            "(`torch.load`, `torch.jit.load`), an averaged or teacher copy (`ema_model`), or "
            "after `model.apply(...)`.",
            "import torch\n@torch.no_grad()\ndef evaluate(model, val_loader):\n"
            "    for x, y in val_loader:\n        out = model(x.cuda())\n",
        ),
    )

    VALID = [
        "import torch\nmodel = torchvision.models.resnet18().cuda()\nmodel.eval()\n"
        "with torch.no_grad():\n    for x, y in val_loader:\n        out = model(x.cuda())\n",
        "import torch\nmodel = torchvision.models.resnet18().cuda()\nmodel.train(False)\n"
        "with torch.no_grad():\n    for x, y in val_loader:\n        out = model(x.cuda())\n",
        # from_pretrained returns the model in eval mode
        "import torch\nmodel = torchvision.models.resnet18().cuda()\n"
        "with torch.no_grad():\n    for x, y in val_loader:\n        model.eval()\n"
        "        out = model(x.cuda())\n",
        "import torch\nmodel = AutoModel.from_pretrained(name).cuda()\n"
        "with torch.inference_mode():\n    for batch in eval_dataloader:\n"
        "        out = model(**batch)\n",
    ]
    INVALID = [
        "import torch\nimport torchvision\nmodel = torchvision.models.resnet18().cuda()\n"
        "with torch.no_grad():\n    for x, y in val_loader:\n        out = model(x.cuda())\n",
        "import torch\n@torch.no_grad()\ndef evaluate(model, val_loader):\n"
        "    return [model(x.cuda()) for x, _ in val_loader]\n"
        "def validate(model, val_loader):\n"
        "    with torch.no_grad():\n        for x, y in val_loader:\n"
        "            out = model(x.cuda())\n"
        "model = torchvision.models.resnet18().cuda()\nvalidate(model, loader)\n",
    ]

    def visit_For(self, node: ast.For, file: PythonFile):
        yield from self._check(node, file)

    def _check(self, loop: ast.For, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        if not file.uses_cuda or not evaluation_loop(file, loop):
            return
        loops = file.loops
        if self.exempt("training-loop", loops.trains(loop)):
            return
        calls = [c for c in loops.model_calls(loop) if grad_mode(file, c) == OFF]
        if not calls:
            return
        call = calls[0]
        model = call.func
        if isinstance(model, ast.Attribute) and model.attr == "forward":
            model = model.value
        if not isinstance(model, (ast.Name, ast.Attribute)):
            return
        # asked at the call: a switch earlier in the loop's own body counts too
        if self.exempt("mode-independent-model", mode_dependent(file, model, call) is False):
            return
        switched = eval_before(file, model, call)
        if switched or self.exempt("mode-not-in-sight", switched is None):
            return
        function = file.enclosing_function(loop)
        where = f" in `{getattr(function, 'name', '')}()` or its callers" if function else ""
        yield self.report(
            file,
            call,
            call=file.segment(call.func) + "(...)",
            loader=file.segment(loop.iter),
            loop=loop.lineno,
            model=file.segment(model),
            where=where,
        )
