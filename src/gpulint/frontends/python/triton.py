"""Triton kernels as the GPU7xx rules see them: `@triton.jit` functions, their autotune configs,
constexpr parameters, and which offsets are tiled by `program_id` (for the masking rule).

Everything is read from the module's own text; nothing is imported or executed. A value that
cannot be evaluated from literals (a config list built by a helper, a block size from a
variable) is unknown, and rules stay silent on unknowns.
"""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpulint.frontends.python.names import terminal_name

TL = "triton.language."
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAX_COMBINATIONS = 4096  # a config comprehension larger than this is not expanded


# -- kernels ---------------------------------------------------------------------------------
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


def tl_name(file, node: ast.AST) -> str | None:
    """`load` for `tl.load(...)` / `triton.language.load(...)` / `from triton.language import load`."""
    q = file.qualname(node)
    if q and q.startswith(TL):
        return q[len(TL) :]
    return None


def _is_triton(file, node: ast.AST, *names: str) -> bool:
    q = file.qualname(node.func if isinstance(node, ast.Call) else node)
    return q is not None and q in {f"triton.{n}" for n in names}


def is_jit_decorator(file, dec: ast.expr) -> bool:
    """`@triton.jit`, `@triton.jit(...)`, `@tr.jit`, `@jit` (from triton import jit)."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    return _is_triton(file, target, "jit", "runtime.jit.jit")


def is_autotune_decorator(file, dec: ast.expr) -> bool:
    """`@triton.autotune(configs=...)`, or a project wrapper named `*autotune` taking `configs=`."""
    if not isinstance(dec, ast.Call):
        return False
    if _is_triton(file, dec, "autotune", "runtime.autotune"):
        return True
    name = dec.func.attr if isinstance(dec.func, ast.Attribute) else getattr(dec.func, "id", "")
    return name.endswith("autotune") and any(k.arg == "configs" for k in dec.keywords)


def kernels(file) -> list[Kernel]:
    """Every `@triton.jit` function in the file (cached per parsed file)."""
    cache = _CACHE.setdefault(file, {})
    if "kernels" in cache:
        return cache["kernels"]
    found = []
    for fn in file.nodes(ast.FunctionDef):
        if not any(is_jit_decorator(file, d) for d in fn.decorator_list):
            continue
        autotune = next((d for d in fn.decorator_list if is_autotune_decorator(file, d)), None)
        heur = [
            d
            for d in fn.decorator_list
            if isinstance(d, ast.Call) and _is_triton(file, d, "heuristics")
        ]
        found.append(Kernel(fn, autotune, heur, _constexprs(file, fn)))
    cache["kernels"] = found
    return found


def kernel_of(file, node: ast.AST) -> Kernel | None:
    """The `@triton.jit` function that `node` sits in, if any."""
    by_node = {k.node: k for k in kernels(file)}
    for a in file.ancestors(node):
        if a in by_node:
            return by_node[a]
    return None


def _constexprs(file, fn: ast.FunctionDef) -> dict[str, ast.expr | None]:
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
        if isinstance(dec, ast.Call) and _is_triton(file, dec, "heuristics") and dec.args:
            if isinstance(dec.args[0], ast.Dict):
                for k in dec.args[0].keys:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        out.setdefault(k.value, None)
    return out


# -- evaluating literals ---------------------------------------------------------------------
class Unknown(Exception):
    """A value that cannot be read from the source's literals."""


def module_constants(file) -> dict[str, ast.expr]:
    """Module-level `NAME = <expr>` assignments made exactly once (cached per file)."""
    cache = _CACHE.setdefault(file, {})
    if "constants" not in cache:
        seen: dict[str, list[ast.expr]] = {}
        for stmt in file.tree.body:
            if isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        seen.setdefault(t.id, []).append(stmt.value)
            elif (
                isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value
            ):
                seen.setdefault(stmt.target.id, []).append(stmt.value)
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                seen.setdefault(stmt.target.id, []).append(stmt.value)
                seen[stmt.target.id].append(stmt.value)  # ambiguous: drop it
        cache["constants"] = {k: v[0] for k, v in seen.items() if len(v) == 1}
    return cache["constants"]


