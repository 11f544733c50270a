"""Shared by GPU301 and GPU302 (not a rule: modules starting with `_` are not discovered): a
DataLoader whose dataset already hands out CUDA tensors, or token-ID batches."""

from __future__ import annotations

import ast
import re

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.transfers import device_transfer

_ITEM_METHODS = {"__getitem__", "__iter__", "__getitems__"}


def dataset_on_device(file: PythonFile, call: ast.Call) -> bool:
    """The loader's dataset is a class of this module whose `__getitem__` (or `__iter__`) moves
    its samples to the GPU (`.cuda()`, `.to(device)`): pinning such tensors fails, and worker
    processes would each have to initialise CUDA."""
    dataset = call.args[0] if call.args else getattr(keyword(call, "dataset"), "value", None)
    if dataset is None:
        return False
    names = set()
    for expr in [dataset, *_assigned(file, call, dataset)]:
        if isinstance(expr, ast.Call):
            names.add(terminal_name(expr.func))
    classes = [c for c in file.nodes(ast.ClassDef) if c.name in names]
    return any(_moves_items(file, cls) for cls in classes)


def _assigned(file: PythonFile, call: ast.Call, dataset: ast.AST) -> list[ast.AST]:
    """Values assigned to the dataset's name that may reach the loader (`ds = Cls(...)` above
    it, or in a loop around it), from the model's bindings."""
    if not isinstance(dataset, ast.Name):
        return []
    return [
        b.value
        for b in file.model.bindings_of(dataset.id, before=call)
        if b.kind in ("assign", "annassign") and b.value is not None
    ]


def _moves_items(file: PythonFile, cls: ast.ClassDef) -> bool:
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name in _ITEM_METHODS:
            if any(
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and device_transfer(file, n)
                for n in ast.walk(item)
            ):
                return True
    return False


# Token batches: a text pipeline (a tokenizer, `input_ids`, a padding collator) and nothing that
# reads images, audio or video. Text, because the module's words are the only evidence of what a
# dataset from elsewhere (`load_dataset(...).map(tokenize)`) yields; a word that is only in a
# comment errs on the side of the old behaviour (the finding).
_TOKENS = re.compile(r"tokeniz|input_ids|DataCollator", re.IGNORECASE)
_NOT_TEXT = re.compile(
    r"image|pixel|audio|video|wav|spectrogram|\bmel|torchvision|\bPIL\b|cv2|\btransforms?\b"
    r"|latent|\.npy|\bnp\.load|point_?cloud|voxel",
    re.IGNORECASE,
)


def token_batches(file: PythonFile) -> bool:
    """The module's loaders hand out token-ID batches: a batch of 8 sequences of 2,048 int64 ids
    is 128 KiB, so pinning it saves microseconds, and a pre-tokenised dataset's per-batch host
    work (indexing rows, padding them) is small beside a language-model step."""
    return bool(_TOKENS.search(file.text)) and not _NOT_TEXT.search(file.text)


def tokenizes_per_item(file: PythonFile, call: ast.Call) -> bool:
    """The loader's dataset is a class of this module that tokenises in `__getitem__` (or
    `__iter__`): real host work per sample, which workers would overlap with the step."""
    dataset = call.args[0] if call.args else getattr(keyword(call, "dataset"), "value", None)
    if dataset is None:
        return False
    names = {
        terminal_name(expr.func)
        for expr in [dataset, *_assigned(file, call, dataset)]
        if isinstance(expr, ast.Call)
    }
    for cls in file.nodes(ast.ClassDef):
        if cls.name not in names:
            continue
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name in _ITEM_METHODS:
                for node in ast.walk(item):
                    if isinstance(node, ast.Call) and _TOKENS.search(ast.unparse(node.func)):
                        return True
    return False


# torchvision's small-image datasets: 28x28 greyscale or 32x32 RGB samples.
_TINY_DATASETS = {
    "MNIST",
    "FashionMNIST",
    "KMNIST",
    "EMNIST",
    "QMNIST",
    "CIFAR10",
    "CIFAR100",
    "SVHN",
}


def tiny_samples(file: PythonFile, call: ast.Call) -> bool:
    """The loader's dataset is one of torchvision's small-image datasets (MNIST, CIFAR, SVHN):
    a batch of 64 CIFAR images is 768 KiB, copied in tens of microseconds pinned or not."""
    dataset = call.args[0] if call.args else getattr(keyword(call, "dataset"), "value", None)
    if dataset is None:
        return False
    for expr in [dataset, *_assigned(file, call, dataset)]:
        if isinstance(expr, ast.Call):
            q = file.qualname(expr) or ""
            if q.startswith("torchvision.datasets") and q.rsplit(".", 1)[-1] in _TINY_DATASETS:
                return True
    return False
