import ast
import re
from types import SimpleNamespace

from gpulint.frontends.python.extensions import runs_compiled_ops
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import is_step_marker, own_nodes
from gpulint.frontends.python.training import optimizes_inputs
from gpulint.rule import Exemption, Rule

# Anything that says the module chooses (or may choose) a precision. Reading the text is right
# here: these leave the rule silent, so a mention in a comment or a config key only errs on the
# side of silence.
_PRECISION = re.compile(
    r"autocast|bfloat16|float16|\bhalf\b|\.half\(|\bbf16|\bfp16|\bfp8|float8|\btf32|allow_tf32"
    r"|float32_matmul_precision|fp32_precision|mixed_precision|\bamp\b|_amp\b"
    r"|\bprecision\s*[:=]|--precision|\.precision\b|['\"]precision['\"]|--dtype|\.dtype\s*=(?!=)"
    r"|\bamp_|GradScaler|[sS]caler\b|loss_scale|apex|transformer_engine",
    re.IGNORECASE,
)
# Frameworks that own the training loop's precision through their own configuration.
_FRAMEWORK = re.compile(
    r"^(accelerate|deepspeed|lightning|pytorch_lightning|composer|colossalai|megatron"
    r"|transformers|fairscale|apex|mmengine|mmcv|ignite|catalyst|timm\.utils)"
)


