import ast
from collections.abc import Iterator

from gpulint.diagnostics import Finding
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import keyword
from gpulint.frontends.python.transfers import CPU_FACTORIES, device_transfer
from gpulint.rule import Rule

# Legacy constructors take no CUDA `device=`: suggest torch.tensor with their dtype instead.
_LEGACY = {
    "Tensor": "",
    "FloatTensor": "dtype=torch.float32, ",
    "LongTensor": "dtype=torch.long, ",
    "IntTensor": "dtype=torch.int32, ",
    "BoolTensor": "dtype=torch.bool, ",
    "ByteTensor": "dtype=torch.uint8, ",
}


class CpuTensorMovedInHotLoop(Rule):
    """
    ## What it does
    Finds a tensor built on the CPU by a `torch` factory and moved to the GPU at once, such as
    `torch.zeros(n).cuda()` or `torch.tensor(x).to(device)`, where it runs on every iteration of
    a step loop or in a module's `forward`. The same pattern in one-time setup (before the loop,
    in `__init__`) is left alone, and so is a fallback on one side of a conditional expression
    (`logp if is_last_stage else torch.zeros(n).cuda()`): it runs only where the condition
    fails, not on every step of the default path.

    ## Why is this bad?
    The tensor is allocated and filled in host memory, then copied to the device through a
    pageable staging buffer: a host allocation, a synchronous `cudaMemcpy` and a device
    allocation, every step. Passing `device=` builds it on the GPU directly, with no copy and no
    sync.

    ## Example
    ```python
    for x, y in loader:
        mask = torch.ones(x.shape[0], seq_len).cuda()
        positions = torch.arange(seq_len).to(device)
    ```

    ## Use instead
    ```python
    for x, y in loader:
        mask = torch.ones(x.shape[0], seq_len, device="cuda")
        positions = torch.arange(seq_len, device=device)
    ```

    ## References
    - [CUDA semantics: best practices, device-agnostic code](https://docs.pytorch.org/docs/stable/notes/cuda.html#best-practices)
    - [PyTorch performance tuning guide: create tensors directly on the target device](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    code = "GPU104"
    name = "cpu-tensor-moved-in-hot-loop"
    triggers = (".cuda(", ".to(")
    # A CPU factory call must be there to be moved.
    requires = tuple(f"{name}(" for name in sorted(CPU_FACTORIES))
    message = (
        "`{factory}(...)` builds the tensor on the CPU and `{move}` copies it to the GPU {where}; "
        "create it on the device: `{suggest}`"
    )
    tags = ("data-movement",)

    VALID = [
        # One-time setup before the loop.
        """
import torch
pos = torch.arange(1024).cuda()
for x, y in train_loader:
    loss = model(x.cuda(), pos)
    loss.backward()
    optimizer.step()
""",
        # Built on the device.
        """
import torch
for x, y in train_loader:
    mask = torch.ones(x.shape[0], device="cuda")
    loss = model(x.cuda(), mask)
    loss.backward()
    optimizer.step()
""",
        # from_numpy of host data must be copied anyway.
        """
import torch
for x in train_loader:
    w = torch.from_numpy(weights).cuda()
    loss = model(x.cuda(), w)
    loss.backward()
""",
    ]
    INVALID = [
        """
import torch
for x, y in train_loader:
    mask = torch.ones(x.shape[0], 16).cuda()
    loss = model(x.cuda(), mask)
    loss.backward()
    optimizer.step()
""",
        """
import torch
import torch.nn as nn
class Net(nn.Module):
    def forward(self, x):
        pos = torch.arange(x.shape[1]).to(x.device)
        return x + pos
""",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile) -> Iterator[Finding]:
        if (
            file.is_test
            or not device_transfer(file, node)
            or not isinstance(node.func, ast.Attribute)
        ):
            return
        func = node.func
        inner = func.value
        if not isinstance(inner, ast.Call):
            return
        factory = file.qualname(inner)
        if (
            not factory
            or not factory.startswith("torch.")
            or factory.split(".")[-1] not in CPU_FACTORIES
        ):
            return
        if factory.count(".") != 1:
            return  # torch.cuda.FloatTensor etc. are already on the device
        if keyword(inner, "device") is not None or _no_elements(inner, factory):
            return  # built on the device already, or nothing to copy
        where = self._hot(node, file)
        if where is None:
            return
        if func.attr == "cuda":
            device = '"cuda"'
        else:
            dev = keyword(node, "device")
            device = file.segment(dev.value if dev is not None else node.args[0])
        yield self.report(
            file,
            node,
            factory=factory,
            suggest=_suggestion(factory, device),
            move=f".{func.attr}()",
            where=where,
            device=device,
        )

    @staticmethod
    def _hot(node, file: PythonFile) -> str | None:
        loop = file.loops.runs_every_step(node)
        if loop is not None:
            if _fallback(file, node, loop):
                return None
            return f"on every iteration of the step loop at line {loop.lineno}"
        function = file.enclosing_function(node)
        if (
            isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            and function.name == "forward"
        ):
            return "on every call of `forward`"
        return None


_FROM_DATA = {
    "tensor",
    "as_tensor",
    "Tensor",
    "FloatTensor",
    "LongTensor",
    "IntTensor",
    "BoolTensor",
}


def _no_elements(factory_call: ast.Call, factory: str) -> bool:
    """`torch.zeros(0)`, `torch.empty((0, 4))`, `torch.tensor([])`: a zero-element tensor, whose
    move copies no data (a placeholder, an empty accumulator)."""
    args = factory_call.args
    first = args[0] if len(args) == 1 else None
    if isinstance(first, (ast.List, ast.Tuple)) and factory.split(".")[-1] in _FROM_DATA:
        return not first.elts  # torch.tensor([]): empty data (torch.zeros(()) is one element)
    sizes = first.elts if isinstance(first, (ast.List, ast.Tuple)) else args
    return any(isinstance(a, ast.Constant) and a.value == 0 and type(a.value) is int for a in sizes)


def _suggestion(factory: str, device: str) -> str:
    name = factory.split(".")[-1]
    if name in _LEGACY:
        return f"torch.tensor(..., {_LEGACY[name]}device={device})"
    return f"{factory}(..., device={device})"


def _fallback(file: PythonFile, node: ast.AST, loop: ast.AST) -> bool:
    """`logp if logits is not None else torch.zeros(n).cuda()`: the other side of a conditional
    expression is the usual value; the copy runs only where the condition fails (another
    pipeline stage, an empty batch), not on every step of the default path."""
    child = node
    for parent in file.ancestors(node):
        if parent is loop:
            return False
        if isinstance(parent, ast.IfExp) and child is not parent.test:
            return True
        child = parent
    return False
