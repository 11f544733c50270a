"""Triton kernels as the GPU7xx rules see them: `@triton.jit` functions, their autotune configs,
constexpr parameters, and which offsets are tiled by a program id or a loop over blocks
(followed by dataflow, for the masking rule).

Everything is read from the module's own text; nothing is imported or executed. A value that
cannot be evaluated from literals (a config list built by a helper, a block size from a
variable) is unknown, and rules stay silent on unknowns.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulint.frontends import BackLink, MemoKey
from gpulint.frontends.python.model import unpacked_value
from gpulint.frontends.python.names import terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

TL = "triton.language."
_MAX_COMBINATIONS = 4096  # a config comprehension larger than this is not expanded

# What this module computes once per file, in the file's memo (by kernel or scope node id).
_KERNELS: MemoKey[list[Kernel]] = MemoKey("triton.kernels")
_CONSTANTS: MemoKey[dict[str, ast.expr]] = MemoKey("triton.constants")
_CALLS: MemoKey[dict[str, list[tuple[Kernel, ast.Call]]]] = MemoKey("triton.calls")
_FLOWS: MemoKey[dict[int, OffsetFlow]] = MemoKey("triton.flows")
_FILE_TILES: MemoKey[frozenset[str]] = MemoKey("triton.file_tiles")
_TILES: MemoKey[dict[int, frozenset[str]]] = MemoKey("triton.tiles")
_LAUNCH_DIVIDED: MemoKey[dict[int, frozenset[str]]] = MemoKey("triton.launch_divided")
_LAUNCH_PADDED: MemoKey[dict[int, frozenset[str]]] = MemoKey("triton.launch_padded")


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


def tl_name(file: PythonFile, node: ast.AST) -> str | None:
    """`load` for `tl.load(...)` / `triton.language.load(...)` / `from triton.language import load`."""
    q = file.qualname(node)
    if q and q.startswith(TL):
        return q[len(TL) :]
    return None


def _is_triton(file: PythonFile, node: ast.AST, *names: str) -> bool:
    q = file.qualname(node.func if isinstance(node, ast.Call) else node)
    return q is not None and q in {f"triton.{n}" for n in names}


def is_jit_decorator(file: PythonFile, dec: ast.expr) -> bool:
    """`@triton.jit`, `@triton.jit(...)`, `@tr.jit`, `@jit` (from triton import jit)."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    return _is_triton(file, target, "jit", "runtime.jit.jit")


def is_autotune_decorator(file: PythonFile, dec: ast.expr) -> bool:
    """`@triton.autotune(configs=...)`, or a project wrapper named `*autotune` taking `configs=`."""
    if not isinstance(dec, ast.Call):
        return False
    if _is_triton(file, dec, "autotune", "runtime.autotune"):
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
            if isinstance(d, ast.Call) and _is_triton(file, d, "heuristics")
        ]
        found.append(Kernel(fn, autotune, heur, _constexprs(file, fn)))
    return found


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
        if isinstance(dec, ast.Call) and _is_triton(file, dec, "heuristics") and dec.args:
            if isinstance(dec.args[0], ast.Dict):
                for k in dec.args[0].keys:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        out.setdefault(k.value, None)
    return out


# -- evaluating literals ---------------------------------------------------------------------
class Unknown(Exception):
    """A value that cannot be read from the source's literals."""


def module_constants(file: PythonFile) -> dict[str, ast.expr]:
    """Module-level `NAME = <expr>` assignments made exactly once (cached per file)."""
    return file.memo.get(_CONSTANTS, lambda: _module_constants(file))


def _module_constants(file: PythonFile) -> dict[str, ast.expr]:
    # A name the module binds once, by a top-level `NAME = <expr>`: any other binding of it in
    # the module's scope (an import, a second assignment, `+=`, a loop) makes it ambiguous.
    tree = file.tree
    out: dict[str, ast.expr] = {}
    for name, bound in file.model.table(tree).items():
        if len(bound) != 1:
            continue
        (b,) = bound
        if (
            b.kind in ("assign", "annassign")
            and b.value is not None
            and file.parent(b.node) is tree
        ):
            out[name] = b.value
    return out


def evaluate(node: ast.AST, env: dict[str, object], file: PythonFile | None = None, depth: int = 0):
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