def evaluate(node: ast.AST, env: dict[str, object], file=None, depth: int = 0):
    """Evaluate a literal expression (numbers, strings, lists, tuples, + - * // ** %, names in
    `env` or module constants). Raises Unknown otherwise."""
    if depth > 20:
        raise Unknown
    ev = lambda n: evaluate(n, env, file, depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if file is not None and node.id in module_constants(file):
            return ev(module_constants(file)[node.id])
        raise Unknown
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                out.extend(ev(e.value))
            else:
                out.append(ev(e))
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -ev(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = ev(node.left), ev(node.right)
        ops = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: lambda a, b: a // b,
            ast.Pow: lambda a, b: a**b,
            ast.Mod: lambda a, b: a % b,
        }
        op = ops.get(type(node.op))
        if op is None:
            raise Unknown
        try:
            return op(left, right)
        except Exception:
            raise Unknown from None
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = ev(node.left), ev(node.comparators[0])
        compare = {
            ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b,
            ast.Gt: lambda a, b: a > b,
            ast.GtE: lambda a, b: a >= b,
            ast.Eq: lambda a, b: a == b,
            ast.NotEq: lambda a, b: a != b,
            ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b,
        }.get(type(node.ops[0]))
        if compare is None:
            raise Unknown
        try:
            return compare(left, right)
        except Exception:
            raise Unknown from None
    if isinstance(node, ast.BoolOp):
        values = [ev(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not ev(node.operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        args = [ev(a) for a in node.args]
        if not all(isinstance(a, int) for a in args) or not 1 <= len(args) <= 3:
            raise Unknown
        return list(range(*args))
    raise Unknown


# -- autotune configs ------------------------------------------------------------------------
@dataclass
class Config:
    """One `triton.Config(...)`; a comprehension yields one per combination, same node."""

    node: ast.Call
    kwargs: dict[str, object]  # the meta-parameters that could be evaluated
    num_stages: int | None  # None: not evaluable
    num_warps: int | None
    stages_given: bool  # False: Triton's default (3) applies

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.kwargs.items()]
        parts.append(f"num_stages={self.num_stages}" + ("" if self.stages_given else " (default)"))
        return "Config(" + ", ".join(parts) + ")"


TRITON_DEFAULT_STAGES = 3  # triton.Config(num_stages=3) by default


def is_config_call(file, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if _is_triton(file, node, "Config", "runtime.Config", "runtime.autotuner.Config"):
        return True
    return (
        isinstance(node.func, ast.Name) and node.func.id == "Config" and file.qualname(node) is None
    )


def autotune_configs(file, autotune: ast.Call) -> list[Config] | None:
    """The configs of an autotune decorator, or None when the list cannot be read."""
    arg = next((k.value for k in autotune.keywords if k.arg == "configs"), None)
    if arg is None and autotune.args:
        arg = autotune.args[0]
    if arg is None:
        return None
    try:
        return _configs(file, arg, {}, 0)
    except Unknown:
        return None


def _configs(file, node: ast.AST, env: dict[str, object], depth: int) -> list[Config]:
    if depth > 8:
        raise Unknown
    if isinstance(node, ast.Name) and node.id not in env:
        value = module_constants(file).get(node.id)
        if value is None:
            raise Unknown
        return _configs(file, value, env, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        out: list[Config] = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                out.extend(_configs(file, e.value, env, depth + 1))
            else:
                out.extend(_configs(file, e, env, depth + 1))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _configs(file, node.left, env, depth + 1) + _configs(
            file, node.right, env, depth + 1
        )
    if is_config_call(file, node):
        return [_one_config(file, node, env)]
    if isinstance(node, ast.ListComp) and is_config_call(file, node.elt):
        out = []
        for binding in _comprehension_bindings(file, node.generators, env):
            out.append(_one_config(file, node.elt, binding))
        return out
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        # A project helper wrapping a literal list (`autotune_configs([...])`): its configs.
        if isinstance(node.args[0], (ast.List, ast.ListComp)):
            return _configs(file, node.args[0], env, depth + 1)
    raise Unknown


def _comprehension_bindings(file, generators, env) -> Iterator[dict[str, object]]:
    combos = [dict(env)]
    for gen in generators:
        if gen.is_async:
            raise Unknown
        new = []
        for binding in combos:
            values = evaluate(gen.iter, binding, file)
            if not isinstance(values, list):
                raise Unknown
            for v in values:
                b = dict(binding)
                _bind(gen.target, v, b)
                if all(evaluate(cond, b, file) for cond in gen.ifs):
                    new.append(b)
            if len(new) > _MAX_COMBINATIONS:
                raise Unknown
        combos = new
    yield from combos


def _bind(target: ast.AST, value: object, env: dict[str, object]) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (list, tuple)):
        if len(target.elts) != len(value):
            raise Unknown
        for t, v in zip(target.elts, value, strict=False):
            _bind(t, v, env)
    else:
        raise Unknown


def _one_config(file, call: ast.Call, env: dict[str, object]) -> Config:
    kwargs: dict[str, object] = {}
    meta = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "kwargs"), None)
    )
    if isinstance(meta, ast.Dict):
        for k, v in zip(meta.keys, meta.values, strict=False):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                try:
                    kwargs[k.value] = evaluate(v, env, file)
                except Unknown:
                    pass
    elif isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "dict":
        for k in meta.keywords:
            if k.arg:
                try:
                    kwargs[k.arg] = evaluate(k.value, env, file)
                except Unknown:
                    pass

    def number(name: str, position: int) -> tuple[int | None, bool]:
        node = next((k.value for k in call.keywords if k.arg == name), None)
        if node is None and len(call.args) > position:
            node = call.args[position]
        if node is None:
            return None, False
        try:
            v = evaluate(node, env, file)
        except Unknown:
            return None, True
        return (v if isinstance(v, int) and not isinstance(v, bool) else None), True

    warps, _ = number("num_warps", 1)
    stages, given = number("num_stages", 2)
    if not given:
        stages = TRITON_DEFAULT_STAGES
    return Config(call, kwargs, stages, warps, given)


def prunes_configs(autotune: ast.Call) -> bool:
    """`prune_configs_by=...` (or a `**` splat whose name says it prunes)."""
    for k in autotune.keywords:
        if k.arg == "prune_configs_by":
            return not (isinstance(k.value, ast.Constant) and k.value.value is None)
        if k.arg is None:
            if isinstance(k.value, ast.Dict):
                if any(
                    isinstance(key, ast.Constant) and key.value == "prune_configs_by"
                    for key in k.value.keys
                ):
                    return True
            elif "prune" in ast.unparse(k.value).lower():
                return True
    return False


# -- block-size roles (matmul-like kernels) --------------------------------------------------
_ROLE = re.compile(r"^(?:BLOCK_SIZE_|BLOCK_|BLOCK|TILE_SIZE_|TILE_|B)([MNK])(?:_SIZE)?$")


def block_role(name: str) -> str | None:
    """'M' for BLOCK_M / BLOCK_SIZE_M / BLOCK_M_SIZE / BM / TILE_M; None otherwise."""
    m = _ROLE.match(name)
    return m.group(1) if m else None


def pipeline_buffers(arch, num_stages: int, block_m: int) -> int:
    """How many A/B tile buffers Triton's software pipeline allocates for `num_stages`.

    Measured with Triton 3.6.0 (compiled `metadata.shared` of a tutorial matmul, fp16 and fp8,
    on an H200 and cross-compiled for sm_80/86/89/100/120/121): the Hopper and datacenter
    Blackwell MMA pipelines (sm_90, sm_100; BLOCK_M >= 64) keep `num_stages` buffers; the
    cp.async pipeline of sm_80/86/89/120/121, and of any arch with BLOCK_M < 64, keeps
    `num_stages - 1` (at least one).
    """
    if arch.major in (9, 10) and block_m >= 64:
        return max(num_stages, 1)
    return max(num_stages - 1, 1)


_EIGHT_BIT = re.compile(r"\b(?:float8\w*|fp8\w*|int8|uint8|e4m3\w*|e5m2\w*)\b", re.I)
_SUB_BYTE = re.compile(r"\b(?:u?int4|nf4|fp4\w*|\w*e2m1\w*|w4a\d+|mxfp4|nvfp4)\b", re.I)


def element_bytes(file, kernel: Kernel) -> tuple[int | None, str]:
    """Bytes per element of the tiles a matmul-like kernel stages, and why; None when unknown.

    Packed sub-byte weights (int4/nf4/fp4 named in the file, or any `>>` unpacking in the
    kernel, as GPTQ's `(b >> shifter) & maxq`) make tile sizes unknowable from the block
    sizes: None. An 8-bit type named in the
    kernel or its file: 1 byte (the smallest, so the estimate stays a lower bound). Otherwise
    2 bytes (fp16/bf16), Triton's common case; fp32 operands would need twice that.
    """
    body = file.segment(kernel.node)
    unpacks = any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.RShift) for n in ast.walk(kernel.node)
    )
    if _SUB_BYTE.search(file.text) or unpacks:
        return None, "packed sub-byte operands"
    if _EIGHT_BIT.search(body) or _EIGHT_BIT.search(file.text):
        return 1, "1-byte elements, as an 8-bit type is named in the kernel or its file"
    return 2, "2-byte fp16/bf16 elements, as the dtype is not known from the source"


