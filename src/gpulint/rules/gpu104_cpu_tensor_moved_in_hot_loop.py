import ast
from collections.abc import Iterator

from gpulint.diagnostics import Finding
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import LOOPS, filled_once, under_branch
from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.summaries import summaries
from gpulint.frontends.python.transfers import host_built_move, no_elements
from gpulint.rule import Exemption, Rule

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
    `torch.zeros(n).cuda()` or `torch.tensor([0.0]).to(device)`, where it runs on every iteration of
    a step loop or in a module's `forward`. A helper that does it on every call (a method, a
    closure, a function of another module of the checked tree), called on every step, is
    reported at the call in the loop, naming the line that builds the tensor; a build under an
    `if` in the helper is not the default path, and is not counted. One-time setup (before the
    loop, in `__init__`) is not a step's cost, and neither is a value built on the first pass of
    a step loop and kept (`if mask is None: mask = ...`). A loop over a loader, or one whose
    trip count an option sets, is a training loop however few trips it may run. A constant
    (`torch.tensor([0.0]).cuda()`) is reported with what builds it on the device
    (`torch.zeros((1,), device=...)`), or, for mixed values, the advice to build it once.

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
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "cpu-tensor-moved-in-hot-loop"
    # A move must be there: in this file, or in a helper of the tree a step loop here calls
    # (its factory may be in another module, so no second gate on the factory's name).
    triggers = (".cuda(", ".to(")
    message = (
        "`{factory}(...)` builds the tensor on the CPU and `{move}` copies it to the GPU {where}; "
        "create it on the device: `{suggest}`"
    )
    constant_message = (
        "`{factory}(...)` builds the tensor on the CPU and `{move}` copies it to the GPU {where}; "
        "`device=` would still copy host data: build it once (a buffer registered in "
        "`__init__`, or before the loop)"
    )
    callee_message = (
        "`{callee}()` builds a tensor on the CPU and copies it to the GPU on every call: "
        "{what} at {where}{chain}, in the step loop at line {loop}; create it on the device "
        "(`device=`) or once, before the loop"
    )
    tags = ("data-movement",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loop runs a few steps to check results, not to train.",
            "import torch\nfor x, y in train_loader:\n    mask = torch.ones(x.shape[0], 16).cuda()\n"
            "    model(x.cuda(), mask).backward()\n",
            filename="tests/test_model.py",
        ),
        Exemption(
            "zero-element",
            "A zero-element placeholder (`torch.zeros(0, 4).cuda()`, `torch.tensor([]).cuda()`): "
            "its move copies no data.",
            fixture="python/gpu104_silent_zero_element.py",
        ),
        Exemption(
            "host-data-copied-anyway",
            "`torch.tensor(lengths).cuda()` of data the host already holds (a name, an "
            "attribute, an element): it must cross to the device whatever builds it, and "
            "`torch.tensor(..., device=)` copies it all the same.",
            fixture="python/gpu104_silent_host_data_copied_anyway.py",
        ),
        Exemption(
            "fallback-value",
            "A fallback on one side of a conditional expression (`logp if is_last_stage else "
            "torch.zeros(n).cuda()`): it runs only where the condition fails, not on every step "
            "of the default path.",
            fixture="python/gpu104_silent_fallback_value.py",
        ),
        Exemption(
            "handful-of-iterations",
            "A loop whose trip count the module states and that runs ten times or fewer in all "
            "(`for step in range(steps)` with `steps = 10` in a model file's self-test, a "
            "tutorial's dummy loop): each copy is paid a handful of times, not per training step.",
            fixture="python/gpu104_silent_handful_of_iterations.py",
        ),
        Exemption(
            "built-once-and-kept",
            "A value built on the first call of `forward` and kept (`if self.table is None: "
            "self.table = torch.tensor(np_table).to(x.device)`, `if not hasattr(self, "
            '"grid"):`, `if key not in cache:`): the copy runs on the first pass, not on every one.',
            fixture="python/gpu104_silent_built_once_and_kept.py",
        ),
        Exemption(
            "call-under-branch",
            "A call of a helper that builds on the host, under an `if` in the loop: a branch a "
            "flag or the data may never take.",
            """
import torch
def masked(z):
    return z * torch.ones(z.shape[0], 1).cuda()
for x, _ in train_loader:
    z = model(x.cuda())
    if use_mask:
        z = masked(z)
    z.sum().backward()
    optimizer.step()
""",
        ),
    )

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
        # Lengths the host holds cross to the device whatever builds the tensor.
        """
import torch
for x, lengths in train_loader:
    lens = torch.tensor(lengths).cuda()
    loss = model(x.cuda(), lens)
    loss.backward()
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
        # A helper called on every step builds its mask on the host.
        """
import torch
def drop_diagonal(sim):
    eye = torch.eye(sim.shape[0], dtype=torch.bool).to(sim.device)
    return sim.masked_fill(eye, float("-inf"))
for x, _ in train_loader:
    z = model(x.cuda())
    loss = drop_diagonal(z @ z.T).logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
