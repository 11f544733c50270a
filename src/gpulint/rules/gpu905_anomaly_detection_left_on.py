import ast
from typing import ClassVar

from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule

_SET = {"torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly"}
_CONTEXT = {"torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly"}


class AnomalyDetectionLeftOn(Rule):
    """
    ## What it does
    Finds autograd anomaly detection switched on for good: `torch.autograd.set_detect_anomaly(
    True)` (a literal `True`) and `with torch.autograd.detect_anomaly():`, at module level, in a
    model's `__init__`, in a training function or inside its loop. `set_detect_anomaly(False)`
    switches it off.

    ## Why is this bad?
    Anomaly mode is a debugging aid. It records a Python stack trace for every operation of
    every forward pass and, in the backward pass, checks each gradient for NaN, which reads it
    back on the host: the GPU waits for the host at every node of the graph. Left on, it makes
    each training step several times slower and its traces cost host memory; the switch is
    global, so one line at the top of a script slows the whole run.

    ## Example
    ```python
    torch.autograd.set_detect_anomaly(True)

    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    torch.autograd.set_detect_anomaly(args.detect_anomaly)  # off unless asked for

    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## References
    - [torch.autograd.detect_anomaly / set_detect_anomaly](https://docs.pytorch.org/docs/stable/autograd.html#anomaly-detection)
    """

    code = "GPU905"
    name = "anomaly-detection-left-on"
    triggers = ("anomaly",)
    requires = ("torch",)
    message = (
        "autograd anomaly detection switched on for good ({what}): every forward records "
        "a stack trace and every backward node is checked on the host; remove it, or tie it "
        "to a debug flag"
    )
    tags = ("debug", "sync")
    tier = "preview"
    bench = "anomaly"

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "value-from-flag",
            "A switch whose value comes from a flag (`set_detect_anomaly(args.detect_anomaly)`, "
            "`detect_anomaly(check_nan)`): on only when the run asks for it.",
            fixture="python/gpu905_silent_anomaly_flags.py",
        ),
        Exemption(
            "under-a-condition",
            'A switch under an `if` (`if args.debug:`, not `if __name__ == "__main__":`) or in '
            "an `except` handler: a debug path, not every run.",
            "import torch\nif args.debug:\n    torch.autograd.set_detect_anomaly(True)\n",
        ),
        Exemption(
            "test-code",
            "Test code, where anomaly mode finds the operation that made a NaN.",
            "import torch\ntorch.autograd.set_detect_anomaly(True)\n",
            filename="tests/test_grads.py",
        ),
    )

    VALID = [
        "import torch\ntorch.autograd.set_detect_anomaly(args.detect_anomaly)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(False)\n",
        "import torch\n#torch.autograd.set_detect_anomaly(True)\n",
        "import torch\ndef check(model, x):\n    if not args.no_anomaly:\n"
        "        with torch.autograd.detect_anomaly():\n            model(x).sum().backward()\n",
    ]
    INVALID = [
        "import torch\nimport torch.nn as nn\ntorch.autograd.set_detect_anomaly(True)\n"
        "class Net(nn.Module):\n    pass\n",
        "import torch\nfor x, y in loader:\n    with torch.autograd.detect_anomaly():\n"
        "        loss = model(x.cuda()).sum()\n        loss.backward()\n    optimizer.step()\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        q = file.qualname(node)
        if q in _SET:
            arg = node.args[0] if node.args else None
            flag = arg is not None and not isinstance(arg, ast.Constant)
            if self.exempt("value-from-flag", flag):
                return
            if not flag and not (isinstance(arg, ast.Constant) and arg.value is True):
                return  # `set_detect_anomaly(False)`: off
            what = "`set_detect_anomaly(True)`"
        elif q in _CONTEXT:
            parent = file.parent(node)
            if not isinstance(parent, ast.withitem):
                return
            if node.args:
                first = node.args[0]
                if self.exempt("value-from-flag", not isinstance(first, ast.Constant)):
                    return
                if isinstance(first, ast.Constant) and not first.value:
                    return  # `detect_anomaly(False)`
            what = "`with torch.autograd.detect_anomaly():`"
        else:
            return
        if self.exempt(
            "under-a-condition",
            any(
                isinstance(a, (ast.If, ast.IfExp, ast.ExceptHandler)) and not _main_guard(a)
                for a in file.ancestors(node)
            ),
        ):
            return
        yield self.report(file, node, what=what)


def _main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`: the script itself, not a condition."""
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
    )
