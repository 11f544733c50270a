import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import body_nodes
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.transfers import (
    device_transfer,
    non_blocking,
    root_name,
    transfer_receiver,
)
from gpulint.rule import Exemption, Rule

_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "islice", "track", "progress", "cycle"}


class PinnedBatchBlockingCopy(Rule):
    """
    ## What it does
    Finds `.to(device)` / `.cuda()` of a batch drawn from a `DataLoader` built in the same file
    with `pin_memory=True`, without `non_blocking=True`. A loader without pinning is not this
    rule's case: `non_blocking=True` would not help much there.

    ## Why is this bad?
    Pinning exists so that the host-to-device copy can run asynchronously on the copy engine,
    overlapping with the kernels already queued. A copy without `non_blocking=True` makes the CPU
    wait for it to finish before it queues the next kernel, so the loader pays for pinning and
    gets only part of the benefit: the copy and the compute are serialised.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, num_workers=8, pin_memory=True)
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, num_workers=8, pin_memory=True)
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    ```

    ## References
    - [CUDA semantics: use pinned memory buffers](https://docs.pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers)
    - [torch.utils.data: memory pinning](https://docs.pytorch.org/docs/stable/data.html#memory-pinning)
    """

    code = "GPU103"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "pinned-batch-blocking-copy"
    bench = "h2d"
    triggers = ("pin_memory",)
    message = (
        "`{call}` copies a batch from the pinned loader `{loader}` (line {line}) synchronously; "
        "pass `non_blocking=True` so the copy overlaps with compute"
    )
    tags = ("data-movement",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loop copies a few batches to check results, not to train.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=64, pin_memory=True)\n"
            "for x, y in loader:\n    x = x.cuda()\n",
            filename="tests/test_data.py",
        ),
        Exemption(
            "pin-memory-from-variable",
            "A loader whose `pin_memory` comes from a variable (`pin_memory=args.pin_mem`): "
            "whether the batches are pinned is not known here.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=args.pin_mem)\n"
            "for x, y in loader:\n    x = x.cuda()\n",
        ),
        Exemption(
            "non-blocking-from-variable",
            "A copy whose `non_blocking` comes from a variable, `**kwargs` or a positional "
            "argument: it may well be `True`.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)\n"
            "for x, y in loader:\n    x = x.to(device, non_blocking=args.non_blocking)\n",
        ),
    )

    VALID = [
        """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.to(device, non_blocking=True)
""",
        # No pinning: non_blocking would not help much.
        """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=64, num_workers=4)
for x, y in loader:
    x = x.cuda()
""",
    ]
    INVALID = [
        """
import torch
from torch.utils.data import DataLoader
train_loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)
for step, (x, y) in enumerate(train_loader):
    x, y = x.to(device), y.to(device)
    loss = model(x, y)
""",
        """
import torch
import torch.utils.data
loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)
for batch in loader:
    batch = batch.cuda()
""",
    ]

    def finish(self, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        pinned, unknown = _pinned_loaders(file)
        if not pinned and not unknown:
            return
        for loop in file.nodes(ast.For, ast.AsyncFor):
            name = _iterated_name(loop.iter)
            if name not in pinned and name not in unknown:
                continue
            batch_vars = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
            body = list(body_nodes(loop))
            _derive(body, batch_vars)
            for node in body:
                if not (isinstance(node, ast.Call) and device_transfer(file, node)):
                    continue
                if root_name(transfer_receiver(node)) not in batch_vars:
                    continue
                how = non_blocking(node)
                if how == "true" or self.exempt("non-blocking-from-variable", how == "unknown"):
                    continue
                if self.exempt("pin-memory-from-variable", name in unknown):
                    continue
                yield self.report(
                    file,
                    node,
                    call=_short(file, node),
                    loader=name,
                    line=(pinned.get(name) or unknown[name]).lineno,
                )


def _derive(body, batch_vars: set[str]) -> None:
    """Add names that hold parts of the batch: `x, y = batch`, `t` in `(t.cuda() for t in batch)`."""
    for node in body:  # source order, so a chain of unpackings resolves in one pass
        if isinstance(node, (ast.For, ast.comprehension)):
            target, value = node.target, node.iter
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(value, ast.Call) and terminal_name(value.func) in _WRAPPERS and value.args:
            value = value.args[0]
        if root_name(value) in batch_vars:
            batch_vars |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _pinned_loaders(file: PythonFile) -> tuple[dict[str, ast.Call], dict[str, ast.Call]]:
    """Names bound (only) to DataLoader(..., pin_memory=True) calls in this file, and those
    bound (only) to DataLoader calls whose `pin_memory` is not a constant: one pass for both."""
    pinned: dict[str, ast.Call | None] = {}
    unknown: dict[str, ast.Call | None] = {}
    for node in file.nodes(ast.Assign):
        call = node.value
        if not isinstance(call, ast.Call):
            continue
        q = file.qualname(call)
        if not q or not q.endswith("DataLoader"):
            continue
        pin = keyword(call, "pin_memory")
        value = pin.value if pin is not None else None
        kinds = (
            (pinned, isinstance(value, ast.Constant) and value.value is True),
            (unknown, value is not None and not isinstance(value, ast.Constant)),
        )
        for target in node.targets:
            name = terminal_name(target)
            if name:
                for found, holds in kinds:
                    old = found.get(name, call)
                    found[name] = call if (holds and old is not None) else None
    return (
        {k: v for k, v in pinned.items() if v is not None},
        {k: v for k, v in unknown.items() if v is not None},
    )


def _iterated_name(it: ast.AST) -> str | None:
    while isinstance(it, ast.Call) and terminal_name(it.func) in _WRAPPERS and it.args:
        it = it.args[0]
    return terminal_name(it)


def _short(file: PythonFile, node) -> str:
    text = " ".join(file.segment(node).split())
    return text if len(text) <= 40 else text[:37] + "..."
