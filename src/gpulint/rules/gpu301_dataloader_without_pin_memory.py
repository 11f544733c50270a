import ast

from gpulint.frontends.python.datasets import (
    has_workers,
    items_in_memory,
    items_on_device,
    per_item_evaluation,
    tiny_samples,
    token_batches,
)
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword, terminal_name
from gpulint.frontends.python.transfers import device_transfer, root_name, transfer_receiver
from gpulint.rule import Exemption, Rule

_PREPARE = ("prepare", "prepare_data_loader")


def _accelerate_moves_batches(file: PythonFile, loader: ast.Call) -> bool:
    """The loader is handed to a Hugging Face Accelerate `accelerator.prepare(...)`, and the
    module does not turn on accelerate's non-blocking copies or turn off its device placement.
    Then accelerate moves each batch with a blocking `.to(device)`: from pinned memory that copy
    is only somewhat faster, a few milliseconds per batch against a step of hundreds, and the
    overlap `pin_memory` is for never happens."""
    if not any(q.split(".")[0] == "accelerate" for q in file.bindings.values()):
        return False
    for call in file.nodes(ast.Call):
        name = terminal_name(call.func)
        if name not in ("Accelerator", "DataLoaderConfiguration"):
            continue
        for kw in ("non_blocking", "device_placement"):
            option = keyword(call, kw)
            if option is not None and not (
                isinstance(option.value, ast.Constant)
                and option.value.value is (kw == "device_placement")
            ):
                return False  # non-blocking copies (or the user's own) may overlap: pinning pays
    parent = file.parent(loader)
    target = None
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
    # a local name is looked for in its function; `self.loader` anywhere in the module
    scope = file.enclosing_function(loader) if isinstance(target, ast.Name) else None
    shown = ast.unparse(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
    for prepare in ast.walk(scope or file.tree):
        if not (
            isinstance(prepare, ast.Call)
            and isinstance(prepare.func, ast.Attribute)
            and prepare.func.attr in _PREPARE
            and (terminal_name(prepare.func.value) or "").lower().endswith("accelerator")
        ):
            continue
        for arg in prepare.args:
            if arg is loader or (shown is not None and ast.unparse(arg) == shown):
                return True
    return False


# What a collate function may call and still hand out the samples as they are (no batched tensor).
_PLAIN_CALLS = {"list", "tuple", "dict", "filter", "sorted", "zip", "len", "isinstance", "map"}


def _collates_nothing(file: PythonFile, loader: ast.Call) -> bool:
    """The loader's `collate_fn` is a function of this module that builds no tensor: it hands
    out the samples as a list (`list(filter(None, batch))`), with no `torch` call and no call of
    another function of the module that could stack them."""
    collate = keyword(loader, "collate_fn")
    if collate is None:
        return False
    if isinstance(collate.value, ast.Lambda):
        body: ast.AST = collate.value.body
    elif isinstance(collate.value, ast.Name):
        defs = [f for f in file.nodes(ast.FunctionDef) if f.name == collate.value.id]
        if len(defs) != 1:
            return False
        body = defs[0]
    else:
        return False
    for call in ast.walk(body):
        if not isinstance(call, ast.Call):
            continue
        if (file.qualname(call) or "").split(".")[0] == "torch" or "collate" in ast.unparse(
            call.func
        ):
            return False
        if isinstance(call.func, ast.Name) and call.func.id not in _PLAIN_CALLS:
            return False  # a helper of the module, or something else that may build tensors
    return True


def _batches_stay_on_host(file: PythonFile, loader: ast.Call) -> bool:
    """A pass over a loader whose batches are lists of samples (`_collates_nothing`) that never
    reach the GPU as loaded: the loop over it moves none of them to a device (a captioning or
    latent-caching tool stacks them into a new tensor, or turns them back into images, on the
    host first). Pinned memory would be copied from by nothing."""
    if not _collates_nothing(file, loader):
        return False
    bound = [
        b
        for bindings in file.model.table(file.model.scope_of(loader)).values()
        for b in bindings
        if b.value is loader
    ]
    if len(bound) != 1:
        return False  # not `loader = DataLoader(...)`
    name = bound[0].name
    scope = file.enclosing_function(loader) or file.tree
    loops = [
        n
        for n in ast.walk(scope)
        if isinstance(n, ast.For)
        and any(isinstance(m, ast.Name) and m.id == name for m in ast.walk(n.iter))
    ]
    if not loops:
        return False
    inside = {id(m) for loop in loops for m in ast.walk(loop)}
    if any(
        isinstance(n, ast.Name)
        and n.id == name
        and isinstance(n.ctx, ast.Load)
        and id(n) not in inside
        for n in ast.walk(scope)
    ):
        return False  # the loader is used elsewhere too (returned, handed to a trainer)
    for loop in loops:
        if file.loops.is_step_loop(loop):
            return False
        # names bound from the batch by unpacking, indexing or an inner loop over it
        derived = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        in_loop = {id(m) for m in ast.walk(loop)} - {id(loop)}
        table = file.model.table(file.model.scope_of(loop))
        for _ in range(3):
            for bound_name, bindings in table.items():
                for b in bindings:
                    if id(b.node) not in in_loop or b.kind not in ("assign", "for"):
                        continue
                    source = b.node.iter if isinstance(b.node, ast.For) else b.value
                    source = source or getattr(b.node, "value", None)  # a tuple unpacked
                    if source is not None and (root_name(source) or "") in derived:
                        derived.add(bound_name)
        for n in ast.walk(loop):
            if (
                isinstance(n, ast.Call)
                and device_transfer(file, n)
                and (root_name(transfer_receiver(n)) or "") in derived
            ):
                return False
    return True


class DataLoaderWithoutPinMemory(Rule):
    """
    ## What it does
    Finds `torch.utils.data.DataLoader(...)` without `pin_memory=True` in a module that uses
    CUDA. A `pin_memory` from a variable is the author's choice; CPU-only modules are not
    checked.

    ## Why is this bad?
    Host-to-device copies from pageable memory go through a staging buffer and cannot overlap
    with compute. From pinned (page-locked) memory the copy engine reads directly, at full PCIe
    or NVLink-C2C speed, and `non_blocking=True` copies overlap with kernels. On an NVIDIA H200
    a 256 MiB host-to-device copy ran at 55 GB/s pinned against 6–10 GB/s pageable, the
    pageable figure bound by the host's own memcpy speed.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)
    for x, y in loader:
        x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
    ```

    ## Known problems
    A dataset is judged by what its `__getitem__` does: a call the module cannot read (a
    transform, `Image.open`, a tokenizer), data a caller passes that the module cannot trace,
    and a memory map (`np.load(path, mmap_mode="r")`) all count as work per sample, and keep
    the finding. With workers, a loader over large in-memory CPU tensors keeps it too: the
    loader's pin-memory thread copies while the step runs, so pinning still pays (as would
    moving the whole dataset to the GPU once).

    ## References
    - [torch.utils.data: memory pinning](https://docs.pytorch.org/docs/stable/data.html#memory-pinning)
    - [CUDA semantics: use pinned memory buffers](https://docs.pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers)
    """

    code = "GPU301"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "dataloader-without-pin-memory"
    bench = "dataloader"
    bench_claim = "pin_memory"
    triggers = ("DataLoader",)
    message = (
        "DataLoader without `pin_memory=True` in CUDA code: batches are copied from pageable "
        "memory; pass `pin_memory=True` and move batches with `.to(device, non_blocking=True)`"
    )
    tags = ("input-pipeline",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loader copies a few batches.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "l = DataLoader(ds, batch_size=4)\nmodel.cuda()\n",
            filename="tests/test_data.py",
        ),
        Exemption(
            "items-on-device",
            "A dataset or `collate_fn` that hands out CUDA tensors (a `collate_fn` of the module "
            "that moves the batch to the GPU): there is nothing to pin.",
            fixture="python/gpu301_gpu302_silent_cuda_dataset.py",
        ),
        Exemption(
            "in-memory-without-workers",
            "A loader over data already in memory (a `TensorDataset`, a list or `range` of "
            "values, a dataset class of the module whose `__getitem__` only indexes tensors or "
            "arrays loaded whole when it was built) with no worker processes: the loader would "
            "pin each batch on the main thread, between steps, a one-thread host copy (4.8 GB/s "
            "on the H200's host) that costs what the pageable copy it replaces does (6.8 GB/s).",
            "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
            "l = DataLoader(TensorDataset(features, labels), batch_size=256)\n"
            "for x, y in l:\n    model(x.cuda()).backward()\n",
        ),
        Exemption(
            "per-item-evaluation",
            "A `batch_size=1` loader that only evaluation loops iterate, each reading a value "
            "back to the host per sample (`.item()`): such a pass waits for the GPU at every "
            "sample, so a copy that could overlap would not.",
            """
import torch
from torch.utils.data import DataLoader
val_loader = DataLoader(photos, batch_size=1)
for image in val_loader:
    scores.append(model(image.cuda()).sigmoid().item())
""",
        ),
        Exemption(
            "small-batches",
            "Text pipelines (a tokenizer and no images, audio or video) and torchvision's "
            "small-image datasets (MNIST, CIFAR, SVHN): a batch of token ids or of 32x32 images "
            "is a few hundred KiB, and pinning it saves microseconds.",
            fixture="python/gpu301_silent_cifar_loader.py",
        ),
        Exemption(
            "accelerate-blocking-copies",
            "A loader handed to Hugging Face Accelerate's `accelerator.prepare(...)`, which "
            "copies each batch with a blocking `.to()` (unless the module turns on its "
            "`non_blocking` option or turns off its `device_placement`): pinning then only "
            "speeds up a copy of a few milliseconds, and overlaps nothing.",
            "import torch\nfrom accelerate import Accelerator\nfrom torch.utils.data import DataLoader\n"
            "accelerator = Accelerator()\nl = DataLoader(ds, batch_size=4)\n"
            "model, l = accelerator.prepare(model, l)\nmodel.cuda()\n",
        ),
        Exemption(
            "batches-stay-on-host",
            "A loader whose `collate_fn` (a function of the module that builds no tensor) hands "
            "out lists of samples that the loop over them never moves to a device as loaded (a "
            "captioning or latent-caching tool that stacks them into a new tensor, or turns them "
            "back into images, on the host): nothing is copied from the pinned memory.",
            fixture="python/gpu301_silent_host_side_batches.py",
        ),
        Exemption(
            "kwargs-may-set-it",
            "A loader built with `**kwargs`, or with `pin_memory` passed positionally.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "l = DataLoader(ds, **loader_kwargs)\nx.cuda()\n",
        ),
    )

    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, pin_memory=True)\nx.cuda()\n",
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, pin_memory=args.pin)\nx.cuda()\n",
        "from torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=4)  # CPU-only module\n",
    ]
    INVALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=4)\nmodel.cuda()\n",
        "import torch\nfrom torch.utils import data\nl = data.DataLoader(ds, pin_memory=False)\ndevice = torch.device('cuda')\n",
        "import torch\nfrom accelerate import Accelerator\nfrom torch.utils.data import DataLoader\n"
        "accelerator = Accelerator()\nl = DataLoader(ds, batch_size=4)\n"
        "model = accelerator.prepare(model)\nfor x in l:\n    model(x.cuda())\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if not file.uses_cuda or self.exempt("test-code", file.is_test):
            return
        qualified = file.qualname(node)
        if (
            not qualified
            or not qualified.startswith("torch.utils.data")
            or not qualified.endswith(".DataLoader")
        ):
            return
        if self.exempt("items-on-device", items_on_device(file, node)):
            return
        if self.exempt(
            "in-memory-without-workers",
            items_in_memory(file, node) and has_workers(node) is False,
        ):
            return
        if self.exempt("per-item-evaluation", per_item_evaluation(file, node)):
            return
        if self.exempt("small-batches", token_batches(file) or tiny_samples(file, node)):
            return
        if self.exempt("accelerate-blocking-copies", _accelerate_moves_batches(file, node)):
            return
        if self.exempt("batches-stay-on-host", _batches_stay_on_host(file, node)):
            return
        pin = keyword(node, "pin_memory")
        if pin is None:
            if self.exempt("kwargs-may-set-it", has_star_kwargs(node) or len(node.args) > 7):
                return
            yield self.report(file, node)
        elif isinstance(pin.value, ast.Constant) and pin.value.value is False:
            yield self.report(
                file,
                pin,
                "`pin_memory=False` in CUDA code: batches are copied from "
                "pageable memory; use `pin_memory=True` with `non_blocking=True` copies",
            )
