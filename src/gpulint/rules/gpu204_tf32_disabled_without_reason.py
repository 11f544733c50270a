import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.precision import comment_near
from gpulint.rule import Exemption, Rule

# A comment that says why FP32 must stay exact.
REASON = re.compile(
    r"numeric|precision|reproduc|determinis|accura|bitwise|bit-wise|exact|parity|match|tolerance"
    r"|reference|stabil|diverg|nan\b|overflow|regression|correctness|golden|compare|consisten",
    re.IGNORECASE,
)
# Block names that say the same: `if args.deterministic:`, `def set_reproducible(...)`.
_REASON_SCOPE = re.compile(
    r"determinis|reproduc|exact|strict|numerics|bitwise|tf32|precision", re.IGNORECASE
)
_FLAGS = {
    "torch.backends.cuda.matmul.allow_tf32": "matmul",
    "torch.backends.cudnn.allow_tf32": "cudnn",
}
_FP32_PRECISION = {
    "torch.backends.fp32_precision",
    "torch.backends.cuda.matmul.fp32_precision",
    "torch.backends.cudnn.fp32_precision",
    "torch.backends.cudnn.conv.fp32_precision",
    "torch.backends.cudnn.rnn.fp32_precision",
}


class Tf32DisabledWithoutReason(Rule):
    """
    ## What it does
    Finds TF32 turned off, `torch.backends.cuda.matmul.allow_tf32 = False`,
    `torch.backends.cudnn.allow_tf32 = False`, `torch.set_float32_matmul_precision("highest")`
    or an `fp32_precision = "ieee"` setting, with no comment on the same or the previous line
    saying why (numerics, reproducibility, determinism, a reference comparison...). One comment
    block right above a group of such settings explains the whole group.

    ## Why is this bad?
    On Ampere and later GPUs, TF32 runs FP32 matmuls and convolutions on tensor cores with a
    10-bit mantissa: several times the FP32 throughput, and accurate enough for training deep
    networks. cuDNN uses TF32 for convolutions by default; turning it off slows every FP32
    convolution. Sometimes exact FP32 is needed (reference comparisons, sensitive numerics): then
    the reason belongs next to the setting, so the next reader does not "fix" it or copy it.

    ## Example
    ```python
    torch.backends.cudnn.allow_tf32 = False
    ```

    ## Use instead
    ```python
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    ```

    or, when exact FP32 is required:

    ```python
    # Exact FP32: results are compared bit for bit against the reference implementation.
    torch.backends.cudnn.allow_tf32 = False
    ```

    ## References
    - [Numerical accuracy: TF32 on Ampere and later devices](https://docs.pytorch.org/docs/stable/notes/numerical_accuracy.html)
    - [torch.set_float32_matmul_precision](https://docs.pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html)
    - [CUDA semantics: TensorFloat-32 on Ampere and later](https://docs.pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices)
    """

    code = "GPU204"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "tf32-disabled-without-reason"
    severity = Severity.INFO
    bench = "train-step"
    bench_claim = "tf32"
    triggers = ("tf32", "float32_matmul_precision", "fp32_precision")
    message = (
        "{what} turns TF32 off for {scope} with no stated reason; enable it "
        '(`torch.set_float32_matmul_precision("high")`, `torch.backends.cudnn.allow_tf32 = True`) '
        "or say on the line above why exact FP32 is needed"
    )
    tags = ("precision",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: exact FP32 is what a test comparing results usually wants.",
            "import torch\ntorch.backends.cudnn.allow_tf32 = False\n",
            filename="tests/test_numerics.py",
        ),
        Exemption(
            "determinism-block",
            "A setting inside a block about determinism (`if args.deterministic:`, `def "
            "set_reproducible():`, a `while` or `if` on `strict`, `exact`, `tf32`...): the "
            "block's name says why.",
            "import torch\nif args.deterministic:\n    torch.set_float32_matmul_precision('highest')\n",
        ),
    )

    VALID = [
        "import torch\n# Reproducibility: compare against the FP32 reference bit for bit.\n"
        "torch.backends.cuda.matmul.allow_tf32 = False\n",
        "import torch\ntorch.backends.cudnn.allow_tf32 = False  # exact numerics for the golden test\n",
        "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n",
    ]
    INVALID = [
        "import torch\ntorch.backends.cudnn.allow_tf32 = False\n",
        "import torch\ntorch.set_float32_matmul_precision('highest')\n",
        "import torch\nfrom torch.backends import cuda\ncuda.matmul.allow_tf32 = False\n",
    ]

    def visit_Assign(self, node: ast.Assign, file: PythonFile):
        value = node.value
        for target in node.targets:
            q = file.qualname(target)
            if q in _FLAGS and isinstance(value, ast.Constant) and value.value is False:
                scope = "FP32 matmuls" if _FLAGS[q] == "matmul" else "cuDNN convolutions"
                yield from self._judge(node, file, f"`{q} = False`", scope)
            elif q in _FP32_PRECISION and isinstance(value, ast.Constant) and value.value == "ieee":
                yield from self._judge(node, file, f'`{q} = "ieee"`', "FP32 math")

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if file.qualname(node) != "torch.set_float32_matmul_precision":
            return
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.Constant) and arg.value == "highest":
            yield from self._judge(
                node, file, '`set_float32_matmul_precision("highest")`', "FP32 matmuls"
            )

    def _judge(self, node, file: PythonFile, what, scope):
        if self.exempt("test-code", file.is_test):
            return
        if REASON.search(comment_near(file, node)) or REASON.search(
            _comment_above_group(file, node)
        ):
            return
        if self.exempt("determinism-block", _in_reason_block(file, node)):
            return
        severity = Severity.WARNING if "cuDNN" in scope else None
        yield self.report(file, node, severity=severity, what=what, scope=scope)


def _in_reason_block(file: PythonFile, node) -> bool:
    """Inside an `if`/`while` whose test, or a function whose name, says why (`if
    args.deterministic:`, `def set_reproducible():`)."""
    for ancestor in file.ancestors(node):
        if isinstance(ancestor, (ast.If, ast.While)) and _REASON_SCOPE.search(
            ast.unparse(ancestor.test)
        ):
            return True
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)) and _REASON_SCOPE.search(
            ancestor.name
        ):
            return True
    return False


_SETTING = re.compile(r"allow_tf32|float32_matmul_precision|fp32_precision|backends\.cud")


def _comment_above_group(file: PythonFile, node) -> str:
    """The comment block right above a group of precision settings (no blank line between):
    one comment may explain `allow_tf32 = False` for matmuls and for cuDNN together."""
    comments = []
    number = node.lineno - 1
    while number >= 1 and node.lineno - number <= 6:
        line = file.source.line_text(number).strip()
        if line.startswith("#"):
            comments.append(line)
        elif not line or not _SETTING.search(line):
            break
        number -= 1
    return " ".join(comments)