def is_config_call(file: PythonFile, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if _is_triton(file, node, "Config", "runtime.Config", "runtime.autotuner.Config"):
        return True
    return (
        isinstance(node.func, ast.Name) and node.func.id == "Config" and file.qualname(node) is None
    )


def autotune_configs(file: PythonFile, autotune: ast.Call) -> list[Config] | None:
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


def _configs(file: PythonFile, node: ast.AST, env: dict[str, object], depth: int) -> list[Config]:
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
    if isinstance(node, ast.Call) and is_config_call(file, node):
        return [_one_config(file, node, env)]
    if (
        isinstance(node, ast.ListComp)
        and isinstance(node.elt, ast.Call)
        and is_config_call(file, node.elt)
    ):
        out = []
        for binding in _comprehension_bindings(file, node.generators, env):
            out.append(_one_config(file, node.elt, binding))
        return out
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        # A project helper wrapping a literal list (`autotune_configs([...])`): its configs.
        if isinstance(node.args[0], (ast.List, ast.ListComp)):
            return _configs(file, node.args[0], env, depth + 1)
    raise Unknown


def _comprehension_bindings(file: PythonFile, generators, env) -> Iterator[dict[str, object]]:
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


def _one_config(file: PythonFile, call: ast.Call, env: dict[str, object]) -> Config:
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
        for kw in meta.keywords:
            if kw.arg:
                try:
                    kwargs[kw.arg] = evaluate(kw.value, env, file)
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


def element_bytes(file: PythonFile, kernel: Kernel) -> tuple[int | None, str]:
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


# -- shared-memory tiles (GPU702) ------------------------------------------------------------
@dataclass
class SmemTile:
    """A tile that Triton stages in shared memory for a `tl.dot`: a load feeding an operand,
    inside the dot's loop (one buffer per pipeline stage) or before it (one buffer)."""

    load: ast.Call
    sizes: tuple[str, ...]  # the block size of each dimension, as source text
    in_loop: bool


def dot_operand_tiles(file: PythonFile, kernel: Kernel) -> list[SmemTile] | None:
    """Every load that feeds an operand of a `tl.dot` in a loop (followed through names,
    conversions and arithmetic, not through another dot's result), with its tile's sizes; None
    when a tile's shape cannot be read (more than two sizes, a pointer from a helper)."""
    f = flow(file, kernel)
    tiles: dict[int, SmemTile] = {}
    for dot in ast.walk(kernel.node):
        if not isinstance(dot, ast.Call) or tl_name(file, dot) != "dot":
            continue
        loop = next((a for a in file.ancestors(dot) if isinstance(a, (ast.For, ast.While))), None)
        if loop is None or not _within(loop, kernel.node):
            continue
        operands = list(dot.args[:2]) + [
            k.value for k in dot.keywords if k.arg in ("input", "other")
        ]
        for operand in operands:
            for load in _feeding_loads(file, f, operand, 0, set()):
                if id(load) in tiles:
                    continue
                sizes = _tile_sizes_of(f, load)
                if sizes is None:
                    return None
                tiles[id(load)] = SmemTile(load, sizes, _within(load, loop))
    return list(tiles.values())


def _feeding_loads(
    file: PythonFile, f: OffsetFlow, expr: ast.AST, depth: int, seen: set
) -> list[ast.Call]:
    if depth > 8:
        return []
    out: list[ast.Call] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            name = tl_name(file, node)
            if name == "load":
                out.append(node)
                continue
            if name == "dot":
                continue  # a dot's result lives in registers
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            for d in f.reaching(node.id, (node.lineno, node.col_offset)):
                if id(d) in seen:
                    continue
                seen.add(id(d))
                value = (
                    d.node.value
                    if isinstance(d.node, ast.AugAssign)  # kind "aug"
                    else d.node
                    if d.kind == "assign"
                    else None
                )
                if value is not None:
                    out.extend(_feeding_loads(file, f, value, depth + 1, seen))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def _tile_sizes_of(f: OffsetFlow, load: ast.Call) -> tuple[str, ...] | None:
    pointer = (
        load.args[0]
        if load.args
        else next((k.value for k in load.keywords if k.arg == "pointer"), None)
    )
    if pointer is None:
        return None
    value = f.of(pointer)
    if value.bits & BLOCKPTR:
        return value.bp_blocks or None
    sizes = sorted(value.sizes)
    if len(sizes) == 1:
        return (sizes[0], sizes[0])  # one size for both dimensions: a square tile
    if len(sizes) == 2:
        return tuple(sizes)
    return None


def tile_bytes(file: PythonFile, sizes: tuple[str, ...], env: dict[str, object]) -> int | None:
    """Elements of a tile with its sizes evaluated in `env` (a config's meta-parameters and
    the kernel's constexpr defaults); None when one is unknown."""
    n = 1
    for size in sizes:
        try:
            v = evaluate(ast.parse(size, mode="eval").body, env, file)
        except (Unknown, SyntaxError):
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            return None
        n *= v
    return n


@dataclass
class SmemEstimate:
    total: int
    buffers: int
    per_stage: list[tuple[tuple[int, ...], str]]  # dims and source text of each pipelined tile
    once: list[tuple[tuple[int, ...], str]]  # tiles loaded before the loop
    element_bytes: int

    def explain(self) -> str:
        def tiles(ts):
            return " + ".join("×".join(map(str, dims)) for dims, _ in ts)

        text = (
            f"{self.buffers} stage buffer{'s' if self.buffers > 1 else ''} × "
            f"({tiles(self.per_stage)}) × {self.element_bytes} B"
        )
        if self.once:
            text += f" + ({tiles(self.once)}) × {self.element_bytes} B loaded once"
        return text


def shared_memory_estimate(
    file: PythonFile,
    kernel: Kernel,
    config: Config,
    arch,
    nbytes: int,
    env_extra: dict | None = None,
) -> SmemEstimate | None:
    """Shared memory Triton allocates for a matmul-like kernel under one config: every tile
    that feeds a `tl.dot` in its loop, once per pipeline buffer, plus dot operands loaded
    before the loop, once. Checked against the compiler (tests/test_triton_oracle.py)."""
    if config.num_stages is None:
        return None
    env: dict[str, object] = {}
    for name, default in kernel.constexprs.items():
        if isinstance(default, ast.Constant) and isinstance(default.value, int):
            env[name] = default.value
    env.update(env_extra or {})
    env.update(config.kwargs)
    tiles = dot_operand_tiles(file, kernel)
    if not tiles or not any(t.in_loop for t in tiles):
        return None
    per_stage: list[tuple[tuple[int, ...], str]] = []
    once: list[tuple[tuple[int, ...], str]] = []
    for t in tiles:
        dims = []
        for size in t.sizes:
            n = tile_bytes(file, (size,), env)
            if n is None:
                return None
            dims.append(n)
        (per_stage if t.in_loop else once).append((tuple(dims), ast.unparse(t.load)))
    block_m = next((v for k, v in env.items() if block_role(k) == "M" and isinstance(v, int)), 64)
    buffers = pipeline_buffers(arch, config.num_stages, block_m)

    def elems(ts):
        total = 0
        for dims, _ in ts:
            n = 1
            for d in dims:
                n *= d
            total += n
        return total

    total = (buffers * elems(per_stage) + elems(once)) * nbytes
    return SmemEstimate(total, buffers, per_stage, once, nbytes)


# -- offsets followed by dataflow (GPU701) ---------------------------------------------------
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


def label(node: ast.AST) -> str:
    """A size as text: `BLOCK_M`, `meta['BLOCK_M']` -> `BLOCK_M`, `-BLOCK_N` -> `BLOCK_N`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return label(node.operand)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        if isinstance(node.slice.value, str):
            return node.slice.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in ("self", "meta", "META", "args", "config"):
            return node.attr
    return ast.unparse(node)


@dataclass(frozen=True)
class Offsets:
    """What an expression holds (bits above); for block pointers, per dimension, the block
    label, which dimensions are tiled, and which have a compile-time shape."""

    bits: int = 0
    origins: frozenset = frozenset()  # of an INDEX: PROGRAM / LOOP
    starts: frozenset = frozenset()  # of a START: (X, origin)
    sizes: frozenset = frozenset()  # of an ARANGE: X
    tiles: frozenset = frozenset()  # of a TILE: (X, origin)
    bp_blocks: tuple = ()  # of a BLOCKPTR: the block label of each dimension
    bp_tiles: frozenset = frozenset()  # (dimension, X, origin)
    bp_exact: frozenset = frozenset()  # dimensions whose shape is a compile-time constant

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
        empty: frozenset[object] = frozenset()
        return Offsets(
            b,
            self.origins if b & INDEX else empty,
            self.starts if b & START else empty,
            self.sizes if b & ARANGE else empty,
            self.tiles if b & TILE else empty,
            self.bp_blocks if b & BLOCKPTR else (),
            self.bp_tiles if b & BLOCKPTR else empty,
            self.bp_exact if b & BLOCKPTR else empty,
        )

    @property
    def pure_index(self) -> bool:
        return bool(self.bits & INDEX) and not self.bits & (ARANGE | START | TILE | BLOCKPTR)

    @property
    def bounded_sizes(self) -> frozenset:
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


def ceil_division(node: ast.AST) -> bool:
    """`tl.cdiv(n, X)`, `triton.cdiv`, `math.ceil(n / X)`, `(n + X - 1) // X`."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if "cdiv" in f or "ceil" in f:
                return True
        if (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.FloorDiv)
            and isinstance(n.left, ast.BinOp)
            and isinstance(n.left.op, (ast.Add, ast.Sub))
        ):
            return True
    return False