# -- offsets tiled by program_id (GPU701) ----------------------------------------------------
PID, ARANGE, PIDMUL, TILE = 1, 2, 4, 8

_BLOCKISH = re.compile(r"BLOCK|TILE|^B[A-Z]{1,2}$|^B_", re.I)


def is_block_name(name: str) -> bool:
    """A block size by its name: BLOCK_SIZE, BLOCK_M, XBLOCK, TILE_N, BT, BK, BV, B_M."""
    return bool(_BLOCKISH.search(name))


@dataclass(frozen=True)
class Offsets:
    """What an expression holds: PID (derived from `tl.program_id`, not wrapped by `%`),
    ARANGE, PIDMUL (`pid * BLOCK`, with the block names in `blocks`), TILE
    (`pid * BLOCK + tl.arange(0, BLOCK)` with the same BLOCK: offsets tiled by the program id)."""

    bits: int = 0
    blocks: frozenset = frozenset()  # BLOCK names of a PIDMUL
    sizes: frozenset = frozenset()  # arange sizes (names) of an ARANGE

    def __or__(self, other: Offsets) -> Offsets:
        return Offsets(self.bits | other.bits, self.blocks | other.blocks, self.sizes | other.sizes)

    def keep(self, bits: int) -> Offsets:
        b = self.bits & bits
        return Offsets(
            b, self.blocks if b & PIDMUL else frozenset(), self.sizes if b & ARANGE else frozenset()
        )


