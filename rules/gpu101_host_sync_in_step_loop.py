import ast

from gpulint.frontends.python.syncs import READBACK_METHODS, host_sync, python_side
from gpulint.frontends.python.tensors import assigned_values
from gpulint.frontends.python.timing import is_clock
from gpulint.rule import Rule

_BULK = {"`.cpu()`", "`.numpy()`", "`.tolist()`"}
_DEVICE_SYNC = "`torch.cuda.synchronize()`"
_EVENT_METHODS = {"record", "elapsed_time"}


class HostSyncInStepLoop(Rule):
    """
    ## What it does
    Finds a host-device synchronisation that runs on every iteration of a training or evaluation
    step loop: `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `float()`/`int()`/`bool()` of a
    tensor, `print()` of a tensor, or `torch.cuda.synchronize()`.

    A step loop is a loop whose own body calls `.backward()`, `optimizer.step()` or
    `scaler.step()`, or iterates a data loader and calls a model. Calls under a periodic guard
    (`if step % log_every == 0:`, `if should_log:`), before or after the loop, and in tests are
    left alone, and so are conversions of values that are plainly Python numbers. A
    `torch.cuda.synchronize()` next to a clock read or a CUDA event record is there to time the
    step (GPU601 asks for it) and is left alone too.

    ## Why is this bad?
    CUDA runs asynchronously: the CPU queues kernels and races ahead. Reading a value back makes
    the CPU wait until every queued kernel has finished, so the GPU drains and idles while Python
    catches up. Once per step, that bubble is paid on every step. On an NVIDIA H200 a small MLP
    step with `.item()` every step took 1,606 µs against 1,399 µs with `.item()` every 50 steps
    (+15%). The slower the host relative to the GPU, the smaller the bubble's share of a step: on
    a host that took twice the GPU's time to issue the step, the same bench measured no
    difference beyond run-to-run spread.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    ```

    ## Use instead
    ```python
    running_loss = torch.zeros((), device="cuda")
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        if step % log_every == 0:
            print(f"loss {running_loss.item() / (step + 1):.4f}")
    ```

    ## References
    - [CUDA semantics: asynchronous execution](https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution)
    - [PyTorch performance tuning guide: avoid unnecessary CPU-GPU synchronization](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    code = "GPU101"
    name = "host-sync-in-step-loop"
    bench = "sync"
    # A step loop cannot exist without one of these.
    triggers = ("backward", "step(", "loader", "Loader")
    message = (
        "{what} forces a host-device sync on every iteration of the step loop at line {loop}; "
        "keep the value on the device and read it every N steps (`if step % log_every == 0:`)"
    )
    tags = ("sync",)

    VALID = [
        # Periodic guard.
        """
import torch
for step, (x, y) in enumerate(train_loader):
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print(loss.item())
""",
        # After the loop.
        """
import torch
for x, y in train_loader:
    loss = model(x.to("cuda"))
    loss.backward()
    optimizer.step()
print(loss.item())
""",
        # A Python number.
        """
import torch
for x in train_loader:
    loss = model(x.cuda())
    loss.backward()
    optimizer.step()
    lr = float(args.lr)
""",
        # A sync that brackets an event timing: the measurement needs it.
        """
import torch
for i in range(iters):
    torch.cuda.synchronize()
    start[i].record()
    out.backward(grad)
    end[i].record()
    torch.cuda.synchronize()
""",
        # A sync before reading the wall clock for the step time.
        """
import time
import torch
for step in range(max_steps):
    t0 = time.time()
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    if device_type == "cuda":
        torch.cuda.synchronize()
    dt = time.time() - t0
""",
    ]
    INVALID = [
        # A sync with nothing to time.
        """
import torch
for x, y in train_loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
""",
        """
import torch
for step, (x, y) in enumerate(train_loader):
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
    total += loss.item()
""",
        """
import torch
for x, y in loader:
    logits = model(x.to("cuda"))
    correct += (logits.argmax(-1) == y).sum().item()
""",
    ]

    def visit_Call(self, node: ast.Call, file):
        if file.is_test or not file.uses_cuda:
            return
        what = self._sync(node, file)
        if what is None:
            return
        loop = file.loops.runs_every_step(node)
        if loop is None or _only_when_failing(node, file, loop):
            return
        if what == _DEVICE_SYNC and _times_something(node, file):
            return  # the sync that makes a wall-clock or event timing honest
        if what in _BULK and not file.loops.trains(loop):
            return  # an eval loop copying its outputs to the host: the copy is the point
        if isinstance(node.func, ast.Attribute) and _host_value(file, node.func.value, loop):
            return
        yield self.report(file, node, what=what, loop=loop.lineno)

    def _sync(self, node: ast.Call, file) -> str | None:
        func = node.func
        if file.qualname(func) == "torch.cuda.synchronize":
            return _DEVICE_SYNC
        if isinstance(func, ast.Attribute) and func.attr in READBACK_METHODS:
            inner = func.value
            # `x.cpu().numpy()` is one sync: report the first call in the chain only.
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr in READBACK_METHODS
            ):
                return None
        what = host_sync(file, node, with_events=False)
        # Event and stream syncs are the timing rules' business; a step loop's cost is the device.
        return None if what == "`synchronize()`" else what


def _times_something(node: ast.Call, file) -> bool:
    """The sync sits within two statements of a clock read or a CUDA event record/elapsed_time
    in its own block (or, under `if device == "cuda":`, the block around that `if`): it is there
    so the timing measures the device, not the launch queue."""
    statement = node
    for parent in file.ancestors(node):
        if isinstance(statement, ast.stmt):
            block = file.statement_block(statement)
            if block is not None:
                if _timing_near(block, block.index(statement), file):
                    return True
                if not isinstance(parent, ast.If):
                    return False
        statement = parent
    return False


def _timing_near(block: list, at: int, file) -> bool:
    for neighbour in block[max(0, at - 2) : at + 3]:
        if neighbour is block[at] or isinstance(neighbour, (ast.For, ast.While)):
            continue
        for sub in ast.walk(neighbour):
            if not isinstance(sub, ast.Call):
                continue
            if is_clock(file, sub):
                return True
            if isinstance(sub.func, ast.Attribute) and sub.func.attr in _EVENT_METHODS:
                return True
    return False


def _only_when_failing(node, file, loop) -> bool:
    """Inside a `raise`: runs once, on the way out, not every step."""
    for ancestor in file.ancestors(node):
        if ancestor is loop:
            return False
        if isinstance(ancestor, ast.Raise):
            return True
    return False


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


def _host_value(file, receiver: ast.AST, loop, depth: int = 0) -> bool:
    """The receiver is already on the host: built by `.numpy()`/`.cpu()`/`.tolist()`, or an
    element of the loader's batch that the loop never moves to the device."""
    name = _root_name(receiver)
    if name is None or depth > 3:
        return False
    scope = file.enclosing_function(loop)
    values = assigned_values(file, scope, name.id)
    if values and all(
        isinstance(v, ast.Call)
        and (
            (isinstance(v.func, ast.Attribute) and v.func.attr in READBACK_METHODS)
            or python_side(file, v)
        )
        for v in values
    ):
        return True
    source = file.loops.iteration_source(name.id, loop)
    if source is not None:
        if source == "batch":
            return not file.loops.moved_to_device(name.id, loop)
        return _host_value(file, source, loop, depth + 1)
    return False
