"""Host-to-device transfers: `.cuda()` and `.to(<a CUDA device>)`, answered conservatively.

`x.to(torch.float16)` changes a dtype, `x.to("cpu")` / `x.to(cpu_device)` copies to the host and
`x.to(other)` is unknown: none of them is a host-to-device transfer. A transfer is `.cuda()`, or
`.to(...)` / `.to(device=...)` whose device is plainly a device: a `"cuda..."` string,
`torch.device("cuda...")`, `x.device`, or a name such as `device`, `dev`, `gpu`, `local_rank`.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from gpulint.frontends.python.names import keyword, terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_DEVICE_NAME = re.compile(r"device|^dev$|^dev_|_dev$|cuda|gpu|^rank$|local_rank|^device_id", re.I)
_HOST_NAME = re.compile(r"cpu|host", re.I)
# Factories that build a tensor on the CPU unless told `device=`.
CPU_FACTORIES = {
    "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor",
    "rand", "randn", "randint", "randperm", "as_tensor", "Tensor", "FloatTensor", "LongTensor",
    "IntTensor", "BoolTensor", "ByteTensor",
}  # fmt: skip


def _is_device_expr(file: PythonFile, node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith("cuda")
    if isinstance(node, ast.Call):
        if file.qualname(node) == "torch.device" and node.args:
            return _is_device_expr(file, node.args[0])
        if file.qualname(node) == "torch.cuda.current_device":
            return True
        return False
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda")
    if isinstance(node, (ast.Name, ast.Attribute)):
        q = file.qualname(node)
        if q and q.startswith("torch.") and not q.startswith("torch.cuda.current"):
            return False  # torch.float16, torch.bfloat16...: a dtype
        name = terminal_name(node)
        if not name or _HOST_NAME.search(name):
            return False
        return bool(_DEVICE_NAME.search(name))
    return False


def device_transfer(file: PythonFile, call: ast.AST) -> bool:
    """`x.cuda(...)`, or `x.to(<device>, ...)` with a plainly CUDA-ish device."""
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    attr = call.func.attr
    if attr == "cuda":
        # `torch.cuda(...)` is not a call anyone makes; `x.cuda()` moves x.
        return file.qualname(call.func.value) != "torch"
    if attr != "to":
        return False
    dev = keyword(call, "device")
    if dev is not None:
        return _is_device_expr(file, dev.value)
    return bool(call.args) and _is_device_expr(file, call.args[0])


def transfer_receiver(call: ast.Call) -> ast.AST:
    func = call.func  # `x.to(...)`, `x.cuda()`: an attribute call (is_transfer)
    return func.value if isinstance(func, ast.Attribute) else func


def root_name(node: ast.AST) -> str | None:
    """`x` for `x`, `x[i]`, `x["img"]`, `x.float()`; None for anything else."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Attribute):
            node = node.value
        else:
            break
    return node.id if isinstance(node, ast.Name) else None


def non_blocking(call: ast.Call) -> str:
    """'true', 'false' or 'unknown' for the call's `non_blocking` argument ('false' if absent)."""
    kw = keyword(call, "non_blocking")
    if kw is None:
        if any(k.arg is None for k in call.keywords):
            return "unknown"
        # `.to(device, dtype, non_blocking)` / `.cuda(device, non_blocking)` positionally.
        cuda = isinstance(call.func, ast.Attribute) and call.func.attr == "cuda"
        limit = 1 if cuda else 2
        if len(call.args) > limit:
            return "unknown"
        return "false"
    if isinstance(kw.value, ast.Constant):
        return "true" if kw.value.value else "false"
    return "unknown"


# The constructors that take host data (`torch.tensor(x)`): built with `device=`, they still
# copy it; the others (`zeros`, `arange`, `eye`...) need no copy at all when built in place.
HOST_DATA_FACTORIES = {
    "tensor", "as_tensor", "Tensor", "FloatTensor", "LongTensor", "IntTensor", "BoolTensor",
    "ByteTensor",
}  # fmt: skip


def host_built_move(file: PythonFile, call: ast.AST, empty: bool = False) -> ast.Call | None:
    """`torch.zeros(n).cuda()`, `torch.arange(t).to(device)`: a tensor a torch factory builds on
    the host, moved to the device at once. Returns the factory call, or None (built on the
    device already with `device=`, a zero-element placeholder unless `empty`, or not a factory
    at all; `torch.from_numpy(batch)` is host data that has to be copied anyway)."""
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return None
    if not device_transfer(file, call):
        return None
    inner = call.func.value
    if not isinstance(inner, ast.Call):
        return None
    factory = file.qualname(inner)
    if (
        not factory
        or not factory.startswith("torch.")
        or factory.split(".")[-1] not in CPU_FACTORIES
    ):
        return None
    if factory.count(".") != 1:
        return None  # torch.cuda.FloatTensor etc. are already on the device
    if keyword(inner, "device") is not None or (not empty and no_elements(inner, factory)):
        return None
    return inner


def no_elements(factory_call: ast.Call, factory: str) -> bool:
    """`torch.zeros(0)`, `torch.empty((0, 4))`, `torch.tensor([])`: a zero-element tensor, whose
    move copies no data (a placeholder, an empty accumulator)."""
    args = factory_call.args
    first = args[0] if len(args) == 1 else None
    if isinstance(first, (ast.List, ast.Tuple)) and factory.split(".")[-1] in HOST_DATA_FACTORIES:
        return not first.elts  # torch.tensor([]): empty data (torch.zeros(()) is one element)
    sizes = first.elts if isinstance(first, (ast.List, ast.Tuple)) else args
    return any(isinstance(a, ast.Constant) and a.value == 0 and type(a.value) is int for a in sizes)
