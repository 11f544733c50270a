import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.precision import autocast_dtype, function_calls_backward, is_autocast
from gpulint.rule import Exemption, Rule

# Any loss scaling in the module: torch's GradScaler, timm's NativeScaler, apex, a hand-rolled one.
_SCALING = re.compile(r"Scaler|scaler|scale_loss|loss_scale|LossScale|grad_scale", re.IGNORECASE)
# Frameworks that scale the loss themselves when they run the backward pass.
_FRAMEWORK = re.compile(
    r"^(accelerate|deepspeed|lightning|pytorch_lightning|composer|colossalai|megatron|apex)"
)


class Fp16AutocastWithoutGradScaler(Rule):
    """
    ## What it does
    Finds FP16 autocast in training code (a function that calls `.backward()`) in a module with no
    gradient scaler: `torch.autocast("cuda", dtype=torch.float16)`, or the FP16 default of
    `torch.autocast("cuda")` / `torch.amp.autocast("cuda")` / `torch.cuda.amp.autocast()` with no
    `dtype`. BF16 autocast needs no scaler, and is not this rule's case. Any loss scaling in the
    module counts as a scaler: torch's `GradScaler`, timm's `NativeScaler`, apex, a hand-rolled
    `loss_scale`.

    ## Why is this bad?
    FP16 has a narrow exponent range: gradients below about 6e-8 flush to zero, so without loss
    scaling small gradients vanish and training silently stalls or diverges. `GradScaler`
    multiplies the loss before the backward pass and unscales the gradients before the optimizer
    step, skipping steps whose gradients overflowed. BF16 has FP32's exponent range and needs no
    scaler.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    Or use `dtype=torch.bfloat16` on GPUs that support it (sm_80 and later), with no scaler.

    ## References
    - [Automatic Mixed Precision package - torch.amp: gradient scaling](https://docs.pytorch.org/docs/stable/amp.html#gradient-scaling)
    - [CUDA Automatic Mixed Precision examples](https://docs.pytorch.org/docs/stable/notes/amp_examples.html)
    """

    code = "GPU203"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "fp16-autocast-without-grad-scaler"
    severity = Severity.ERROR
    triggers = ("autocast",)
    message = (
        "FP16 autocast in training with no gradient scaler in this module: small gradients "
        'underflow to zero; create `scaler = torch.amp.GradScaler("cuda")` and call '
        "`scaler.scale(loss).backward()`, `scaler.step(optimizer)`, `scaler.update()` "
        "(or use `dtype=torch.bfloat16`, which needs no scaler)"
    )
    tags = ("precision",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's step checks results, it does not train a model.",
            "import torch\ndef test_step(x):\n"
            '    with torch.autocast("cuda", dtype=torch.float16):\n'
            "        loss = model(x)\n    loss.backward()\n",
            filename="tests/test_amp.py",
        ),
        Exemption(
            "no-backward-pass",
            "Inference: no `.backward()` in the function around the autocast, or an autocast "
            "under `torch.no_grad()` / `torch.inference_mode()` (an eval pass inside a training "
            "function): there are no gradients to underflow.",
            """
import torch
def fit(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        val = model(y)
""",
        ),
        Exemption(
            "framework-scales-loss",
            "Code run by a framework that scales the loss itself when it runs the backward pass "
            "(Accelerate, DeepSpeed, Lightning, Composer, ColossalAI, Megatron, apex).",
            "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
            'def train(x):\n    with torch.autocast("cuda", dtype=torch.float16):\n'
            "        loss = model(x)\n    accelerator.backward(loss)\n",
        ),
        Exemption(
            "dtype-unknown",
            "An autocast whose dtype or device comes from a variable (or `**kwargs`): it may "
            "well be BF16.",
            "import torch\ndef train(x, dtype):\n"
            '    with torch.autocast("cuda", dtype=dtype):\n'
            "        loss = model(x)\n    loss.backward()\n",
        ),
    )

    VALID = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def train(x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
def train(x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
""",
        # Inference: no backward.
        """
import torch
@torch.no_grad()
def predict(x):
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x)
""",
    ]
    INVALID = [
        """
import torch
def train(x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    loss.backward()
    optimizer.step()
""",
        """
import torch
from torch.cuda.amp import autocast
def train(x):
    with autocast():
        loss = model(x)
    loss.backward()
""",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if not is_autocast(file, node) or self.exempt("test-code", file.is_test):
            return
        dtype = autocast_dtype(file, node)
        if dtype not in ("fp16", "unknown"):
            return  # BF16, or autocast plainly off
        if self.exempt("no-backward-pass", not function_calls_backward(file, node)):
            return
        if _SCALING.search(file.text):
            return
        if self.exempt(
            "framework-scales-loss", any(_FRAMEWORK.match(q) for q in file.bindings.values())
        ):
            return
        if self.exempt("dtype-unknown", dtype == "unknown"):
            return
        yield self.report(file, node)
