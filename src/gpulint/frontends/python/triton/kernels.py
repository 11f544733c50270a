"""Triton kernels found in a file: `@triton.jit` functions, their autotune and heuristics
decorators, their constexpr parameters (with defaults), and the calls kernels make of one
another (a `@triton.jit` helper called from other kernels)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.triton.literals import is_triton, tl_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_KERNELS: MemoKey[list[Kernel]] = MemoKey("triton.kernels")
_CALLS: MemoKey[dict[str, list[tuple[Kernel, ast.Call]]]] = MemoKey("triton.calls")


@dataclass
class Kernel:
    node: ast.FunctionDef
    autotune: ast.Call | None  # the `@triton.autotune(...)` (or a `*autotune(...)` wrapper)
    heuristics: list[ast.Call] = field(default_factory=list)
    constexprs: dict[str, ast.expr | None] = field(default_factory=dict)  # name -> default

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def params(self) -> list[str]:
        a = self.node.args
        return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def is_jit_decorator(file: PythonFile, dec: ast.expr) -> bool:
    """`@triton.jit`, `@triton.jit(...)`, `@tr.jit`, `@jit` (from triton import jit)."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    return is_triton(file, target, "jit", "runtime.jit.jit")


def is_autotune_decorator(file: PythonFile, dec: ast.expr) -> bool:
    """`@triton.autotune(configs=...)`, or a project wrapper named `*autotune` taking `configs=`."""
    if not isinstance(dec, ast.Call):
        return False
    if is_triton(file, dec, "autotune", "runtime.autotune"):
        return True
    name = dec.func.attr if isinstance(dec.func, ast.Attribute) else getattr(dec.func, "id", "")
    return name.endswith("autotune") and any(k.arg == "configs" for k in dec.keywords)


def kernels(file: PythonFile) -> list[Kernel]:
    """Every `@triton.jit` function in the file (cached per parsed file)."""
    return file.memo.get(_KERNELS, lambda: _kernels(file))


def _kernels(file: PythonFile) -> list[Kernel]:
    found = []
    for fn in file.nodes(ast.FunctionDef):
        if not any(is_jit_decorator(file, d) for d in fn.decorator_list):
            continue
        autotune = next(
            (
                d
                for d in fn.decorator_list
                if isinstance(d, ast.Call) and is_autotune_decorator(file, d)
            ),
            None,
        )
        heur = [
            d
            for d in fn.decorator_list
            if isinstance(d, ast.Call) and is_triton(file, d, "heuristics")
        ]
        found.append(Kernel(fn, autotune, heur, _constexprs(file, fn)))
    return found


# Named as a pointer or a stride: not a size a mask could bound against.
_NOT_A_SIZE = re.compile(r"(?i)ptr|pointer|stride")


def unread_sizes(kernel: Kernel) -> frozenset[str]:
    """Run-time parameters the kernel's body never reads, other than pointers and strides (by
    their names) and constexprs: the `n_elements` of a kernel that forgot its masks."""
    read = {
        n.id
        for n in ast.walk(kernel.node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    return frozenset(
        p
        for p in kernel.params
        if p not in read and p not in kernel.constexprs and not _NOT_A_SIZE.search(p)
    )


# A size said to be a multiple of the block, in a kernel's docstring or comments: "n_elements
# must be divisible by BLOCK_SIZE", "assumes N is a multiple of BLOCK".
_DIVISIBLE_TEXT = re.compile(r"(?i)\bdivisible\b|\bmultiples? of\b|\bdivides\b|\bevenly\b")


def documents_divisibility(file: PythonFile, kernel: Kernel) -> bool:
    """The kernel's own text (its docstring, comments in its body or on the lines of its
    decorators and signature) says a size is a multiple of a block."""
    first = min([kernel.node.lineno, *(d.lineno for d in kernel.node.decorator_list)])
    last = kernel.node.end_lineno or kernel.node.lineno
    lines = file.text.splitlines()[first - 1 : last]
    doc = ast.get_docstring(kernel.node) or ""
    comments = [line.partition("#")[2] for line in lines if "#" in line]
    return bool(_DIVISIBLE_TEXT.search(doc) or any(_DIVISIBLE_TEXT.search(c) for c in comments))


def hints_alignment(file: PythonFile, kernel: Kernel) -> bool:
    """`tl.multiple_of` / `tl.max_contiguous` / `tl.assume` anywhere in the kernel: its author
    states what its offsets are multiples of."""
    return any(
        isinstance(n, ast.Call) and tl_name(file, n) in ("multiple_of", "max_contiguous", "assume")
        for n in ast.walk(kernel.node)
    )


def kernel_of(file: PythonFile, node: ast.AST) -> Kernel | None:
    """The `@triton.jit` function that `node` sits in, if any."""
    by_node = {k.node: k for k in kernels(file)}
    for a in file.ancestors(node):
        if a in by_node:
            return by_node[a]
    return None


def _constexprs(file: PythonFile, fn: ast.FunctionDef) -> dict[str, ast.expr | None]:
    out: dict[str, ast.expr | None] = {}
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(
        a.defaults
    )
    pairs = [
        *zip(positional, defaults, strict=False),
        *zip(a.kwonlyargs, a.kw_defaults, strict=False),
    ]
    for arg, default in pairs:
        ann = arg.annotation
        if ann is not None and (
            tl_name(file, ann) == "constexpr" or terminal_name(ann) == "constexpr"
        ):
            out[arg.arg] = default
    # `@triton.heuristics({"EVEN_K": lambda args: ...})` values are constexprs too.
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and is_triton(file, dec, "heuristics") and dec.args:
            if isinstance(dec.args[0], ast.Dict):
                for k in dec.args[0].keys:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        out.setdefault(k.value, None)
    return out


def kernel_calls(file: PythonFile) -> dict[str, list[tuple[Kernel, ast.Call]]]:
    """`helper(...)` calls made inside kernels, by the called name (cached per file)."""
    return file.memo.get(_CALLS, lambda: _find_kernel_calls(file))


def _find_kernel_calls(file: PythonFile) -> dict[str, list[tuple[Kernel, ast.Call]]]:
    out: dict[str, list[tuple[Kernel, ast.Call]]] = {}
    jit = {k.name for k in kernels(file)}
    for k in kernels(file):
        for call in ast.walk(k.node):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                if call.func.id in jit:
                    out.setdefault(call.func.id, []).append((k, call))
    return out