def _range_args(file: PythonFile, it: ast.AST) -> tuple[ast.AST, ast.AST, ast.AST | None] | None:
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
    node: ast.AST  # the value (assign), the AugAssign, or the For
    loops: tuple  # the loops (For/While) the definition sits in, innermost last
    at: tuple[int, int] = (0, 0)  # where the statement starts


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
        self._memo: dict[tuple, Offsets] = {}
        self._active: set[tuple] = set()
        self._ctx: dict[str, object] = {}
        self._params: dict[str, Offsets] = {}

    # definitions ------------------------------------------------------------------------
    def _walk(self, body, loops: tuple) -> None:
        for stmt in body:
            self._stmt(stmt, loops)

    def _stmt(self, stmt: ast.stmt, loops: tuple) -> None:
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
                self._walk([s for s in inner if isinstance(s, ast.AST)], loops)
        if isinstance(stmt, ast.ExceptHandler):
            self._walk(stmt.body, loops)

    def _target(self, target, value, kind, end, loops) -> None:
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

    def reaching(self, name: str, pos: tuple[int, int], use: dict | None = None) -> list[_Def]:
        """The definitions of `name` that reach a use at `pos`: the last one above it, and
        those later in a loop that holds the use (carried round to the next iteration)."""
        use = self._specialised(pos) if use is None else use
        entries = [d for d in self.defs.get(name, []) if self._reaches(d, use)]
        before = [d for d in entries if d.pos <= pos]
        carried = [
            d for d in entries if d.pos > pos and any(_inside(pos, loop) for loop in d.loops)
        ]
        return before[-1:] + carried

    def _name_value(self, name: str, pos: tuple[int, int], use: dict) -> Offsets:
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
        if self.kernel.name not in _calls_to(self.file):
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
        for other, call in _calls_to(self.file).get(self.kernel.name, []):
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
        r = _range_args(self.file, loop.iter)
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
        r = _range_args(self.file, loop.iter)
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
                return (left | right).keep(ARANGE | START | TILE | PADDED)  # scaled by a stride
            if isinstance(node.op, ast.Mod):
                # Wrapped: bounded. A program index modulo a run-time count stays an index (the
                # grouped ordering `pid % num_pid_in_group`); modulo a constexpr it is a sub-tile.
                keep = ARANGE
                if left.pure_index and not self.compile_time(node.right):
                    keep |= INDEX
                return left.keep(keep)
            if isinstance(node.op, ast.FloorDiv):
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
        if loop is None or not self.ceil_loop(loop) or not _within(loop, self.kernel.node):
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


