"""Integer widths in Triton kernels: which values are 64-bit, and the products of a program id
with a run-time integer argument that offset a pointer.

Triton gives `tl.program_id` the type int32, and an integer argument int32 unless its value
does not fit (then int64, chosen per launch), so `pid * stride` is an int32 product even where
the tensor it indexes holds more than 2^31 elements. A value is 64-bit here when it is cast
(`x.to(tl.int64)`, `tl.cast(x, tl.int64)`), annotated (`stride: tl.int64`), or assigned from
an expression holding such a value; the names are followed through assignments, not by their
order, so a cast anywhere in the kernel widens the name everywhere (never wrongly wide-alarmed).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.python.triton.kernels import Kernel
from gpulint.frontends.python.triton.literals import tl_name
from gpulint.frontends.python.triton.offsets import ARANGE, BLOCKPTR, PROGRAM, TILE, flow

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_PRODUCTS: MemoKey[dict[int, list[IndexProduct]]] = MemoKey("triton.index_products")
_ASSIGNS: MemoKey[dict[int, dict[int, tuple[set[str], ast.AST, bool]]]] = MemoKey(
    "triton.kernel_assignments"
)

# The pointer a memory operation reads or writes through: its first argument (or keyword).
_POINTER_OPS = {
    "load": "pointer",
    "store": "pointer",
    "make_block_ptr": "base",
    "make_tensor_descriptor": "base",
    "atomic_add": "pointer",
    "atomic_max": "pointer",
    "atomic_min": "pointer",
    "atomic_cas": "pointer",
    "atomic_xchg": "pointer",
    "atomic_and": "pointer",
    "atomic_or": "pointer",
    "atomic_xor": "pointer",
}
_WIDE = re.compile(r"\b(?:u?int64)\b")
_POINTER_NAME = re.compile(r"(?i)ptr|pointer")


@dataclass(frozen=True)
class IndexProduct:
    """`index * size` in a kernel: `index` derived from a program id alone, `size` a run-time
    integer parameter (not constexpr, not a pointer by its name), the product feeding the
    pointer of a load, store or atomic that addresses a tile (an `arange` in its offsets), or
    the base of a block pointer."""

    node: ast.BinOp
    index: ast.expr
    size: str
    wide: bool  # either side is 64-bit: cast, annotated, or assigned from such a value
    # The only term stepped by a run-time size in some tile pointer: the row offset of a 2-D
    # tensor (`x_ptr + row * stride + cols`), not one term of a batch/head decomposition, nor
    # the head offset of a pointer that also steps its rows by a run-time stride
    # (`cur_head * stride_h + offs_m[:, None] * stride_m`: in a token-major layout the head
    # stride is small, and the large term is not the program id's).
    alone: bool = False

    @property
    def text(self) -> str:
        return ast.unparse(self.node)


def _assignments(file: PythonFile, kernel: Kernel) -> dict[int, tuple[set[str], ast.AST, bool]]:
    """The kernel's assignment statements, from the semantic model's bindings: by statement,
    the names it binds, the value it assigns (the whole right-hand side of an unpacking) and
    whether it annotates them as 64-bit."""
    cache = file.memo.get(_ASSIGNS, dict)
    if id(kernel.node) in cache:
        return cache[id(kernel.node)]
    out: dict[int, tuple[set[str], ast.AST, bool]] = {}
    cache[id(kernel.node)] = out
    for name, bindings in file.model.table(kernel.node).items():
        for b in bindings:
            if not b.is_assignment:
                continue
            value = b.value if b.value is not None else getattr(b.node, "value", None)
            if value is None:
                continue
            annotation = getattr(b.node, "annotation", None)
            wide = annotation is not None and bool(_WIDE.search(ast.unparse(annotation)))
            entry = out.setdefault(id(b.node), (set(), value, wide))
            entry[0].add(name)
    return out


def wide_names(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Names in the kernel that hold a 64-bit integer: parameters annotated `tl.int64`, and
    names assigned anywhere from an expression with an int64 cast or another such name."""
    out = {
        b.name
        for bindings in file.model.table(kernel.node).values()
        for b in bindings
        if b.kind == "param"
        and getattr(b.node, "annotation", None) is not None
        and _WIDE.search(ast.unparse(b.node.annotation))  # type: ignore[attr-defined]
    }
    assigns = list(_assignments(file, kernel).values())
    for names, _, annotated in assigns:
        if annotated:
            out |= names
    changed = True
    while changed:
        changed = False
        for names, value, _ in assigns:
            if names <= out:
                continue
            if is_wide(file, value, frozenset(out)):
                out |= names
                changed = True
    return frozenset(out)


def widens_anywhere(file: PythonFile, kernel: Kernel) -> bool:
    """The kernel widens some integer to 64 bits: an int64 cast, conversion or annotation
    anywhere in it (its author has weighed which offsets need 64 bits)."""
    return bool(wide_names(file, kernel)) or is_wide(file, kernel.node, frozenset())


