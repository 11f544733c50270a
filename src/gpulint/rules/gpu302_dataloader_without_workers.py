import ast

from gpulint.diagnostics import Severity
from gpulint.frontends.python.datasets import (
    items_in_memory,
    items_on_device,
    per_item_evaluation,
    token_batches,
    tokenizes_per_item,
)
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.model import SCOPES
from gpulint.frontends.python.names import has_star_kwargs, keyword, terminal_name
from gpulint.frontends.python.options import documented_elsewhere, option_default
from gpulint.frontends.python.tensors import assigned_values
from gpulint.rule import Exemption, Rule

# Modules that decode or augment samples on the host.
_DECODERS = {
    "PIL",
    "cv2",
    "librosa",
    "soundfile",
    "torchaudio",
    "albumentations",
    "decord",
    "av",
    "imageio",
}
_NUM_WORKERS_POSITION = (
    5  # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers)
)


def is_dataloader(file: PythonFile, call: ast.Call) -> bool:
    q = file.qualname(call)
    return bool(q and q.startswith("torch.utils.data") and q.endswith(".DataLoader"))


def _dataset_exprs(file: PythonFile, call: ast.Call) -> list[ast.AST]:
    dataset = call.args[0] if call.args else getattr(keyword(call, "dataset"), "value", None)
    if dataset is None:
        return []
    exprs = [dataset]
    if isinstance(dataset, ast.Name):
        values = assigned_values(file, file.enclosing_function(call), dataset.id)
        exprs += [v for v in values if v is not None]
    return exprs


def _decodes_per_sample(file: PythonFile, call: ast.Call) -> bool:
    """Plain evidence of per-sample host work: a `transform=`, a torchvision dataset, a dataset
    class of this module that decodes images or audio, or (for a dataset from elsewhere) a module
    that decodes them. Then the cost is sure; otherwise it is only likely."""
    classes = {c.name: c for c in file.nodes(ast.ClassDef)}
    local = []
    for expr in _dataset_exprs(file, call):
        for node in ast.walk(expr):
            if isinstance(node, ast.keyword) and node.arg and "transform" in node.arg:
                return True
            if isinstance(node, ast.Call):
                q = file.qualname(node) or ""
                name = terminal_name(node.func) or ""
                if q.startswith("torchvision.datasets") or "ImageFolder" in name:
                    return True
                if name in classes:
                    local.append(classes[name])
    if local:
        return any(_uses_decoder(file, c) for c in local)
    return any(_is_decoder(q) for q in file.bindings.values())


def _works_per_item(file: PythonFile, call: ast.Call) -> bool:
    """Stricter than `_decodes_per_sample`: every sample is decoded or transformed when it is
    read: a transform applied on access (`transform=`, `.with_transform(f)`, a torchvision
    dataset), or a dataset class of this module whose `__getitem__` decodes or transforms outside
    any `if` (a class that decodes everything in `__init__` and indexes a list has no per-item
    work, and an optional branch is not what a default run pays)."""
    classes = {c.name: c for c in file.nodes(ast.ClassDef)}
    dataset = call.args[0] if call.args else getattr(keyword(call, "dataset"), "value", None)
    if isinstance(dataset, ast.Name):
        # `dataset.set_transform(f)` as a statement before the loader is built
        scope = file.enclosing_function(call) or file.tree
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("set_transform", "with_transform")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == dataset.id
            ):
                return True
    for expr in _dataset_exprs(file, call):
        for node in ast.walk(expr):
            if isinstance(node, ast.keyword) and node.arg and "transform" in node.arg:
                return True
            if not isinstance(node, ast.Call):
                continue
            q = file.qualname(node) or ""
            name = terminal_name(node.func) or ""
            if name in ("with_transform", "set_transform") or q.startswith("torchvision.datasets"):
                return True
            helper = file.model.resolve_callee(node)
            if helper is not None and _returns_transformed(helper):
                return True  # `train_dataset = make_train_dataset(...)`, a helper of this module
            cls = classes.get(name)
            if cls is not None and any(
                _decodes_unconditionally(file, item)
                for item in cls.body
                if isinstance(item, ast.FunctionDef) and item.name in ("__getitem__", "__iter__")
            ):
                return True
    return False


