"""Which values of a Triton kernel hold tiled offsets (`pid * BLOCK + tl.arange(0, BLOCK)`),
followed by dataflow over its local names, and the masks of its loads and stores: what the
masking rule reads."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.frontends import BackLink, MemoKey
from gpulint.frontends.python.triton.kernels import Kernel, kernel_calls
from gpulint.frontends.python.triton.launches import launch_padded_buffers
from gpulint.frontends.python.triton.literals import ceil_division, label, tl_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_FLOWS: MemoKey[dict[int, OffsetFlow]] = MemoKey("triton.flows")

# What a value of a kernel holds. Sizes and blocks are compared as source text (`BLOCK_M`,
# `2 * BK`): a tile is `start + tl.arange(0, X)` where the start steps by that same X, whatever
# X is called.
INDEX = 1  # a program index (`tl.program_id`), or the index of a loop over `cdiv(n, X)` blocks
ARANGE = 2  # holds `tl.arange(0, X)` (`sizes`: the X)
START = 4  # steps by X: `index * X`, or the induction variable of `range(a, n, X)`
TILE = 8  # `start + tl.arange(0, X)` with the same X (`tiles`: X and what drives it)
BLOCKPTR = 16  # a `tl.make_block_ptr` (`bp_*`)
PADDED = 32  # strided by a size named as rounded or padded (`seqlen_q_rounded`): allocated up
# to a multiple of the block, so its last tile stays inside the buffer
_PADDED_NAME = re.compile(r"rounded|padded", re.IGNORECASE)

PROGRAM, LOOP = "program", "loop"  # what drives a tile: the program id, or a loop over blocks
_ALL = INDEX | ARANGE | START | TILE | BLOCKPTR | PADDED


@dataclass(frozen=True)
class Offsets:
    """What an expression holds (bits above); for block pointers, per dimension, the block
    label, which dimensions are tiled, and which have a compile-time shape."""

    bits: int = 0
    origins: frozenset[str] = frozenset()  # of an INDEX: PROGRAM / LOOP
    starts: frozenset[tuple[str, str]] = frozenset()  # of a START: (X, origin)
    sizes: frozenset[str] = frozenset()  # of an ARANGE: X
    tiles: frozenset[tuple[str, str]] = frozenset()  # of a TILE: (X, origin)
    bp_blocks: tuple[str, ...] = ()  # of a BLOCKPTR: the block label of each dimension
    bp_tiles: frozenset[tuple[int, str, str]] = frozenset()  # (dimension, X, origin)
    bp_exact: frozenset[int] = frozenset()  # dimensions whose shape is a compile-time constant

    def __or__(self, o: Offsets) -> Offsets:
        return Offsets(
            self.bits | o.bits,
            self.origins | o.origins,
            self.starts | o.starts,
            self.sizes | o.sizes,
            self.tiles | o.tiles,
            self.bp_blocks or o.bp_blocks,
            self.bp_tiles | o.bp_tiles,
            self.bp_exact | o.bp_exact,
        )

    def keep(self, bits: int) -> Offsets:
        b = self.bits & bits
        return Offsets(
            b,
            self.origins if b & INDEX else frozenset(),
            self.starts if b & START else frozenset(),
            self.sizes if b & ARANGE else frozenset(),
            self.tiles if b & TILE else frozenset(),
            self.bp_blocks if b & BLOCKPTR else (),
            self.bp_tiles if b & BLOCKPTR else frozenset(),
            self.bp_exact if b & BLOCKPTR else frozenset(),
        )

    @property
    def pure_index(self) -> bool:
        return bool(self.bits & INDEX) and not self.bits & (ARANGE | START | TILE | BLOCKPTR)

    @property
    def bounded_sizes(self) -> frozenset[str]:
        """The tile sizes a mask built from this value bounds."""
        return self.sizes | frozenset(x for x, _ in self.tiles)


NOTHING = Offsets()


def _add(left: Offsets, right: Offsets, sub: bool = False) -> Offsets:
    """`a + b`: a start plus an arange of the same size is a tile. `c - start` runs backwards
    from c, bounded by whatever c is: not a tile."""
    out = left | right
    pairs = ((left, right),) if sub else ((left, right), (right, left))
    new = frozenset(
        (x, o) for a, b in pairs for x, o in a.starts if x in b.sizes and b.bits & ARANGE
    )
    if new:
        out = Offsets(
            out.bits | TILE,
            out.origins,
            out.starts,
            out.sizes,
            out.tiles | new,
            out.bp_blocks,
            out.bp_tiles,
            out.bp_exact,
        )
    return out


def range_args(file: PythonFile, it: ast.AST) -> tuple[ast.AST, ast.AST, ast.AST | None] | None:
    """(start, stop, step) of `range(...)` / `tl.range(...)` / `tl.static_range(...)`."""
    if not isinstance(it, ast.Call) or it.keywords and not it.args:
        return None
    name = it.func.id if isinstance(it.func, ast.Name) else tl_name(file, it)
    if name not in ("range", "static_range"):
        return None
    args = list(it.args)
    if len(args) == 1:
        return ast.Constant(0), args[0], None
    if len(args) == 2:
        return args[0], args[1], None
    if len(args) >= 3:
        return args[0], args[1], args[2]
    return None


@dataclass
class _Def:
    pos: tuple[int, int]  # where the new value becomes visible (after the statement)
    kind: str  # "assign", "aug", "for"
    node: ast.AST | None  # the value (assign; None: unknown), the AugAssign, or the For
    loops: tuple[ast.stmt, ...]  # the loops (For/While) the definition sits in, innermost last
    at: tuple[int, int] = (0, 0)  # where the statement starts


# (name, use position, the constexpr branch values in force there)
_UseKey = tuple[str, tuple[int, int], frozenset[tuple[str, object]]]


class OffsetFlow:
    """Which values of a kernel hold tiled offsets, by dataflow over its local names.

    A name's value at a use is that of its last definition above the use, joined with the
    definitions later in a loop that holds the use (they reach it on the next iteration). An
    index is `tl.program_id` or the variable of a loop over `cdiv(n, X)` blocks; a start is an
    index times X, or the variable of `range(a, n, X)` (n not a compile-time constant), or a
    pointer advanced by X per iteration of such a loop; a tile is a start plus `tl.arange(0, X)`
    of the same X. A `%` (wrapped), a clamp (`tl.minimum`, `tl.where`) or an alignment hint on
    the tile itself (`tl.multiple_of`, `tl.max_contiguous`) ends the tile: bounded, or declared.
    """

    file: BackLink[PythonFile] = BackLink()  # weak: the file's memo holds this

    def __init__(self, file: PythonFile, kernel: Kernel):
        self.file = file
        self.kernel = kernel
        self.defs: dict[str, list[_Def]] = {}
        # `if MODE == "matrix":` on a constexpr: (first, last position, name, value) of a branch,
        # so that a definition for one specialisation does not reach a use in another.
        self.branches: list[tuple[tuple[int, int], tuple[int, int], str, object]] = []
        self._walk(kernel.node.body, ())
        for entries in self.defs.values():
            entries.sort(key=lambda d: d.pos)
        self._memo: dict[_UseKey, Offsets] = {}
        self._active: set[_UseKey] = set()
        self._ctx: dict[str, object] = {}
        self._params: dict[str, Offsets] = {}

    # definitions ------------------------------------------------------------------------
    def _walk(
        self, body: Sequence[ast.stmt | ast.excepthandler], loops: tuple[ast.stmt, ...]
    ) -> None:
        for stmt in body:
            self._stmt(stmt, loops)

    def _stmt(self, stmt: ast.stmt | ast.excepthandler, loops: tuple[ast.stmt, ...]) -> None:
        end = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
        self._at = (stmt.lineno, stmt.col_offset)
        if isinstance(stmt, ast.If):
            self._branch(stmt)
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                self._target(t, stmt.value, "assign", end, loops)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._target(stmt.target, stmt.value, "assign", end, loops)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            self.defs.setdefault(stmt.target.id, []).append(_Def(end, "aug", stmt, loops, self._at))
        elif isinstance(stmt, (ast.For, ast.While)):
            if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
                it = stmt.iter
                pos = (it.end_lineno or it.lineno, it.end_col_offset or 0)
                self.defs.setdefault(stmt.target.id, []).append(
                    _Def(pos, "for", stmt, loops, self._at)
                )
            self._walk(stmt.body, (*loops, stmt))
            self._walk(stmt.orelse, loops)
            return
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field_name, None)
            if isinstance(inner, list):
                self._walk([s for s in inner if isinstance(s, ast.stmt | ast.excepthandler)], loops)
        if isinstance(stmt, ast.ExceptHandler):
            self._walk(stmt.body, loops)

    def _target(
        self,
        target: ast.expr,
        value: ast.expr | None,
        kind: str,
        end: tuple[int, int],
        loops: tuple[ast.stmt, ...],
    ) -> None:
        if isinstance(target, ast.Name):
            self.defs.setdefault(target.id, []).append(_Def(end, kind, value, loops, self._at))
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=False):
                    self._target(t, v, kind, end, loops)
            else:
                for t in target.elts:
                    self._target(t, None, kind, end, loops)  # from an unknown value

    def _branch(self, stmt: ast.If) -> None:
        test: ast.expr = stmt.test
        value: object = True
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, value = test.operand, False
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            compared = test.comparators[0]
            if isinstance(test.ops[0], ast.Eq) and isinstance(compared, ast.Constant):
                test, value = test.left, compared.value
            else:
                return
        if not isinstance(test, ast.Name) or test.id not in self.kernel.constexprs:
            return
        for body, v in (
            (stmt.body, value),
            (stmt.orelse, None if value not in (True, False) else not value),
        ):
            if body and v is not None:
                first, last = body[0], body[-1]
                span = (
                    (first.lineno, first.col_offset),
                    (last.end_lineno or last.lineno, last.end_col_offset or 0),
                )
                self.branches.append((*span, test.id, v))

    def _specialised(self, pos: tuple[int, int]) -> dict[str, object]:
        return {n: v for a, b, n, v in self.branches if a <= pos <= b}

    def _reaches(self, d: _Def, use: dict[str, object]) -> bool:
        if not use:
            return True
        mine = self._specialised(d.at)
        return all(use.get(n, v) == v for n, v in mine.items())

    # values ---------------------------------------------------------------------------------
    def name_at(self, name: str, pos: tuple[int, int]) -> Offsets:
        # The specialisation of the use holds for everything its value derives from.
        outer = self._ctx
        use = {**self._specialised(pos), **outer}
        key = (name, pos, frozenset(use.items()))
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            return NOTHING
        self._active.add(key)
        self._ctx = use
        try:
            out = self._name_value(name, pos, use)
        finally:
            self._ctx = outer
            self._active.discard(key)
        self._memo[key] = out
        return out

    def reaching(
        self, name: str, pos: tuple[int, int], use: dict[str, object] | None = None
    ) -> list[_Def]:
        """The definitions of `name` that reach a use at `pos`: the last one above it, and
        those later in a loop that holds the use (carried round to the next iteration)."""
        use = self._specialised(pos) if use is None else use
        entries = [d for d in self.defs.get(name, []) if self._reaches(d, use)]
        before = [d for d in entries if d.pos <= pos]
        carried = [
            d for d in entries if d.pos > pos and any(_inside(pos, loop) for loop in d.loops)
        ]
        return before[-1:] + carried

    def _name_value(self, name: str, pos: tuple[int, int], use: dict[str, object]) -> Offsets:
        defs = self.reaching(name, pos, use)
        if not defs or defs[0].pos > pos:
            out = self.param_value(name) if name in self.kernel.params else NOTHING
        else:
            out = NOTHING
        for d in defs:
            out = out | self._def_value(name, d)
        return out

    def param_value(self, name: str) -> Offsets:
        """A parameter of a `@triton.jit` helper called from other kernels of the file: padded
        where every caller passes a pointer into a buffer rounded up to the block."""
        if name in self._params:
            return self._params[name]
        self._params[name] = NOTHING
        self._params[name] = out = self._param_value(name)
        return out

    def _param_value(self, name: str) -> Offsets:
        if name in launch_padded_buffers(self.file, self.kernel):
            return Offsets(PADDED)  # the launcher allocated it rounded up to the block
        if self.kernel.name not in kernel_calls(self.file):
            return NOTHING
        callers = []
        index = self.kernel.params.index(name)
        if len(_PARAM_STACK) > 4 or (self.kernel.name, name) in _PARAM_STACK:
            return NOTHING  # helpers calling each other round (not valid Triton): stop
        _PARAM_STACK.append((self.kernel.name, name))
        try:
            callers = self._caller_values(name, index)
        finally:
            _PARAM_STACK.pop()
        if callers and all(c.bits & PADDED for c in callers):
            return Offsets(PADDED)
        return NOTHING

    def _caller_values(self, name: str, index: int) -> list[Offsets]:
        callers = []
        for other, call in kernel_calls(self.file).get(self.kernel.name, []):
            if other is self.kernel:
                continue
            arg = next((k.value for k in call.keywords if k.arg == name), None)
            if arg is None and index < len(call.args):
                arg = call.args[index]
            if arg is None or any(isinstance(a, ast.Starred) for a in call.args):
                return []
            callers.append(flow(self.file, other).of(arg))
        return callers

    def _def_value(self, name: str, d: _Def) -> Offsets:
        if d.kind == "assign":
            return self.of(d.node) if d.node is not None else NOTHING
        if isinstance(d.node, ast.For):  # kind "for"
            return self._loop_variable(d.node)
        aug = d.node
        assert isinstance(aug, ast.AugAssign)  # kind "aug": the only kind left
        base = self.name_at(name, (aug.target.lineno, aug.target.col_offset))
        inc = self.of(aug.value)
        if not isinstance(aug.op, (ast.Add, ast.Sub)):
            return (base | inc).keep(INDEX | ARANGE | START | TILE)
        loop = d.loops[-1] if d.loops else None
        if loop is not None and self.ceil_loop(loop):
            # A pointer advanced by X on each of `cdiv(n, X)` iterations: a start stepping by X.
            steps = frozenset((label(f), LOOP) for f in _factors(aug.value))
            inc = inc | Offsets(START, starts=steps)
        return _add(base, inc)

    def _loop_variable(self, loop: ast.For) -> Offsets:
        r = range_args(self.file, loop.iter)
        if r is None:
            return NOTHING
        start, stop, step = r
        if step is not None and not (isinstance(step, ast.Constant) and step.value == 1):
            if not self._runs_past(stop, loop):
                return NOTHING
            return Offsets(START, starts=frozenset([(label(step), LOOP)])) | self.of(start).keep(
                START
            )
        if ceil_division(stop) and self._runs_past(stop, loop):
            return Offsets(INDEX, origins=frozenset([LOOP]))
        return NOTHING

    def ceil_loop(self, loop: ast.AST) -> bool:
        """A `for` over the blocks of a size that need not be a multiple of the block:
        `range(a, n, X)` with a run-time n, or `range(tl.cdiv(n, X))`."""
        if not isinstance(loop, ast.For):
            return False
        r = range_args(self.file, loop.iter)
        if r is None:
            return False
        _, stop, step = r
        if not self._runs_past(stop, loop):
            return False
        if step is not None and not (isinstance(step, ast.Constant) and step.value == 1):
            return True
        return ceil_division(stop)

    def _runs_past(self, stop: ast.AST, at: ast.stmt, depth: int = 0) -> bool:
        """Whether a loop bound can leave a partial last block: a run-time size, possibly
        clamped or rounded up. Not: a compile-time constant, a size rounded down to a multiple
        (`n // X * X`, `n - n % X`), or a value from a helper whose result is not known."""
        if depth > 3 or self.compile_time(stop):
            return False
        for n in ast.walk(stop):
            if isinstance(n, ast.Call):
                name = tl_name(self.file, n)
                builtin = isinstance(n.func, ast.Name) and n.func.id in ("min", "max", "int")
                if not builtin and name not in ("cdiv", "minimum", "maximum", "load"):
                    if not ceil_division(n):
                        return False
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                if any(
                    isinstance(s, ast.BinOp) and isinstance(s.op, ast.FloorDiv)
                    for s in (n.left, n.right)
                ):
                    if not ceil_division(n):
                        return False  # n // X * X
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub):
                if isinstance(n.right, ast.BinOp) and isinstance(n.right.op, ast.Mod):
                    return False  # n - n % X
            if isinstance(n, ast.Name) and n.id not in self.kernel.params:
                before = [d for d in self.defs.get(n.id, []) if d.pos <= (at.lineno, at.col_offset)]
                if before and before[-1].kind == "assign" and before[-1].node is not None:
                    if not self._runs_past(before[-1].node, at, depth + 1):
                        return False
        return True

    def compile_time(self, node: ast.AST) -> bool:
        """Literals and constexpr parameters only: a size fixed when the kernel compiles."""
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id not in self.kernel.constexprs:
                return False
            if isinstance(n, (ast.Call, ast.Attribute, ast.Subscript)):
                return False
        return True

    def of(self, node: ast.AST) -> Offsets:
        if isinstance(node, ast.Name):
            out = self.name_at(node.id, (node.lineno, node.col_offset))
            return out | Offsets(PADDED) if _PADDED_NAME.search(node.id) else out
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self.of(node.value)
        if isinstance(node, ast.UnaryOp):
            return self.of(node.operand)
        if isinstance(node, ast.IfExp):
            return self.of(node.body) | self.of(node.orelse)
        if isinstance(node, ast.Compare):
            out = self.of(node.left)
            for c in node.comparators:
                out = out | self.of(c)
            return out.keep(ARANGE | TILE)
        if isinstance(node, ast.BoolOp):
            out = NOTHING
            for v in node.values:
                out = out | self.of(v)
            return out.keep(ARANGE | TILE)
        if isinstance(node, ast.BinOp):
            left, right = self.of(node.left), self.of(node.right)
            if isinstance(node.op, (ast.Add, ast.Sub)):
                if isinstance(node.op, ast.Sub) and right.bits & START:
                    return _add(left, right.keep(_ALL & ~(START | TILE)))
                return _add(left, right)
            if isinstance(node.op, ast.Mult):
                for idx, size, size_node in ((left, right, node.right), (right, left, node.left)):
                    if idx.pure_index and not size.bits & ~PADDED:
                        starts = frozenset((label(size_node), o) for o in idx.origins)
                        return Offsets(START | size.bits, starts=starts)
                for start, factor, text in (
                    (left, node.right, "{x} * {c}"),
                    (right, node.left, "{c} * {x}"),
                ):
                    scaled = _scaled_start(start, factor, text, self.kernel.constexprs)
                    if scaled is not None:
                        return scaled  # `pid * BLOCK * 2`: a start stepping by `BLOCK * 2`
                return (left | right).keep(ARANGE | START | TILE | PADDED)  # scaled by a stride
            if isinstance(node.op, ast.Mod):
                # Wrapped: bounded. A program index modulo a run-time count stays an index (the
                # grouped ordering `pid % num_pid_in_group`); modulo a constexpr it is a sub-tile.
                keep = ARANGE
                if left.pure_index and not self.compile_time(node.right):
                    keep |= INDEX
                return left.keep(keep)
            if isinstance(node.op, ast.FloorDiv):
                scaled = _scaled_start(left, node.right, "{x} // {c}", self.kernel.constexprs)
                if scaled is not None:
                    return scaled  # `pid * BLOCK // 2`: a start stepping by `BLOCK // 2`
                return left.keep(INDEX)
            return (left | right).keep(ARANGE)
        return NOTHING

    def _call(self, node: ast.Call) -> Offsets:
        name = tl_name(self.file, node)
        if name == "program_id":
            return Offsets(INDEX, origins=frozenset([PROGRAM]))
        if name == "arange":
            end = node.args[1] if len(node.args) >= 2 else None
            end = next((k.value for k in node.keywords if k.arg == "end"), end)
            return Offsets(ARANGE, sizes=frozenset([label(end) if end is not None else "?"]))
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
            return self.of(node.func.value)
        if name in ("multiple_of", "max_contiguous") and node.args:
            return self.of(node.args[0]).keep(_ALL & ~TILE)  # covers the value it wraps
        if name in ("minimum", "maximum", "where", "clamp"):
            out = NOTHING
            for a in node.args:
                out = out | self.of(a)
            return out.keep(INDEX | ARANGE)
        if name == "make_block_ptr":
            return self._block_ptr(node)
        if name == "advance" and len(node.args) >= 2:
            return self._advance(node)
        if name == "cast" and node.args:
            return self.of(node.args[0])
        return NOTHING

    def _block_ptr(self, node: ast.Call) -> Offsets:
        names = ("base", "shape", "strides", "offsets", "block_shape", "order")
        args = dict(zip(names, node.args, strict=False))
        args.update({k.arg: k.value for k in node.keywords if k.arg})
        shape, offsets, blocks = args.get("shape"), args.get("offsets"), args.get("block_shape")
        seq = (ast.Tuple, ast.List)
        if not (isinstance(shape, seq) and isinstance(offsets, seq) and isinstance(blocks, seq)):
            return Offsets(BLOCKPTR)
        if not len(shape.elts) == len(offsets.elts) == len(blocks.elts):
            return Offsets(BLOCKPTR)
        labels = tuple(label(b) for b in blocks.elts)
        exact = frozenset(d for d, s in enumerate(shape.elts) if self.compile_time(s))
        tiles = set()
        for d, off in enumerate(offsets.elts):
            for x, origin in self.of(off).starts:
                if x == labels[d] and d not in exact:
                    tiles.add((d, x, origin))
        return Offsets(BLOCKPTR, bp_blocks=labels, bp_tiles=frozenset(tiles), bp_exact=exact)

    def _advance(self, node: ast.Call) -> Offsets:
        base = self.of(node.args[0])
        deltas = node.args[1]
        if not base.bits & BLOCKPTR or not isinstance(deltas, (ast.Tuple, ast.List)):
            return base
        loop = next(
            (a for a in self.file.ancestors(node) if isinstance(a, (ast.For, ast.While))), None
        )
        if loop is None or not self.ceil_loop(loop) or not within(loop, self.kernel.node):
            return base
        tiles = set(base.bp_tiles)
        for d, delta in enumerate(deltas.elts):
            if d < len(base.bp_blocks) and d not in base.bp_exact:
                if label(delta) == base.bp_blocks[d]:
                    tiles.add((d, base.bp_blocks[d], LOOP))
        return Offsets(
            base.bits,
            base.origins,
            base.starts,
            base.sizes,
            base.tiles,
            base.bp_blocks,
            frozenset(tiles),
            base.bp_exact,
        )


_PARAM_STACK: list[tuple[str, str]] = []


def _scaled_start(
    value: Offsets, factor: ast.AST, text: str, constexprs: Collection[str] = ()
) -> Offsets | None:
    """A start `index * X` scaled by a literal `c` or a constexpr parameter (`* c`, `// c`,
    `* GROUP`) steps by `X * c` / `X // c`, spelled as `tl.arange(0, X // 2)` spells it; None
    for anything else (a stride, a run-time factor, a start of a composite size)."""
    if not value.bits & START or value.bits & (ARANGE | TILE | BLOCKPTR):
        return None
    if isinstance(factor, ast.Constant) and type(factor.value) is int and factor.value > 1:
        c = str(factor.value)
    elif isinstance(factor, ast.Name) and factor.id in constexprs:
        c = factor.id
    else:
        return None
    if not value.starts or not all(x.isidentifier() and x != c for x, _ in value.starts):
        return None
    starts = frozenset((text.format(x=x, c=c), o) for x, o in value.starts)
    return Offsets(START | (value.bits & PADDED), starts=starts)


def _factors(node: ast.AST) -> list[ast.AST]:
    """`BLOCK_K * stride_ak` -> [BLOCK_K, stride_ak]; `BLOCK_K` -> [BLOCK_K]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _factors(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "to":
            return _factors(node.func.value)
    return [node]


def _inside(pos: tuple[int, int], node: ast.expr | ast.stmt) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
    return start <= pos <= end


def within(inner: ast.expr | ast.stmt, outer: ast.expr | ast.stmt) -> bool:
    return _inside((inner.lineno, inner.col_offset), outer)


def flow(file: PythonFile, kernel: Kernel) -> OffsetFlow:
    cache = file.memo.get(_FLOWS, dict)
    key = id(kernel.node)
    if key not in cache:
        cache[key] = OffsetFlow(file, kernel)
    return cache[key]


def mask_bounds(f: OffsetFlow, mask: ast.AST) -> set[str]:
    """Sizes a mask bounds against another extent: `offs < n` bounds offs's size; the trivial
    `tl.arange(0, M) < M` bounds nothing."""
    out: set[str] = set()
    for cmp in ast.walk(mask):
        if isinstance(cmp, ast.Compare) and len(cmp.ops) == 1:
            left, right = cmp.left, cmp.comparators[0]
            for side, other in ((left, right), (right, left)):
                out |= set(f.of(side).bounded_sizes) - {label(other)}
    return out


def access_mask(call: ast.Call, op: str) -> ast.AST | None:
    """The `mask=` of a `tl.load` / `tl.store` (keyword or positional), None when absent."""
    position = 1 if op == "load" else 2
    mask = next((k.value for k in call.keywords if k.arg == "mask"), None)
    if mask is None and len(call.args) > position:
        mask = call.args[position]
    if isinstance(mask, ast.Constant) and mask.value is None:
        return None
    return mask
