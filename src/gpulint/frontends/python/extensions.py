"""Compiled extension facts: does this module run the project's own compiled kernels?

A project's CUDA extension is a binary module: built at run time with
`torch.utils.cpp_extension.load(...)`/`load_inline(...)`, or at install time and imported under
PyTorch's own convention for a binary module, `_C` (`from . import _C`, `import pkg._C as _C`,
`from pkg._C import rasterize`, `_C = utils.get_extension()`). `runs_compiled_ops` says the
module calls into one: a function of the binary module, typically from the `forward` and
`backward` of a `torch.autograd.Function`. Such ops run in whatever precision their kernels were
written for; autocast changes nothing in them.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import MemoKey

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_BUILDERS = {"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"}
_BINARY = "_C"
_COMPILED: MemoKey[frozenset[str]] = MemoKey("names bound to compiled extensions")
_RUNS: MemoKey[bool] = MemoKey("runs compiled extension ops")


def compiled_names(file: PythonFile) -> frozenset[str]:
    """Names the module binds to a compiled extension (or to functions imported from one)."""
    return file.memo.get(_COMPILED, lambda: frozenset(_compiled_names(file)))


def _compiled_names(file: PythonFile) -> set[str]:
    names: set[str] = set()
    for node in file.nodes(ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[-1] == _BINARY and alias.asname and parts[0] != "torch":
                    names.add(alias.asname)
            continue
        module = (node.module or "").split(".")
        if not node.level and module[0] == "torch":
            continue  # PyTorch's own binary module, not the project's
        from_binary = module[-1] == _BINARY
        for alias in node.names:
            if alias.name == "*":
                continue
            if from_binary or alias.name == _BINARY:
                names.add(alias.asname or alias.name)
    for assign in file.nodes(ast.Assign):
        if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
            continue
        target = assign.targets[0].id
        built = isinstance(assign.value, ast.Call) and file.qualname(assign.value) in _BUILDERS
        if built or (target == _BINARY and isinstance(assign.value, ast.Call)):
            names.add(target)
    return names


def runs_compiled_ops(file: PythonFile) -> bool:
    """The module calls a function of a compiled extension it binds (`_C.rasterize(...)`,
    `backend.march_rays(...)` with `backend = load(...)`)."""
    return file.memo.get(_RUNS, lambda: _runs(file))


def _runs(file: PythonFile) -> bool:
    names = compiled_names(file)
    if not names:
        return False
    for call in file.nodes(ast.Call):
        func = call.func
        root: ast.AST = func
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if isinstance(root, ast.Name) and root.id in names:
            return True
    return False
