import ast
import re

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.precision import (
    autocast_dtype,
    comment_near,
    dtype_name,
    function_calls_backward,
    is_autocast,
)
from gpulint.rule import Exemption, Invalid, Rule, Valid

_MODEL = re.compile(r"model|^net$|net$|^module$|encoder|decoder|transformer|backbone", re.I)
_INFERENCE_TEST = re.compile(r"predict|infer|eval|not [\w.]*train", re.I)
# A comment that says why FP16 rather than BF16.
_REASON = re.compile(
    r"bf16|bfloat16|because|reason|numeric|precision|accura|overflow|underflow|stabil|parity"
    r"|match|reference|v100|t4\b|turing|volta|pascal|sm_?7|older gpu|compat|kernel|flash|inference",
    re.IGNORECASE,
)


class Fp16WhereBf16Supported(Rule):
    """
    ## What it does
    Finds FP16 chosen for training, FP16 autocast (`dtype=torch.float16`, or the FP16 default of
    `torch.autocast("cuda")` / `torch.cuda.amp.autocast()`) or `model.half()`, in a function that
    calls `.backward()`, when every configured hardware target supports BF16 (sm_80 and later),
    with no comment on the same or the previous line saying why FP16. It needs hardware
    targets: with none configured there is nothing to compare FP16 against, and it does not run.

    ## Why is this bad?
    On GPUs that have BF16 tensor cores, BF16 runs at the same speed as FP16 but keeps FP32's
    exponent range: no gradient underflow, no `GradScaler`, no skipped steps after overflows, and
    fewer NaNs in attention and normalisation layers. FP16 is the right choice mostly for older
    GPUs (Volta, Turing) that lack BF16.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
    ```

    ## References
    - [Automatic Mixed Precision package - torch.amp](https://docs.pytorch.org/docs/stable/amp.html)
    - [Numerical accuracy: reduced precision](https://docs.pytorch.org/docs/stable/notes/numerical_accuracy.html)
    """

    code = "GPU205"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "fp16-where-bf16-supported"
    triggers = ("autocast", "half", "float16")
    message = (
        "{what} chooses FP16 for training, but every configured target ({targets}) supports BF16; "
        "use `torch.bfloat16` (same speed, FP32 exponent range, no GradScaler needed) or say on "
        "the line above why FP16"
    )
    tags = ("precision", "hardware")

    _TRAIN = """
import torch
def train(x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
"""
    VALID = [
        Valid(_TRAIN, targets=("sm_75",)),
        _TRAIN,  # no targets configured
    ]
    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's precision is chosen to match a reference, not to train fast.",
            Valid(_TRAIN, targets=("sm_90",)),
            filename="tests/test_amp.py",
        ),
        Exemption(
            "target-without-bf16",
            "A configured target lacks BF16 (sm_75 and older): FP16 is the one half precision "
            "the whole fleet runs.",
            Valid(_TRAIN, targets=("sm_90", "sm_75")),
        ),
        Exemption(
            "no-backward-pass",
            "Not in a training function (no `.backward()`), or an eval pass under "
            "`torch.no_grad()` / `torch.inference_mode()` inside one: FP16 inference has no "
            "gradients to underflow.",
            Valid(
                "import torch\ndef fit(x, y):\n"
                '    with torch.autocast("cuda", dtype=torch.bfloat16):\n'
                "        loss = model(x)\n    loss.backward()\n"
                '    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):\n'
                "        val = model(y)\n",
                targets=("sm_90",),
            ),
        ),
        Exemption(
            "reason-given",
            "A comment on the same or the previous line says why FP16 (a kernel with no BF16 "
            "variant, parity with a reference, older GPUs): the author has decided.",
            Valid(
                "import torch\ndef train(x):\n"
                "    # FP16: the fused kernel we call has no BF16 variant.\n"
                '    with torch.autocast("cuda", dtype=torch.float16):\n'
                "        loss = model(x)\n    scaler.scale(loss).backward()\n",
                targets=("sm_90",),
            ),
        ),
        Exemption(
            "inference-branch",
            "Under a branch that says inference (`if args.do_predict:`, `if not args.do_train:`): "
            "that path does not train.",
            Valid(
                "import torch\ndef main(args, x):\n    if args.do_predict:\n"
                "        model.half()\n        model(x)\n    else:\n"
                "        model(x).sum().backward()\n",
                targets=("sm_90",),
            ),
        ),
    )
    INVALID = [
        Invalid(_TRAIN, targets=("sm_90",)),
        Invalid(
            "import torch\ndef train(model, x):\n    model = model.half()\n    model(x).sum().backward()\n",
            targets=("sm_80", "sm_90"),
        ),
    ]

    @classmethod
    def applicable(cls, settings) -> bool:
        return bool(settings.targets)  # no targets: nothing to compare FP16 against

    def visit_Call(self, node: ast.Call, file: PythonFile):
        targets = self.settings.targets
        if not targets or self.exempt("target-without-bf16", not all(t.arch.bf16 for t in targets)):
            return
        if self.exempt("test-code", file.is_test):
            return
        what = self._fp16(node, file)
        if what is None or self.exempt("no-backward-pass", not function_calls_backward(file, node)):
            return
        if self.exempt("reason-given", _REASON.search(comment_near(file, node))):
            return
        if self.exempt("inference-branch", _inference_only(file, node)):
            return
        labels = ", ".join(t.label for t in targets)
        yield self.report(file, node, what=what, targets=labels)

    @staticmethod
    def _fp16(node: ast.Call, file: PythonFile) -> str | None:
        if is_autocast(file, node):
            return "FP16 autocast" if autocast_dtype(file, node) == "fp16" else None
        func = node.func
        if not isinstance(func, ast.Attribute) or not _MODEL.search(_receiver_name(func.value)):
            return None
        if func.attr == "half" and not node.args and not node.keywords:
            return "`.half()` of the model"
        if func.attr == "to":
            dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
            if dtype is None:
                dtype = next(
                    (a for a in node.args if file.qualname(a) in {"torch.float16", "torch.half"}),
                    None,
                )
            if dtype is not None and dtype_name(file, dtype) == "fp16":
                return "`.to(torch.float16)` of the model"
        return None


def _inference_only(file: PythonFile, node) -> bool:
    """`if args.do_predict:` / `if not args.do_train:` around the call. (`with torch.no_grad():`
    is `function_calls_backward`'s business, shared with GPU203.)"""
    return any(
        isinstance(ancestor, ast.If) and _INFERENCE_TEST.search(ast.unparse(ancestor.test))
        for ancestor in file.ancestors(node)
    )


def _receiver_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""
