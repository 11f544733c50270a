import ast
import re

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import body_nodes
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.transfers import device_transfer, root_name, transfer_receiver
from gpulint.rule import Exemption, Rule

_FIELD_ITER = {"items", "values", "keys"}


class PerSampleDeviceTransfer(Rule):
    """
    ## What it does
    Finds `.to(device)` / `.cuda()` inside a loop (or comprehension) over the items of one batch
    drawn from a data loader: one host-to-device copy per sample instead of one per batch.

    ## Why is this bad?
    Every copy is a separate `cudaMemcpy` with its own launch and synchronisation overhead (a few
    microseconds each, plus a host sync when the source is pageable). A batch of 64 samples copied
    one by one pays that 64 times and keeps the copy engine busy with tiny transfers; one copy of
    the collated batch moves the same bytes at full bandwidth.

    ## Example
    ```python
    for images, targets in loader:
        images = images.to(device)
        targets = [t.to(device) for t in targets]
    ```

    ## Use instead
    ```python
    for images, targets in loader:  # collate targets into one tensor (or a padded one)
        images = images.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
    ```

    When samples cannot be collated (variable-size detection targets), pack them into one
    flat tensor plus offsets on the host and move that once.

    ## References
    - [CUDA semantics: use pinned memory buffers](https://docs.pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers)
    - [torch.utils.data: batching and collate_fn](https://docs.pytorch.org/docs/stable/data.html)
    """

    code = "GPU102"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "per-sample-device-transfer"
    triggers = (".to(", ".cuda(")
    requires = ("loader", "Loader", "batches")  # it judges loops over a data loader
    message = (
        "per-sample device transfer: `{call}` runs once for every item of `{batch}` from the loader "
        "loop at line {loop}; collate the batch on the host (a `collate_fn` or `torch.stack`) and "
        "move it with one `.to(device, non_blocking=True)` per batch"
    )
    tags = ("data-movement",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loop moves a few batches to check results, not to train.",
            "import torch\nfor xs, ys in loader:\n    for x in xs:\n        model(x.cuda())\n",
            filename="tests/test_model.py",
        ),
        Exemption(
            "per-field-transfer",
            "Moving each field of a batch once (`[t.to(device) for t in batch]` over a batch "
            "drawn whole, `{k: v.to(device) for k, v in batch.items()}`): one transfer per field "
            "is one per batch. A loop over a whole batch counts as per sample only where its "
            "variable says so (`for sample in batch`).",
            fixture="python/gpu102_silent_batch_transfer.py",
        ),
    )

    VALID = [
        # One transfer per field of the batch.
        """
import torch
for batch in train_loader:
    batch = [t.to(device, non_blocking=True) for t in batch]
    loss = model(*batch)
""",
        # Dict of fields.
        """
import torch
for batch in train_loader:
    batch = {k: v.to(device) for k, v in batch.items()}
""",
        # One transfer per batch.
        """
import torch
for images, labels in train_loader:
    images, labels = images.cuda(), labels.cuda()
    for img in images:
        show(img)
""",
    ]
    INVALID = [
        """
import torch
for images, targets in train_loader:
    images = images.to(device)
    targets = [t.to(device) for t in targets]
""",
        """
import torch
for step, (xs, ys) in enumerate(loader):
    for x in xs:
        out = model(x.cuda())
""",
    ]

    def visit_For(self, node, file: PythonFile):
        yield from self._check_loop(node, file)

    def visit_AsyncFor(self, node, file: PythonFile):
        yield from self._check_loop(node, file)

    def _check_loop(self, loop, file: PythonFile):
        if not file.loops.iterates_loader(loop) or self.exempt("test-code", file.is_test):
            return
        target = loop.target
        if _is_enumerate(loop.iter) and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            target = target.elts[1]  # `for step, batch in enumerate(loader)`: the batch is second
        batch_names = _sample_lists(target)
        if not batch_names:
            return
        own = body_nodes(loop)
        for inner in own:
            if isinstance(inner, (ast.For, ast.AsyncFor, ast.comprehension)):
                batch, fields = _iterated_batch(inner, batch_names)
                if batch is None:
                    continue
                sample_vars = {n.id for n in ast.walk(inner.target) if isinstance(n, ast.Name)}
                body = list(_inner_body(inner, file))
                # `{k: v.to(device) for k, v in t.items()}`: v is part of the sample t.
                for node in body:
                    if (
                        isinstance(node, (ast.For, ast.comprehension))
                        and root_name(node.iter) in sample_vars
                    ):
                        sample_vars |= {
                            n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)
                        }
                for node in body:
                    if isinstance(node, ast.Call) and device_transfer(file, node):
                        receiver = transfer_receiver(node)
                        if root_name(receiver) in sample_vars | {batch}:
                            if not self.exempt("per-field-transfer", fields):
                                yield self.report(
                                    file,
                                    node,
                                    call=_short(file, node),
                                    batch=batch,
                                    loop=loop.lineno,
                                )
                            break