def is_wide(file: PythonFile, node: ast.AST, wide: frozenset[str]) -> bool:
    """The expression holds a 64-bit value: an int64 cast or conversion in it, or a wide name."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in wide:
            return True
        if isinstance(n, ast.Call):
            is_to = isinstance(n.func, ast.Attribute) and n.func.attr == "to"
            if (is_to or tl_name(file, n) == "cast") and _WIDE.search(ast.unparse(n)):
                return True
    return False


def _pointer_roots(file: PythonFile, kernel: Kernel) -> list[ast.AST]:
    """The pointer arguments of the kernel's memory operations that address a tile (an
    `arange` in their offsets, or a block pointer), not one element per program."""
    f = flow(file, kernel)
    roots: list[ast.AST] = []
    for call in ast.walk(kernel.node):
        if not isinstance(call, ast.Call):
            continue
        op = tl_name(file, call)
        if op not in _POINTER_OPS:
            continue
        arg = call.args[0] if call.args else None
        arg = next((k.value for k in call.keywords if k.arg == _POINTER_OPS[op]), arg)
        if arg is None:
            continue
        if op in ("make_block_ptr", "make_tensor_descriptor") or f.of(arg).bits & (
            ARANGE | TILE | BLOCKPTR
        ):
            roots.append(arg)
    return roots


def _reaching_names(file: PythonFile, kernel: Kernel, root: ast.AST) -> frozenset[str]:
    """Every name whose value reaches `root` through assignments in the kernel (by name, in
    any order)."""
    names = {n.id for n in ast.walk(root) if isinstance(n, ast.Name)}
    assigns = list(_assignments(file, kernel).values())
    changed = True
    while changed:
        changed = False
        for targets, value, _ in assigns:
            if targets & names:
                more = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - names
                if more:
                    names |= more
                    changed = True
    return frozenset(names)


def index_products(file: PythonFile, kernel: Kernel) -> list[IndexProduct]:
    """Every `index * size` of the kernel (see `IndexProduct`), in source order (cached)."""
    cache = file.memo.get(_PRODUCTS, dict)
    key = id(kernel.node)
    if key not in cache:
        cache[key] = _index_products(file, kernel)
    return cache[key]


def _index_products(file: PythonFile, kernel: Kernel) -> list[IndexProduct]:
    f = flow(file, kernel)
    wide = wide_names(file, kernel)
    sizes = {p for p in kernel.params if p not in kernel.constexprs and not _POINTER_NAME.search(p)}
    candidates: list[tuple[ast.BinOp, ast.expr, str]] = []
    # Other terms stepped by a run-time size: `offs_m[:, None] * stride_m` (a tile of rows),
    # `k_loc[:, None] * stride_kbs` (rows gathered by loaded indices), `i * stride` (a loop).
    strided: list[ast.BinOp] = []
    for node in ast.walk(kernel.node):
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Mult):
            continue
        for index, factor in ((node.left, node.right), (node.right, node.left)):
            if not isinstance(factor, ast.Name) or factor.id not in sizes:
                continue
            value = f.of(index)
            if value.pure_index and PROGRAM in value.origins:
                candidates.append((node, index, factor.id))
            else:
                strided.append(node)
            break
    if not candidates:
        return []
    # Which tile pointers each product feeds: in the pointer expression itself, or in the
    # value of an assignment to a name that reaches it.
    fed: dict[int, list[int]] = {}  # id(product) -> the roots it feeds
    feeding: dict[int, set[str]] = {}  # root -> the products (as text) feeding it
    rows_tiled: set[int] = set()  # roots with another term stepped by a run-time size
    for r, root in enumerate(_pointer_roots(file, kernel)):
        names = _reaching_names(file, kernel, root)
        inside = {id(n) for n in ast.walk(root)}
        for node, _, _ in candidates:
            if id(node) in inside or _assigned_to(file, node, names, kernel):
                fed.setdefault(id(node), []).append(r)
                feeding.setdefault(r, set()).add(ast.unparse(node))
        if any(id(t) in inside or _assigned_to(file, t, names, kernel) for t in strided):
            rows_tiled.add(r)
    out: list[IndexProduct] = []
    for node, index, size in candidates:
        roots = fed.get(id(node))
        if not roots:
            continue
        alone = any(len(feeding[r]) == 1 and r not in rows_tiled for r in roots)
        wider = is_wide(file, index, wide) or size in wide
        out.append(IndexProduct(node, index, size, wider, alone))
    out.sort(key=lambda p: (p.node.lineno, p.node.col_offset))
    return out


def _assigned_to(file: PythonFile, node: ast.AST, names: frozenset[str], kernel: Kernel) -> bool:
    """`node` sits in the value of an assignment to one of `names`."""
    statements = _assignments(file, kernel)
    for anc in file.ancestors(node):
        if anc is kernel.node:
            return False
        if id(anc) in statements:
            return bool(statements[id(anc)][0] & names)
    return False