def _calls_to(file: PythonFile) -> dict[str, list[tuple[Kernel, ast.Call]]]:
    """`helper(...)` calls made inside kernels, by the called name (cached per file)."""
    return file.memo.get(_CALLS, lambda: _kernel_calls(file))


def _kernel_calls(file: PythonFile) -> dict[str, list[tuple[Kernel, ast.Call]]]:
    out: dict[str, list[tuple[Kernel, ast.Call]]] = {}
    jit = {k.name for k in kernels(file)}
    for k in kernels(file):
        for call in ast.walk(k.node):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                if call.func.id in jit:
                    out.setdefault(call.func.id, []).append((k, call))
    return out


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


def _within(inner: ast.expr | ast.stmt, outer: ast.expr | ast.stmt) -> bool:
    return _inside((inner.lineno, inner.col_offset), outer)


def flow(file: PythonFile, kernel: Kernel) -> OffsetFlow:
    cache = file.memo.get(_FLOWS, dict)
    key = id(kernel.node)
    if key not in cache:
        cache[key] = OffsetFlow(file, kernel)
    return cache[key]


def _file_tile_sizes(file: PythonFile) -> frozenset[str]:
    """The file-wide part of `tile_sizes` (cached per file)."""
    return file.memo.get(_FILE_TILES, lambda: _find_file_tile_sizes(file))