def _is_enumerate(it: ast.AST) -> bool:
    while isinstance(it, ast.Call) and it.args:
        if terminal_name(it.func) == "enumerate":
            return True
        it = it.args[0]
    return False


def _sample_lists(target: ast.AST) -> set[str]:
    """Names in a tuple target `(images, targets)`: each is a whole field holding many samples.

    A lone target (`for batch in loader`) is usually a tuple of fields, so iterating it is one
    transfer per field, not per sample: left alone unless the inner variable says "sample".
    """
    if isinstance(target, (ast.Tuple, ast.List)):
        names = set()
        for elt in target.elts:
            names |= {n.id for n in ast.walk(elt) if isinstance(n, ast.Name)}
        return names
    if isinstance(target, ast.Name):
        return {"\0" + target.id}  # marked: needs a sample-named inner variable
    return set()


def _iterated_batch(inner, batch_names: set[str]) -> tuple[str | None, bool]:
    """The batch an inner loop iterates (or None), and whether it iterates its fields rather
    than its samples: the items of a dict, or a batch drawn whole (`for batch in loader`) with
    no sample-named variable."""
    it = inner.iter
    while (
        isinstance(it, ast.Call)
        and terminal_name(it.func) in {"enumerate", "zip", "tqdm"}
        and it.args
    ):
        it = it.args[0]
    if (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Attribute)
        and it.func.attr in _FIELD_ITER
    ):
        # fields of a dict, not samples
        owner = root_name(it.func.value)
        if owner is not None and (owner in batch_names or "\0" + owner in batch_names):
            return owner, True
        return None, False
    counted = _counted(it)
    if counted is not None:
        # `for i in range(len(images)): images[i].cuda()`: indices over one field's samples.
        return (counted if counted in batch_names else None), False
    if not isinstance(it, ast.Name):
        return None, False
    if it.id in batch_names:
        return it.id, False
    if "\0" + it.id in batch_names:
        inner_names = [n.id for n in ast.walk(inner.target) if isinstance(n, ast.Name)]
        if any(re.search(r"sample|example", n, re.I) for n in inner_names):
            return it.id, False
        return it.id, True
    return None, False


def _counted(it: ast.AST) -> str | None:
    """`xs` for `range(len(xs))`, `range(xs.size(0))`, `range(xs.shape[0])`."""
    if not (isinstance(it, ast.Call) and terminal_name(it.func) == "range" and len(it.args) == 1):
        return None
    arg = it.args[0]
    if isinstance(arg, ast.Call) and terminal_name(arg.func) == "len" and len(arg.args) == 1:
        arg = arg.args[0]
    elif (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "size"
    ):
        arg = arg.func.value
    elif (
        isinstance(arg, ast.Subscript)
        and isinstance(arg.value, ast.Attribute)
        and arg.value.attr == "shape"
    ):
        arg = arg.value.value
    else:
        return None
    return arg.id if isinstance(arg, ast.Name) else None


def _inner_body(inner, file: PythonFile):
    if isinstance(inner, ast.comprehension):
        comp = file.parent(inner)
        if not isinstance(comp, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return
        parts = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]
        parts += [c for g in comp.generators if g is not inner for c in [g.iter, *g.ifs]]
        for part in parts:
            yield from ast.walk(part)
        return
    for stmt in inner.body:
        yield from ast.walk(stmt)


def _short(file: PythonFile, node) -> str:
    text = " ".join(file.segment(node).split())
    return text if len(text) <= 40 else text[:37] + "..."
