"""Shared by GPU301 and GPU302 (not a rule: modules starting with `_` are not discovered): a
DataLoader whose dataset already hands out CUDA tensors."""

from __future__ import annotations

import ast

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
    """Values assigned to the dataset's name in the loader's function (or module)."""
    if not isinstance(dataset, ast.Name):
        return []
    scope = file.enclosing_function(call) or file.tree
    return [
        node.value
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == dataset.id for t in node.targets)
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