NOTHING = Offsets()


class OffsetFlow:
    """Which local names of a kernel hold offsets tiled by the program id.

    A name's value at a use is that of its last assignment above the use (augmented assignments
    add to it). A `%` (bounded, wrapped), a clamp (`tl.minimum`, `tl.where`) or an alignment
    hint (`tl.multiple_of`, `tl.max_contiguous`) clears the tiling: the offsets are wrapped,
    clamped, or declared divisible. A pid multiplied by anything else than a block size, or a
    product multiplied again, is a row index times a stride, not a tile.
    """

    def __init__(self, file, kernel: Kernel):
        self.file = file
        self.kernel = kernel
        self.assigns: dict[str, list[tuple[tuple[int, int], ast.AST, bool]]] = {}
        for node in ast.walk(kernel.node):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    self._record(t, node.value, node, False)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._record(node.target, node.value, node, False)
            elif isinstance(node, ast.AugAssign):
                self._record(node.target, node.value, node, True)
        for entries in self.assigns.values():
            entries.sort(key=lambda e: e[0])
        self._memo: dict[tuple[str, tuple[int, int]], Offsets] = {}
        self._active: set[tuple[str, tuple[int, int]]] = set()

    def _record(self, target: ast.AST, value: ast.AST, stmt: ast.AST, aug: bool) -> None:
        pos = (stmt.lineno, stmt.col_offset)
        if isinstance(target, (ast.Tuple, ast.List)):
            pairs = (
                zip(target.elts, value.elts, strict=False)
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                else ((t, ast.Tuple(elts=[value], ctx=ast.Load())) for t in target.elts)
            )
            for t, v in pairs:
                self._record(t, v, stmt, aug)
        elif isinstance(target, ast.Name):
            self.assigns.setdefault(target.id, []).append((pos, value, aug))

    def name_at(self, name: str, pos: tuple[int, int]) -> Offsets:
        key = (name, pos)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            return NOTHING
        self._active.add(key)
        out = NOTHING
        entries = self.assigns.get(name, [])
        before = [e for e in entries if e[0] < pos]
        last_plain = max((i for i, e in enumerate(before) if not e[2]), default=None)
        if last_plain is not None:
            p, value, _ = before[last_plain]
            out = self._of(value, p)
        # Augmented assignments anywhere (a loop carries them around) add to the value.
        for p, value, aug in entries:
            if aug:
                out = out | self._of(value, p).keep(PID | ARANGE)
        self._active.discard(key)
        self._memo[key] = out
        return out

    def of(self, node: ast.AST) -> Offsets:
        return self._of(node, (node.lineno, node.col_offset))

    def _is_block(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name) and is_block_name(node.id):
            return node.id
        return None

    def _simple_pid(self, node: ast.AST, pos) -> bool:
        """`pid`, `pid_m`, `tl.program_id(0)`, `pid.to(tl.int64)`: a program index itself."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to"
        ):
            return self._simple_pid(node.func.value, pos)
        if isinstance(node, ast.Call):
            return tl_name(self.file, node) == "program_id"
        if isinstance(node, ast.Name):
            v = self.name_at(node.id, pos)
            return bool(v.bits & PID) and not v.bits & (PIDMUL | ARANGE | TILE)
        return False

    def _of(self, node: ast.AST, pos) -> Offsets:
        file = self.file
        if isinstance(node, ast.Name):
            return self.name_at(node.id, pos)
        if isinstance(node, ast.Tuple) and len(node.elts) == 1:
            return self._of(node.elts[0], pos).keep(PID | ARANGE)  # unpacked from an unknown value
        if isinstance(node, ast.Call):
            name = tl_name(file, node)
            if name == "program_id":
                return Offsets(PID)
            if name == "arange":
                size = node.args[1] if len(node.args) == 2 else None
                label = ast.unparse(size) if size is not None else "?"
                return Offsets(ARANGE, sizes=frozenset([label]))
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                return self._of(node.func.value, pos)
            if name in ("multiple_of", "max_contiguous", "minimum", "maximum", "where"):
                out = NOTHING
                for a in node.args:
                    out = out | self._of(a, pos)
                return out.keep(PID | ARANGE)
            return NOTHING
        if isinstance(node, ast.Subscript):
            return self._of(node.value, pos)
        if isinstance(node, ast.UnaryOp):
            return self._of(node.operand, pos)
        if isinstance(node, ast.BinOp):
            left, right = self._of(node.left, pos), self._of(node.right, pos)
            both = left | right
            if isinstance(node.op, ast.Mod):
                return both.keep(ARANGE)  # wrapped: bounded
            if isinstance(node.op, ast.Mult):
                out = both.keep(PID | ARANGE | TILE)
                for pid_side, block_side in ((node.left, node.right), (node.right, node.left)):
                    block = self._is_block(block_side)
                    if block and self._simple_pid(pid_side, pos):
                        return Offsets(out.bits | PIDMUL, frozenset([block]), out.sizes)
                return out
            if isinstance(node.op, (ast.Add, ast.Sub)):
                out = both
                if (left.bits & PIDMUL and right.bits & ARANGE and left.blocks & right.sizes) or (
                    right.bits & PIDMUL and left.bits & ARANGE and right.blocks & left.sizes
                ):
                    out = Offsets(out.bits | TILE, out.blocks, out.sizes)
                return out
            return both.keep(PID | ARANGE)
        return NOTHING


def flow(file, kernel: Kernel) -> OffsetFlow:
    cache = _CACHE.setdefault(file, {})
    key = ("flow", id(kernel.node))
    if key not in cache:
        cache[key] = OffsetFlow(file, kernel)
    return cache[key]


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