def _find_file_tile_sizes(file: PythonFile) -> frozenset[str]:
    sizes: set[str] = set()
    for call in file.nodes(ast.Call):
        if is_config_call(file, call) and call.args and isinstance(call.args[0], ast.Dict):
            sizes |= {
                k.value
                for k in call.args[0].keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    divisors: set[str] = set()
    for n in file.nodes(ast.Call, ast.BinOp):
        if isinstance(n, ast.Call) and len(n.args) == 2:
            f = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if "cdiv" in f:
                divisors.add(label(n.args[1]))
        elif (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.FloorDiv)
            and ceil_division(n)
            and isinstance(n.left, ast.BinOp)
        ):
            divisors.add(label(n.right))
    sizes |= divisors
    # A block rounded up from a size (`triton.next_power_of_2(n)`) covers that size and, unless
    # n is a power of two, overruns it: it is a tile of n as much as a cdiv divisor is.
    rounded_up = {
        label(targets[0])
        for call in file.nodes(ast.Call)
        if _rounds_up(call) and len(targets := file.model.targets_of(call)) == 1
    }
    for call in file.nodes(ast.Call):
        if isinstance(call.func, ast.Subscript):  # kernel[grid](..., BLOCK=block)
            sizes |= {
                k.arg
                for k in call.keywords
                if k.arg
                and (
                    label(k.value) in divisors
                    or label(k.value) in rounded_up
                    or _rounds_up(k.value)
                )
            }
    return frozenset(sizes)


def _rounds_up(node: ast.AST) -> bool:
    """`triton.next_power_of_2(n)` (any spelling): a size rounded up to a power of two."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return f == "next_power_of_2"


def tile_sizes(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Sizes the code itself treats as tiles of a larger extent, so that a program-id tile of
    that size can overrun: autotuned meta-parameters, divisors of a ceiling division anywhere in
    the file (`tl.cdiv(n, X)`, `triton.cdiv(n, meta["X"])`, and launch keywords passed such a
    divisor), loop steps, and sizes the kernel's own masks bound. A size with none of these
    (`row * D + tl.arange(0, D)`: a whole row) is left alone."""
    cache = file.memo.get(_TILES, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    sizes: set[str] = set(_file_tile_sizes(file))
    f = flow(file, kernel)
    for node in ast.walk(kernel.node):
        if isinstance(node, ast.For):
            r = _range_args(file, node.iter)
            if r and r[2] is not None:
                sizes.add(label(r[2]))
        op = tl_name(file, node) if isinstance(node, ast.Call) else None
        if isinstance(node, ast.Call) and op in ("load", "store"):
            mask = access_mask(node, op)
            if mask is not None:
                sizes |= _mask_bounds(f, mask)
    cache[key] = frozenset(sizes)
    return cache[key]


def _mask_bounds(f: OffsetFlow, mask: ast.AST) -> set[str]:
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


def divisibility_flags(file: PythonFile, kernel: Kernel) -> dict[str, bool]:
    """Constexpr flags that say whether a size is a multiple of its block, each with the value
    that means it is: set by a heuristic or a launch keyword that tests `%`
    (`EVEN_K=K % BLOCK_K == 0` -> True, `NEED_MASK = n % BLOCK != 0` -> False), or spelled as
    such (`EVEN_K`, `K_DIVISIBLE` -> True). A causal or feature flag is not one."""
    out = {n: True for n in kernel.constexprs if _EVEN.search(n)}
    for dec in kernel.heuristics:
        if dec.args and isinstance(dec.args[0], ast.Dict):
            for k, v in zip(dec.args[0].keys, dec.args[0].values, strict=False):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    body = v.body if isinstance(v, ast.Lambda) else v
                    polarity = mod_polarity(body)
                    if polarity is not None:
                        out[k.value] = polarity
    for call in file.nodes(ast.Call):
        if not isinstance(call.func, ast.Subscript) or label(call.func.value) != kernel.name:
            continue
        params = kernel.params
        passed = [(params[i], a) for i, a in enumerate(call.args) if i < len(params)]
        starred = [i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)]
        if starred:
            # `*q.stride()` hides how many parameters it fills: the arguments after the last
            # one fill the last parameters (unless an autotuner appends meta-parameters).
            tail = call.args[starred[-1] + 1 :]
            fits = kernel.autotune is None and len(tail) <= len(params)
            passed = (
                list(zip(params[len(params) - len(tail) :], tail, strict=False)) if fits else []
            )
        passed += [(k.arg, k.value) for k in call.keywords if k.arg]
        for arg, value in passed:
            if arg not in kernel.constexprs:
                continue
            if isinstance(value, ast.Name):  # NEED_MASK = n % BLOCK != 0; kernel[g](NEED_MASK=...)
                # the last plain assignment above the launch, from the model's bindings
                found = [
                    b
                    for b in file.model.bindings_of(value.id, before=call)
                    if b.kind in ("assign", "annassign")
                    and b.value is not None
                    and b.position[0] < call.lineno
                ]
                if found:
                    value = max(found, key=lambda b: b.position).value or value
            polarity = mod_polarity(value)
            if polarity is not None:
                out[arg] = polarity
    return out


