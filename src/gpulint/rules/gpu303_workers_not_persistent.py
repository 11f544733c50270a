import ast
import re

from gpulint.frontends.python.datasets import (
    items_in_memory,
    items_on_device,
    per_item_evaluation,
)
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import LOOPS, SCOPES
from gpulint.frontends.python.names import has_star_kwargs, keyword, terminal_name
from gpulint.rule import Exemption, Rule


def _is_dataloader(file: PythonFile, call: ast.Call) -> bool:
    q = file.qualname(call)
    return bool(q and q.startswith("torch.utils.data") and q.endswith(".DataLoader"))


class WorkersNotPersistent(Rule):
    """
    ## What it does
    Finds a `DataLoader` with worker processes (`num_workers` a positive number, or a value from
    the configuration) and no `persistent_workers=True`, when the loader is iterated again and
    again: inside an outer (epoch) loop, or handed to a function called inside one. A loader
    iterated once, or rebuilt on every pass of the loop, starts its workers once per loader:
    persistence cannot help it. `persistent_workers` given any value counts as decided.

    A project that declares only torch releases before 1.7, which have no `persistent_workers`,
    is not checked.

    ## Why is this bad?
    Without persistent workers, every `iter(loader)` (every epoch) shuts down all worker
    processes and starts new ones: each re-imports modules, re-opens files and rebuilds the
    dataset object, and the first batches of each epoch wait for that start-up. With many workers
    or a heavy dataset this is seconds of idle GPU per epoch.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, num_workers=8, pin_memory=True)
    for epoch in range(epochs):
        for x, y in loader:
            ...
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, num_workers=8, pin_memory=True,
                        persistent_workers=True, prefetch_factor=4)
    ```

    With `num_workers` from the configuration, write `persistent_workers=num_workers > 0`
    (`persistent_workers=True` with zero workers raises an error).

    ## Known problems
    Under the `spawn` start method an in-memory dataset (left alone here: see `in-memory-dataset`)
    is pickled to every worker each epoch, which for a large one is a real cost this rule does
    not report.

    ## References
    - [torch.utils.data.DataLoader: persistent_workers, prefetch_factor](https://docs.pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader)
    """

    code = "GPU303"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    torch_since = (1, 7)  # persistent_workers is new in torch 1.7
    name = "workers-not-persistent"
    bench = "dataloader"
    bench_claim = "persistent"
    triggers = ("DataLoader",)
    message = (
        "DataLoader `{loader}` restarts its {workers} worker processes every time the loop at line "
        "{loop} iterates it; pass `persistent_workers={value}` (and tune `prefetch_factor`)"
    )
    tags = ("input-pipeline",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loader runs a few batches, its start-up is not a training cost.",
            """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=8)
for epoch in range(2):
    for x in loader:
        model(x.cuda())
""",
            filename="tests/test_loader.py",
        ),
        Exemption(
            "kwargs-may-set-it",
            "A loader built with `**kwargs`: `persistent_workers` may be among them.",
            """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=8, **loader_kwargs)
for epoch in range(10):
    for x in loader:
        model(x.cuda())
""",
        ),
        Exemption(
            "no-workers",
            "No `num_workers`, or `num_workers=0` (no workers to restart: GPU302's business), "
            "or the workers passed positionally.",
            """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=0)
for epoch in range(10):
    for x in loader:
        model(x.cuda())
""",
        ),
        Exemption(
            "endless-sampler",
            "A sampler that never ends (`InfiniteSampler`, or one of the module whose `__iter__` "
            "loops `while True` or cycles): one pass never ends, the workers start once.",
            """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=8, sampler=InfiniteSampler(ds))
for epoch in range(10):
    for x in loader:
        model(x.cuda())
""",
        ),
        Exemption(
            "in-memory-dataset",
            "A loader over data already in memory (a `TensorDataset`, a dataset class of the "
            "module whose `__getitem__` only indexes tensors or arrays loaded whole in "
            "`__init__`; see GPU302), or one handing out CUDA tensors: a worker that re-opens "
            "nothing starts in milliseconds with the default `fork`, and the better fix there is "
            "`num_workers=0`.",
            """
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(features, labels), num_workers=4)
for epoch in range(10):
    for x, y in loader:
        model(x.cuda())
""",
        ),
        Exemption(
            "per-item-evaluation",
            "A `batch_size=1` loader that only evaluation loops iterate, each reading a value "
            "back per sample (`.item()`): a pass that waits for the GPU at every sample anyway.",
            """
import torch
from torch.utils.data import DataLoader
val_loader = DataLoader(photos, batch_size=1, num_workers=4)
for epoch in range(10):
    train_one_epoch(model)
    for image in val_loader:
        scores.append(model(image.cuda()).sigmoid().item())
""",
        ),
    )

    VALID = [
        """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=8, persistent_workers=True)
for epoch in range(10):
    for x in loader:
        model(x.cuda())
""",
        # Iterated once.
        """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=8)
for x in loader:
    model(x.cuda())
""",
        # persistent_workers from a variable.
        """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, num_workers=8, persistent_workers=args.persistent)
for epoch in range(10):
    for x in loader:
        model(x.cuda())
""",
    ]
    INVALID = [
        """
import torch
from torch.utils.data import DataLoader
train_loader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True)
for epoch in range(10):
    for x, y in train_loader:
        model(x.cuda())
""",
        """
import torch
import torch.utils.data
def main(args):
    data_loader_train = torch.utils.data.DataLoader(ds, num_workers=args.num_workers)
    for epoch in range(args.epochs):
        train_one_epoch(model, data_loader_train, optimizer, epoch)
""",
    ]

    def finish(self, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        for assign in file.nodes(ast.Assign):
            call = assign.value
            if not isinstance(call, ast.Call) or not _is_dataloader(file, call):
                continue
            if keyword(call, "persistent_workers") is not None:
                continue  # given: any value counts as decided
            if self.exempt("kwargs-may-set-it", has_star_kwargs(call)):
                continue
            workers = keyword(call, "num_workers")
            if self.exempt("no-workers", workers is None or len(call.args) > 5) or workers is None:
                continue
            value = workers.value
            if isinstance(value, ast.Constant):
                if self.exempt("no-workers", not isinstance(value.value, int) or value.value <= 0):
                    continue
                shown, fix = str(value.value), "True"
            else:
                shown = f"`{ast.unparse(value)}`"
                fix = f"{ast.unparse(value)} > 0"
            if self.exempt("endless-sampler", _endless_sampler(file, call)):
                continue
            if self.exempt(
                "in-memory-dataset", items_in_memory(file, call) or items_on_device(file, call)
            ):
                continue
            if self.exempt("per-item-evaluation", per_item_evaluation(file, call)):
                continue
            names = {name for t in assign.targets if (name := terminal_name(t)) is not None}
            loop = self._repeated_iteration(file, names, assign)
            if loop is None:
                continue
            yield self.report(
                file,
                call,
                loader=", ".join(sorted(names)),
                workers=shown,
                loop=loop.lineno,
                value=fix,
            )

    @staticmethod
    def _repeated_iteration(file: PythonFile, names: set[str], assign: ast.Assign):
        """The outer loop in which a loader named `names` is iterated (or handed on) every pass."""
        # `self.train_loader = DataLoader(...)` in `__init__` is iterated by other methods: look at
        # every `self.train_loader` in the file. A local name is looked for in its own function.
        on_self = any(
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            for t in assign.targets
        )
        home = file.enclosing_function(assign)
        scope = file.tree if on_self else (home or file.tree)
        for node in ast.walk(scope):
            if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(
                node.ctx, ast.Load
            ):
                continue
            if terminal_name(node) not in names:
                continue
            if on_self:
                if not (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    continue
            elif file.enclosing_function(node) is not home:
                continue
            parent = file.parent(node)
            if isinstance(parent, ast.Attribute):
                continue  # `loader.sampler.set_epoch(epoch)`, `len(loader.dataset)`: not iterated
            if isinstance(parent, ast.Call) and terminal_name(parent.func) == "len":
                continue
            child: ast.AST = node
            for ancestor in file.ancestors(node):
                if isinstance(ancestor, SCOPES):
                    break
                if isinstance(ancestor, LOOPS):
                    is_iter = (
                        isinstance(ancestor, (ast.For, ast.AsyncFor)) and child is ancestor.iter
                    )
                    if not is_iter:
                        # A loader rebuilt inside that loop is new each pass: persistence cannot help.
                        inside = any(a is ancestor for a in file.ancestors(assign))
                        return None if inside else ancestor
                child = ancestor
        return None


_ENDLESS_NAME = re.compile(r"infinite|endless|forever|repeat", re.IGNORECASE)


def _endless_sampler(file: PythonFile, call: ast.Call) -> bool:
    """The loader's sampler never ends: a sampler class named so (`InfiniteSampler`,
    `RepeatingSampler`), or one of this module whose `__iter__` loops `while True` or cycles."""
    for name in ("sampler", "batch_sampler"):
        kw = keyword(call, name)
        if kw is None:
            continue
        for node in ast.walk(kw.value):
            if not isinstance(node, ast.Call):
                continue
            cls = terminal_name(node.func) or ""
            if _ENDLESS_NAME.search(cls):
                return True
            for defined in file.nodes(ast.ClassDef):
                if defined.name == cls and _iterates_forever(defined):
                    return True
    return False


def _iterates_forever(cls: ast.ClassDef) -> bool:
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__iter__":
            for node in ast.walk(item):
                if (
                    isinstance(node, ast.While)
                    and isinstance(node.test, ast.Constant)
                    and node.test.value
                ):
                    return True
                if isinstance(node, ast.Call) and terminal_name(node.func) in ("cycle", "count"):
                    return True
    return False