""",
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
        if not isinstance(node.func, ast.Attribute | ast.Name) or self.exempt(
            "test-code", file.is_test
        ):
            return
        inner = host_built_move(file, node, empty=True)
        if inner is None:
            yield from self._callee_upload(node, file)
            return
        func = node.func
        assert isinstance(func, ast.Attribute)
        factory = file.qualname(inner) or ""
        if self.exempt("zero-element", no_elements(inner, factory)):
            return
        if self.exempt("host-data-copied-anyway", _existing_host_data(inner, factory)):
            return
        where = self._hot(node, file)
        if where is None:
            return
        if func.attr == "cuda":
            device = '"cuda"'
        else:
            dev = keyword(node, "device")
            device = file.segment(dev.value if dev is not None else node.args[0])
        suggest = _suggestion(inner, factory, device)
        yield self.report(
            file,
            node,
            self.message if suggest else self.constant_message,
            factory=factory,
            suggest=suggest,
            move=f".{func.attr}()",
            where=where,
            device=device,
        )

    def _callee_upload(self, node: ast.Call, file: PythonFile) -> Iterator[Finding]:
        """`loss = self.info_nce_loss(z)` every step, where the callee (or its callee) builds a
        tensor on the host and copies it over on every call: reported at the call, naming it."""
        if not file.uses_cuda or not _named_call(node):
            return
        loop = file.loops.runs_every_step(node)
        if loop is None:
            return
        # (Cheap tests first, the callee's summary last. A call on the side of an `if` that
        # the options' defaults do not take is under a branch too: `call-under-branch`.)
        if self.exempt("fallback-value", _fallback(file, node, loop)):
            return
        if self.exempt("handful-of-iterations", _few_trips(file, loop)):
            return
        if self.exempt("call-under-branch", under_branch(file, node, loop)):
            return  # a branch a flag or the data may never take
        summary = summaries(file).of_call(node)
        if summary is None or summary.upload is None:
            return
        site = summary.upload
        seen = file.memo.get(_REPORTED, set)
        key = (site.path, site.line, loop.lineno)
        if key in seen:
            return
        seen.add(key)
        chain = f" (through {site.via})" if site.via else ""
        yield self.report(
            file,
            node,
            self.callee_message,
            callee=terminal_name(node.func) or "the callee",
            what=site.what,
            where=f"{_short(site.path, file.display_path)}:{site.line}",
            chain=chain,
            loop=loop.lineno,
            related=site.chain("built on the host and copied here"),
        )

    def _hot(self, node, file: PythonFile) -> str | None:
        loop = file.loops.runs_every_step(node)
        if loop is not None:
            if self.exempt("fallback-value", _fallback(file, node, loop)) or self.exempt(
                "handful-of-iterations", _few_trips(file, loop)
            ):
                return None
            return f"on every iteration of the step loop at line {loop.lineno}"
        function = file.enclosing_function(node)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            function.name == "forward"
        ):
            # a table built on the first call, kept
            if self.exempt("built-once-and-kept", filled_once(file, node, function)):
                return None
            return "on every call of `forward`"
        return None


def _suggestion(inner: ast.Call, factory: str, device: str) -> str:
    """What builds the same tensor on the device with no copy; "" for `torch.tensor` of mixed
    constants, which `device=` still builds on the host and copies."""
    name = factory.split(".")[-1]
    if name in _LEGACY:
        return f"torch.tensor(..., {_LEGACY[name]}device={device})"
    if name not in ("tensor", "as_tensor"):
        return f"{factory}(..., device={device})"
    shape, value = _uniform_literal(_data(inner))
    if shape is None:
        return ""
    if value == 0 and not isinstance(value, bool):
        return f"torch.zeros({shape}, device={device})"
    return f"torch.full({shape}, {value!r}, device={device})"


def _data(inner: ast.Call) -> ast.expr | None:
    if inner.args:
        return inner.args[0]
    data = keyword(inner, "data")
    return data.value if data is not None else None


def _existing_host_data(inner: ast.Call, factory: str) -> bool:
    """`torch.tensor(lengths).cuda()`: data the host already holds (a name, an attribute, an
    element) has to cross to the device whatever builds it; `device=` copies it all the same."""
    if factory.split(".")[-1] not in ("tensor", "as_tensor"):
        return False
    return isinstance(_data(inner), ast.Name | ast.Attribute | ast.Subscript | ast.Starred)


def _uniform_literal(data: ast.expr | None) -> tuple[str | None, object]:
    """`0.0` -> ("()", 0.0); `[1.0, 1.0]` -> ("(2,)", 1.0); anything else -> (None, None)."""
    if isinstance(data, ast.Constant) and isinstance(data.value, int | float):
        return "()", data.value
    if isinstance(data, ast.List | ast.Tuple) and data.elts:
        values = [e.value if isinstance(e, ast.Constant) else None for e in data.elts]
        first = values[0]
        if isinstance(first, int | float) and all(
            type(v) is type(first) and v == first for v in values
        ):
            return f"({len(values)},)", first
    return None, None


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


_REPORTED: MemoKey[set] = MemoKey("GPU104 reported callee sites")
# A loop that runs this many times or fewer pays its copies a handful of times, not per step.
_HANDFUL = 10


def _few_trips(file: PythonFile, loop: ast.AST) -> bool:
    """The loop's trip count is known and small (`for step in range(10)` in a self-test or a
    tutorial's dummy loop), and so is that of every loop around it: each copy is paid a
    handful of times in all, not on every training step."""
    total = 1
    for each in [loop, *file.ancestors(loop)]:
        if not isinstance(each, LOOPS):
            continue
        trips = file.loops.known_trips(each)
        if trips is None:
            return False
        total *= trips
    return total <= _HANDFUL


def _named_call(call: ast.Call) -> bool:
    """`f(x)`, `self.m(x)`, `mod.f(x)`: a call the summaries may resolve (not `x.to()`)."""
    func = call.func
    if isinstance(func, ast.Name):
        return True
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.attr not in {"to", "cuda", "item", "cpu"}
    )


def _short(path: str, here: str) -> str:
    head, _, name = path.rpartition("/")
    return name if head == here.rpartition("/")[0] else path