def mod_polarity(node: ast.AST) -> bool | None:
    """For a test of divisibility, whether its being true means divisible: `n % B == 0` True,
    `n % B != 0` / `n % B` / `n % B > 0` False; None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = mod_polarity(node.operand)
        return None if inner is None else not inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return False
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        if any(_tests_mod(side) for side in (node.left, node.comparators[0])):
            if isinstance(node.ops[0], (ast.Eq, ast.Is)):
                return True
            if isinstance(node.ops[0], (ast.NotEq, ast.Gt, ast.IsNot)):
                return False
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        values = [mod_polarity(v) for v in node.values]
        if values and all(v is True for v in values):
            return True
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        values = [mod_polarity(v) for v in node.values]
        if values and all(v is False for v in values):
            return False
    return None


_EVEN = re.compile(r"^(?:IS_)?EVEN(?:_|$)|_EVEN$|DIVISIBLE|DIVIDES", re.I)


def _tests_mod(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node))


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# Launch sites: what the host code in the same file proves about a kernel's tiles ------------


def launch_bindings(kernel: Kernel, call: ast.Call) -> dict[str, ast.expr]:
    """The kernel parameter each argument of `kernel[grid](...)` binds (keywords, positions; after
    a `*starred` argument the trailing ones fill the last parameters unless autotuned)."""
    params = kernel.params
    passed = [(params[i], a) for i, a in enumerate(call.args) if i < len(params)]
    starred = [i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)]
    if starred:
        tail = call.args[starred[-1] + 1 :]
        fits = kernel.autotune is None and len(tail) <= len(params)
        passed = list(zip(params[len(params) - len(tail) :], tail, strict=False)) if fits else []
    passed += [(k.arg, k.value) for k in call.keywords if k.arg]
    return dict(passed)


def launches(file: PythonFile, kernel: Kernel) -> list[ast.Call]:
    """`kernel[grid](...)` calls in the file."""
    return [
        call
        for call in file.nodes(ast.Call)
        if isinstance(call.func, ast.Subscript) and label(call.func.value) == kernel.name
    ]


def _host_value(
    file: PythonFile, scope: ast.AST, node: ast.expr, line: int, depth: int = 0
) -> ast.expr:
    """A name in host code replaced by the value of its last assignment above `line` in the
    launcher's own body (unpacking of a literal tuple included); anything else as it is."""
    if depth > 4 or not isinstance(node, ast.Name):
        return node
    found = None
    for b in file.model.bindings_in(scope, node.id):  # in source order
        if isinstance(b.node, (ast.Assign, ast.AnnAssign)) and b.node.lineno < line:
            value = unpacked_value(b)
            if value is not None:
                found = value
    if found is None:
        return node
    return _host_value(file, scope, found, line, depth + 1)


def _host_int(file: PythonFile, scope, node: ast.AST, line: int) -> int | None:
    """An integer the host code fixes (literals, constants of the launcher or the module)."""
    env: dict[str, object] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id not in env:
            v = _host_value(file, scope, n, line)
            if v is not n:
                try:
                    env[n.id] = evaluate(v, {}, file)
                except Unknown:
                    pass
    try:
        value = evaluate(node, env, file)
    except Unknown:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _checked_multiples(file: PythonFile, scope, call: ast.Call) -> list[tuple[ast.AST, int]]:
    """`(dim, C)` for each `dim % C == 0` the launcher makes sure of before the launch:
    `assert dim % C == 0`, `torch._check(dim % C == 0)`, `if dim % C: raise ...`."""
    out: list[tuple[ast.AST, int]] = []

    def facts(test: ast.AST, holds: bool) -> None:
        # the divisibility tests that hold when `test` evaluates to `holds`. A stack, not
        # recursion: a closure that calls itself is a reference cycle holding the file's tree.
        stack = [test]
        while stack:
            part = stack.pop()
            if isinstance(part, ast.BoolOp):
                if isinstance(part.op, ast.And) == holds:  # all parts hold / all parts fail
                    stack.extend(reversed(part.values))
                continue
            polarity = mod_polarity(part)
            if polarity is None or polarity != holds:
                continue
            for n in ast.walk(part):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                    c = _host_int(file, scope, n.right, call.lineno)
                    if c:
                        out.append((n.left, c))
                    break

    for n in ast.walk(scope):
        if getattr(n, "lineno", call.lineno) >= call.lineno:
            continue
        if isinstance(n, ast.Assert):
            facts(n.test, True)
        elif isinstance(n, ast.If) and n.body and isinstance(n.body[-1], ast.Raise):
            facts(n.test, False)
        elif isinstance(n, ast.Call) and n.args:
            f = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if f in ("_check", "_check_with", "check"):
                facts(n.args[0], True)
    return out