class Fp32TrainingByDefault(Rule):
    """
    ## What it does
    Judges a whole module: it runs a CUDA training loop (a loop that calls `.backward()` or
    `optimizer.step()`, in a module that steps an optimizer or zeroes gradients) and nowhere chooses a faster precision: no `autocast`, no BF16/FP16/FP8
    dtype (`torch.bfloat16`, `torch.float16`, `.half()`, `"bf16"` in its config), no
    `torch.set_float32_matmul_precision("high"|"medium")`, no TF32 flag, no `mixed_precision=` or
    `precision=` argument, no `--precision` / `--dtype` option or `precision:` config key (the
    choice is then configurable), no loss scaler. One finding, at the first training loop.
    CPU-only modules, and modules with no training loop (inference), are not checked.

    ## Why is this bad?
    FP32 matmuls and convolutions use neither the BF16/FP16 tensor cores nor TF32. On an NVIDIA
    H100 or H200 the dense BF16 tensor-core peak is about 15× the FP32 (non-tensor-core) peak, and
    TF32 about 7×; a transformer training step typically runs 2-3× faster under BF16 autocast,
    with half the activation memory.

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    torch.set_float32_matmul_precision("high")  # TF32 for whatever stays FP32
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## Known problems
    A small network beside the project's compiled kernels (a deformation MLP called as
    `deform.step(...)`) goes unreported with them (see `compiled-ops`), and a compiled op that
    is only used for set-up elsewhere in the tree counts as well: a missed finding, not a wrong
    one. Extensions outside the tree (an uninstalled git submodule) are unknown.

    ## References
    - [Automatic Mixed Precision package - torch.amp](https://docs.pytorch.org/docs/stable/amp.html)
    - [torch.set_float32_matmul_precision](https://docs.pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html)
    - [Numerical accuracy: TF32 on Ampere and later](https://docs.pytorch.org/docs/stable/notes/numerical_accuracy.html)
    """

    code = "GPU202"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "fp32-training-by-default"
    bench = "train-step"
    # A training loop cannot exist without one of these.
    triggers = ("backward", "step(")
    message = (
        "this CUDA training loop runs entirely in FP32: nothing in the module enables autocast, "
        'BF16/FP16 or TF32; wrap the forward pass in `torch.autocast("cuda", dtype=torch.bfloat16)` '
        '(or at least call `torch.set_float32_matmul_precision("high")`)'
    )
    tags = ("precision",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's few steps check results, their speed is not the point.",
            """
import torch
for x, y in train_loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
""",
            filename="tests/test_train.py",
        ),
        Exemption(
            "no-weight-updates",
            "`.backward()` with no optimizer stepping or zeroing gradients anywhere in the "
            "module: tracing or a gradient check, not training.",
            """
import torch
for out in outputs:
    grad = torch.empty_like(out, device="cuda")
    out.backward(grad)
""",
        ),
        Exemption(
            "framework-owns-precision",
            "A loop driven by a framework that sets precision from its own configuration "
            "(Accelerate, DeepSpeed, Lightning, Composer, Megatron...).",
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
for x, y in train_loader:
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
model.cuda()
""",
        ),
        Exemption(
            "optimizes-inputs",
            "A loop that optimises inputs, not weights: every optimizer the module builds is "
            "given tensors the module made (a latent being projected, a null-text embedding, an "
            "image), none of a model's parameters; the network's precision is chosen where it is "
            "loaded.",
            fixture="python/gpu202_silent_latent_projection.py",
        ),
        Exemption(
            "compiled-ops",
            "A step whose heavy work is the project's own compiled kernels: the module, or a "
            "module of the tree it imports (two levels down), calls a compiled extension (built "
            "with `torch.utils.cpp_extension.load`, or imported as `_C`, typically inside a "
            "`torch.autograd.Function`), and the loop calls no model of its own (a "
            "differentiable rasterizer over raw per-point tensors). Autocast leaves such ops in "
            "the precision their kernels were written for.",
            fixture="python/gpu202_silent_compiled_ops_and_inputs.py",
        ),
    )

    VALID = [
        """
import torch
for x, y in train_loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
""",
        """
import torch
torch.set_float32_matmul_precision("high")
for x, y in train_loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
""",
        # CPU only.
        """
import torch
for x, y in train_loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
    ]
    INVALID = [
        """
import torch
model = Net().cuda()
for epoch in range(10):
    for x, y in train_loader:
        loss = criterion(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""",
    ]

    def finish(self, file: PythonFile):
        if not file.uses_cuda or self.exempt("test-code", file.is_test):
            return
        loop = self._training_loop(file)
        if loop is None or self.exempt("no-weight-updates", not _updates_weights(file)):
            return
        if _PRECISION.search(file.text):
            return  # a faster precision is chosen (or configurable)
        if self.exempt(
            "framework-owns-precision", any(_FRAMEWORK.match(q) for q in file.bindings.values())
        ):
            return
        if self.exempt("optimizes-inputs", optimizes_inputs(file)):
            return
        if self.exempt("compiled-ops", not file.loops.calls_model(loop) and _compiled_ops(file)):
            return
        yield self.report(file, _loop_head(loop))

    @staticmethod
    def _training_loop(file: PythonFile):
        loops = sorted(
            file.nodes(ast.For, ast.AsyncFor, ast.While), key=lambda n: (n.lineno, n.col_offset)
        )
        for loop in loops:
            if any(_is_training_marker(n) for n in own_nodes(loop)):
                return loop
        return None


def _compiled_ops(file: PythonFile) -> bool:
    """The module, or a module of the tree it imports (two levels down), calls the project's
    own compiled extension."""
    if runs_compiled_ops(file):
        return True
    return file.project is not None and file.project.imports_compiled_ops(file)


def _updates_weights(file: PythonFile) -> bool:
    """An optimizer steps or zeroes gradients somewhere: `.backward()` alone may be tracing or a
    gradient check, not training."""
    for call in file.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute):
            if func.attr == "zero_grad" or (func.attr == "step" and is_step_marker(call)):
                return True
    return False


def _is_training_marker(node) -> bool:
    """`.backward()` on a loss, or `optimizer.step()`: the loop trains."""
    return is_step_marker(node)


def _loop_head(loop):
    """The loop's header only (`for x in loader`), so the finding does not span the body."""
    end = loop.test if isinstance(loop, ast.While) else loop.iter
    return SimpleNamespace(
        lineno=loop.lineno,
        col_offset=loop.col_offset,
        end_lineno=end.end_lineno,
        end_col_offset=end.end_col_offset,
    )