def _returns_transformed(helper: ast.AST) -> bool:
    """A dataset builder of this module that attaches a transform applied on access."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("with_transform", "set_transform")
        for n in ast.walk(helper)
    )


def _decodes_unconditionally(file: PythonFile, method: ast.FunctionDef) -> bool:
    stack: list[ast.AST] = list(method.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.If, ast.IfExp, *SCOPES)):
            continue
        if isinstance(node, ast.Call):
            func = node.func
            if _is_decoder(file.qualname(node) or "") or (
                isinstance(func, ast.Attribute) and "transform" in func.attr.lower()
            ):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _is_decoder(qualified: str) -> bool:
    return qualified.split(".")[0] in _DECODERS or qualified.startswith("torchvision.transforms")


def _uses_decoder(file: PythonFile, cls: ast.ClassDef) -> bool:
    for node in ast.walk(cls):
        if isinstance(node, ast.Name) and _is_decoder(file.bindings.get(node.id, "")):
            return True
        if isinstance(node, ast.Attribute) and "transform" in node.attr:
            return True
    return False


def _has_step_loop(file: PythonFile) -> bool:
    """Training (or evaluation) code: a loop in the module trains or feeds a model, or a
    framework trainer runs the loop (`trainer.fit(...)`)."""
    if any(file.loops.is_step_loop(loop) for loop in file.nodes(ast.For, ast.AsyncFor, ast.While)):
        return True
    return any(
        isinstance(call.func, ast.Attribute) and call.func.attr == "fit"
        for call in file.nodes(ast.Call)
    )


class DataLoaderWithoutWorkers(Rule):
    """
    ## What it does
    Finds `torch.utils.data.DataLoader(...)` in CUDA code with `num_workers` missing or `0`: the
    whole input pipeline (reading, decoding, augmenting, collating) runs in the training process,
    between GPU steps. `num_workers` read from the script's own command line counts with the
    option's default (`num_workers=args.workers` with `--workers` defaulting to 0) where every
    sample is decoded or transformed when it is read, unless the script's folder documents a
    value: a command in a README or `.sh` launch script beside it that runs the script with
    `--workers=4`, or a README that names the option. Other `num_workers` from a variable are
    the author's choice; CPU-only modules are not checked.

    The finding is a warning when the samples plainly need host work (a `transform=`, a
    torchvision dataset, a dataset class that decodes images or audio), and info otherwise
    (datasets defined elsewhere), where the cost is likely but smaller.

    ## Why is this bad?
    With no workers, every batch is loaded synchronously on the main thread: the GPU idles while
    Python decodes images or tokenises text, and the CPU idles while the GPU computes. Worker
    processes prepare the next batches in parallel, so loading overlaps with compute. A good
    starting point is the number of CPU cores per GPU process (often 4-8); measure with
    `gpulint bench dataloader`.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=True)
    ```

    ## Use instead
    ```python
    workers = min(8, os.cpu_count() // max(1, torch.cuda.device_count()))
    loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=True,
                        num_workers=workers, persistent_workers=workers > 0)
    ```

    ## Known problems
    In-memory datasets are judged by what their `__getitem__` does, not by their name (see
    `in-memory-dataset`): a call the module cannot read (a transform, a decoder, a tokenizer),
    data passed from a caller it cannot trace, and memory maps keep the finding. So does a
    `transform` applied under an `if` in `__getitem__`, even where the default run passes none.

    ## References
    - [torch.utils.data: single- and multi-process data loading](https://docs.pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading)
    - [PyTorch performance tuning guide: asynchronous data loading](https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    code = "GPU302"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "dataloader-without-workers"
    bench = "dataloader"
    bench_claim = "workers"
    triggers = ("DataLoader",)
    message = (
        "DataLoader {how}: batches are loaded in the training process while the GPU waits; set "
        "`num_workers` to the CPU cores per GPU, e.g. "
        "`num_workers=min(8, os.cpu_count() // torch.cuda.device_count())`"
    )
    option_message = (
        "DataLoader `num_workers={value}` is 0 by default on the script's command line: unless "
        "the user passes a value, batches are loaded in the training process while the GPU "
        "waits; default the option to the CPU cores per GPU, e.g. "
        "`min(8, os.cpu_count() // torch.cuda.device_count())`"
    )
    tags = ("input-pipeline",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loader reads a few batches, not a training run's.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=64)\nfor x, y in loader:\n"
            "    loss = model(x.cuda(), y.cuda())\n    loss.backward()\n",
            filename="tests/test_data.py",
        ),
        Exemption(
            "no-step-loop",
            "A module with no training or evaluation loop (a data preparation script, a "
            "loader factory): where the batches go, and at what pace, is not in sight.",
            fixture="python/gpu302_silent_data_prep_script.py",
        ),
        Exemption(
            "items-on-device",
            "A dataset or `collate_fn` that hands out CUDA tensors (a `TensorDataset` of GPU "
            "tensors): they cannot be handed to worker processes.",
            "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
            "l = DataLoader(TensorDataset(x.cuda(), y.cuda()), batch_size=64)\n"
            "for a, b in l:\n    model(a).backward()\n",
        ),
        Exemption(
            "in-memory-dataset",
            "A loader over data in memory: a `TensorDataset`, a dataset class of the module that "
            "only indexes tensors or arrays loaded whole in `__init__` (`np.load(path)`, "
            "`torch.load(path)`, tensors built there or passed from this file) or returns values "
            "it holds, a list or `range` whose `collate_fn` does no work. Indexing memory costs "
            "microseconds a sample; workers would only add processes.",
            fixture="python/gpu301_gpu302_gpu303_silent_in_memory_datasets.py",
        ),
        Exemption(
            "per-item-evaluation",
            "A `batch_size=1` loader that only evaluation loops iterate, each reading a value "
            "back per sample (`.item()`): a one-off pass that waits for the GPU at every sample "
            "anyway.",
            """
import torch
from PIL import Image
from torch.utils.data import DataLoader
val_loader = DataLoader(photos, batch_size=1)
for image in val_loader:
    scores.append(model(image.cuda()).sigmoid().item())
""",
        ),
        Exemption(
            "pre-tokenised-text",
            "Pre-tokenised text (a tokenizer and no images, audio or video in the module, unless "
            "a dataset class of the module tokenises in `__getitem__`): indexing and padding rows "
            "is small beside the step.",
            fixture="python/gpu301_gpu302_silent_token_batches.py",
        ),
        Exemption(
            "kwargs-may-set-it",
            "A loader built with `**kwargs`, or with `num_workers` passed positionally.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "l = DataLoader(ds, **kwargs)\nfor x in l:\n    model(x.cuda()).backward()\n",
        ),
        Exemption(
            "option-without-per-item-work",
            "`num_workers` from a command-line option defaulting to 0, where no sample is plainly "
            "decoded or transformed when read: the default run's cost is not sure enough.",
            """
import argparse
import torch
from torch.utils.data import DataLoader
parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()
loader = DataLoader(ds, batch_size=64, num_workers=args.workers)
for x, y in loader:
    model(x.cuda(), y.cuda()).backward()
""",
        ),
        Exemption(
            "option-documented",
            "`num_workers` from a command-line option defaulting to 0, where the script's folder "
            "documents a value: a README or `.sh` launch script beside it that runs the script "
            "with `--workers=4`, or a README that names the option.",
            files=(
                (
                    "train.py",
                    """import argparse
import torch
import torchvision
from torch.utils.data import DataLoader
parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()
ds = torchvision.datasets.ImageFolder("data/train", transform=augment)
loader = DataLoader(ds, batch_size=64, num_workers=args.workers)
for x, y in loader:
    model(x.cuda(), y.cuda()).backward()
""",
                ),
                ("README.md", "Train with:\n\n    python train.py --workers 8\n"),
            ),
        ),
        Exemption(
            "dataset-reads-batches",
            "`num_workers=0` with `batch_size=None`: a dataset that reads whole batches itself, "
            "with no workers on purpose.",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "l = DataLoader(shards, batch_size=None, num_workers=0)\n"
            "for x in l:\n    model(x.cuda()).backward()\n",
        ),
    )

    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, num_workers=8, pin_memory=True)\nx.cuda()\n",
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, num_workers=args.workers)\nx.cuda()\n",
        "from torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=4)  # CPU-only module\n",
    ]
    INVALID = [
        """
import torch
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=64, shuffle=True, pin_memory=True)
for x, y in loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
""",
        """
import torch
import torch.utils.data
loader = torch.utils.data.DataLoader(ds, num_workers=0)
model.to(device)
trainer.fit(model, loader)
""",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if not file.uses_cuda or not is_dataloader(file, node):
            return
        if self.exempt("test-code", file.is_test):
            return
        if self.exempt("no-step-loop", not _has_step_loop(file)):
            return
        if self.exempt("items-on-device", items_on_device(file, node)):
            return
        if self.exempt("in-memory-dataset", items_in_memory(file, node)):
            return
        if self.exempt("per-item-evaluation", per_item_evaluation(file, node)):
            return
        if self.exempt(
            "pre-tokenised-text", token_batches(file) and not tokenizes_per_item(file, node)
        ):
            return
        # Sure when samples are decoded or augmented; only likely for pre-tokenised text and such.
        severity = None if _decodes_per_sample(file, node) else Severity.INFO
        workers = keyword(node, "num_workers")
        if workers is None:
            if self.exempt(
                "kwargs-may-set-it",
                has_star_kwargs(node) or len(node.args) > _NUM_WORKERS_POSITION,
            ):
                return
            yield self.report(file, node, severity=severity, how="without `num_workers`")
        elif (option := option_default(file, workers.value)) is not None:
            dest, default = option
            if (
                type(default) is int
                and default == 0
                and not self.exempt("option-without-per-item-work", not _works_per_item(file, node))
                and not self.exempt("option-documented", documented_elsewhere(file, dest))
            ):
                # `num_workers=args.workers` with `--workers` defaulting to 0: a run with the
                # script's own defaults loads in the training process.
                shown = ast.unparse(workers.value)
                yield self.report(
                    file, workers, self.option_message, severity=severity, value=shown
                )
        elif isinstance(workers.value, ast.Constant) and workers.value.value == 0:
            batch_size = keyword(node, "batch_size")
            if self.exempt(
                "dataset-reads-batches",
                batch_size is not None
                and isinstance(batch_size.value, ast.Constant)
                and batch_size.value.value is None,
            ):
                return
            yield self.report(file, workers, severity=severity, how="with `num_workers=0`")
