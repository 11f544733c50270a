import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.precision import autocast_dtype, function_calls_backward, is_autocast
from gpulint.rule import Rule

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
    `dtype`. BF16 autocast, inference without a backward pass (also an eval pass under
    `torch.no_grad()` / `torch.inference_mode()` inside a training function), autocast whose
    dtype or device comes from a variable, and code run by a framework that scales the loss
    itself (Accelerate, DeepSpeed, Lightning...) are left alone.

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
        # An eval pass under no_grad inside the training function: no backward through it.
        """
import torch
def fit(x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    loss.backward()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        val = model(y)
""",
        # dtype from a variable: unknown.
        """
import torch
def train(x, dtype):
    with torch.autocast("cuda", dtype=dtype):
        loss = model(x)
    loss.backward()
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
        if file.is_test or not is_autocast(file, node):
            return
        if autocast_dtype(file, node) != "fp16":
            return
        if not function_calls_backward(file, node):
            return
        if _SCALING.search(file.text):
            return
        if any(_FRAMEWORK.match(q) for q in file.bindings.values()):
            return
        yield self.report(file, node)