def _divisor_function(file: PythonFile, name: str) -> bool:
    """A function of the file that returns only 1 or a `d` it has tested with
    `n % d == 0` on its first parameter `n` (a divisor of `n`, found by search)."""
    fn = next(
        (f for f in file.nodes(ast.FunctionDef) if f.name == name and f.args.args),
        None,
    )
    if fn is None:
        return False
    first = fn.args.args[0].arg
    returns = [r for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
    if not returns:
        return False
    for r in returns:
        v = r.value
        if isinstance(v, ast.Constant) and v.value == 1:
            continue
        if not isinstance(v, ast.Name):
            return False
        proven = False
        for anc in file.ancestors(r):
            if anc is fn:
                break
            if isinstance(anc, ast.If) and r in list(ast.walk(ast.Module(anc.body, []))):
                tests = anc.test.values if isinstance(anc.test, ast.BoolOp) else [anc.test]
                if isinstance(anc.test, ast.BoolOp) and not isinstance(anc.test.op, ast.And):
                    continue
                for t in tests:
                    if (
                        mod_polarity(t) is True
                        and isinstance(t, ast.Compare)
                        and isinstance(t.left, ast.BinOp)
                        and isinstance(t.left.op, ast.Mod)
                        and label(t.left.left) == first
                        and label(t.left.right) == v.id
                    ):
                        proven = True
        if not proven:
            return False
    return True


def _divides_dim(file: PythonFile, value: ast.AST) -> ast.expr | None:
    """The dimension a host value divides by construction: `math.gcd(n, X)`, or a divisor
    function of the file called on `n`."""
    if not isinstance(value, ast.Call) or not value.args:
        return None
    f = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
    if f == "gcd" or (isinstance(value.func, ast.Name) and _divisor_function(file, f)):
        return value.args[0]
    return None


def _rounded_to(
    file: PythonFile, scope, node: ast.expr, line: int, depth: int = 0
) -> list[ast.expr]:
    """The multiples a host size is rounded up to: `cdiv(n, B) * B`, `((n + B - 1) // B) * B`,
    `math.ceil(n / B) * B`, `n + (B - n % B) % B`, `n + -n % B`, through local names."""
    if depth > 4:
        return []
    node = _host_value(file, scope, node, line)
    if not isinstance(node, ast.BinOp):
        return []
    if isinstance(node.op, ast.Mult):
        for ceil, other in ((node.left, node.right), (node.right, node.left)):
            ceil = _host_value(file, scope, ceil, line)
            if not ceil_division(ceil):
                continue
            if isinstance(ceil, ast.Call) and len(ceil.args) == 2:
                d = ceil.args[1]
            elif isinstance(ceil, ast.Call) and ceil.args and isinstance(ceil.args[0], ast.BinOp):
                d = ceil.args[0].right  # math.ceil(n / B)
            elif isinstance(ceil, ast.BinOp) and isinstance(ceil.op, ast.FloorDiv):
                d = ceil.right
            else:
                continue
            if label(d) == label(other) or (
                _host_int(file, scope, d, line) is not None
                and _host_int(file, scope, d, line) == _host_int(file, scope, other, line)
            ):
                return [other]
    if isinstance(node.op, ast.Add):
        for pad in (node.left, node.right):
            pad = _host_value(file, scope, pad, line)
            if isinstance(pad, ast.BinOp) and isinstance(pad.op, ast.Mod):
                inner = pad.left
                if any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(inner)
                ) or (isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.USub)):
                    return [pad.right]
    return []


_ALLOCATORS = ("empty", "zeros", "ones", "full", "new_empty", "new_zeros", "new_ones", "new_full")


def _allocated_dims(file: PythonFile, scope, node: ast.expr, line: int) -> list[ast.expr]:
    """The sizes of a buffer allocated in the launcher (`torch.empty((a, b), ...)`)."""
    value = _host_value(file, scope, node, line)
    if not isinstance(value, ast.Call) or not isinstance(value.func, (ast.Attribute, ast.Name)):
        return []
    f = value.func.attr if isinstance(value.func, ast.Attribute) else value.func.id
    if f not in _ALLOCATORS:
        return []
    shape = next((k.value for k in value.keywords if k.arg == "size"), None)
    if shape is None and value.args:
        shape = value.args[0] if isinstance(value.args[0], (ast.Tuple, ast.List)) else None
        if shape is None:
            return list(value.args)
    return list(shape.elts) if isinstance(shape, (ast.Tuple, ast.List)) else []


def _same_size(file: PythonFile, scope, a: ast.expr, b: ast.expr, line: int) -> bool:
    """Whether block `b` divides `a`: the same expression, or integers with `a % b == 0`."""
    if label(_host_value(file, scope, a, line)) == label(_host_value(file, scope, b, line)):
        return True
    ia, ib = _host_int(file, scope, a, line), _host_int(file, scope, b, line)
    return ia is not None and ib is not None and ib > 0 and ia % ib == 0


def _tile_values(
    file: PythonFile, kernel: Kernel, bound: dict[str, ast.expr], param: str
) -> list[ast.expr]:
    """What a constexpr tile is at one launch: the argument bound to it, else the values every
    autotune config gives it."""
    if param in bound:
        return [bound[param]]
    if kernel.autotune is None:
        return []
    configs = autotune_configs(file, kernel.autotune)
    if not configs or any(not isinstance(c.kwargs.get(param), int) for c in configs):
        return []
    return [ast.Constant(v) for c in configs if isinstance(v := c.kwargs[param], int)]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def launch_divided_tiles(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Constexpr tiles every launch in the file keeps in bounds: the launcher makes sure a
    dimension it passes is a multiple of C (`assert n % C == 0`, `if n % C: raise`) and the tile
    is a constant dividing C; or the tile is computed from a dimension it passes so that it
    divides it (`math.gcd(n, 256)`, a divisor-search helper of the file)."""
    cache = file.memo.get(_LAUNCH_DIVIDED, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    calls = launches(file, kernel)
    out: set[str] | None = None
    for call in calls:
        scope = file.enclosing_function(call)
        if scope is None:
            out = set()
            break
        bound = launch_bindings(kernel, call)
        passed = set().union(*(_names(v) for v in bound.values())) if bound else set()
        checks = [
            (dim, c) for dim, c in _checked_multiples(file, scope, call) if _names(dim) & passed
        ]
        here = set()
        for param in kernel.constexprs:
            values = _tile_values(file, kernel, bound, param)
            if not values:
                continue
            ints = [_host_int(file, scope, v, call.lineno) for v in values]
            known = [b for b in ints if b]
            if len(known) == len(ints) and any(all(c % b == 0 for b in known) for _, c in checks):
                here.add(param)
                continue
            if len(values) == 1:
                dim = _divides_dim(file, _host_value(file, scope, values[0], call.lineno))
                if dim is not None and _names(dim) & passed:
                    here.add(param)
        out = here if out is None else out & here
    cache[key] = frozenset(out or ())
    return cache[key]


def launch_padded_buffers(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Pointer parameters that every launch binds to a buffer the launcher allocated with a size
    rounded up to a multiple of a tile it passes (`torch.empty((cdiv(m, B) * B, n))`)."""
    cache = file.memo.get(_LAUNCH_PADDED, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    out: set[str] | None = None
    for call in launches(file, kernel):
        scope = file.enclosing_function(call)
        if scope is None:
            out = set()
            break
        bound = launch_bindings(kernel, call)
        tiles = [
            v
            for p in kernel.constexprs
            for v in _tile_values(file, kernel, bound, p)
            if len(_tile_values(file, kernel, bound, p)) == 1
        ]
        here = set()
        for param, arg in bound.items():
            if param in kernel.constexprs:
                continue
            base = (
                arg.func.value
                if isinstance(arg, ast.Call)
                and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "contiguous"
                else arg
            )
            for dim in _allocated_dims(file, scope, base, call.lineno):
                multiples = _rounded_to(file, scope, dim, call.lineno)
                if any(
                    _same_size(file, scope, m, t, call.lineno) for m in multiples for t in tiles
                ):
                    here.add(param)
        out = here if out is None else out & here
    cache[key] = frozenset(out or ())
    return cache[key]
