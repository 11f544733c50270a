"""Tiles of Triton kernels: which block sizes the code treats as tiles of a larger extent
(and so can overrun), the roles of matmul block sizes, and the tiles a `tl.dot` stages in
shared memory, with the bytes Triton's software pipeline allocates for them under a config."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpulint.frontends import MemoKey
from gpulint.frontends.python.triton.autotune import Config, is_config_call
from gpulint.frontends.python.triton.kernels import Kernel
from gpulint.frontends.python.triton.launches import launch_bindings, remote_launches
from gpulint.frontends.python.triton.literals import (
    Unknown,
    ceil_division,
    evaluate,
    label,
    tl_name,
)
from gpulint.frontends.python.triton.offsets import (
    BLOCKPTR,
    OffsetFlow,
    access_mask,
    flow,
    mask_bounds,
    range_args,
    within,
)

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile
    from gpulint.hardware import Arch

_FILE_TILES: MemoKey[frozenset[str]] = MemoKey("triton.file_tiles")
_TILES: MemoKey[dict[int, frozenset[str]]] = MemoKey("triton.tiles")


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


def is_tile(size: str, known: frozenset[str], constexprs: frozenset[str] = frozenset()) -> bool:
    """`size` is one of the `known` tile sizes (`tile_sizes`), or constexpr arithmetic of one
    by a literal or by another of the kernel's `constexprs`: `BLOCK_N // 8` (the packed columns
    of a BLOCK_N tile), `BLOCK * 2`, `2 * BK`, `BLOCK // GROUP`. A tile scaled by a constant
    covers a scaled extent in as many blocks, and overruns it the same way; a run-time factor
    (`BLOCK // n`) is no such constant."""
    if size in known:
        return True
    try:
        node = ast.parse(size, mode="eval").body
    except SyntaxError:
        return False
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Mult | ast.FloorDiv):
        return False
    sides = [(node.left, node.right)]
    if isinstance(node.op, ast.Mult):
        sides.append((node.right, node.left))
    return any(
        isinstance(base, ast.Name)
        and base.id in known
        and (
            (isinstance(c, ast.Constant) and type(c.value) is int and c.value > 1)
            or (isinstance(c, ast.Name) and c.id in constexprs and c.id != base.id)
        )
        for base, c in sides
    )


def tile_sizes(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Sizes the code itself treats as tiles of a larger extent, so that a program-id tile of
    that size can overrun: autotuned meta-parameters, divisors of a ceiling division anywhere in
    the file (`tl.cdiv(n, X)`, `triton.cdiv(n, meta["X"])`, and launch keywords passed such a
    divisor; or in the host code of another module of the tree that launches the kernel),
    loop steps, and sizes the kernel's own masks bound. A size with none of these
    (`row * D + tl.arange(0, D)`: a whole row) is left alone."""
    cache = file.memo.get(_TILES, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    sizes: set[str] = set(_file_tile_sizes(file))
    for host, call in remote_launches(file, kernel):
        # Launched from another module: what its host code divides by (`triton.cdiv(n,
        # BLOCK_SIZE)`), and the constexprs it binds to such a divisor, positionally too.
        host_sizes = _file_tile_sizes(host)
        sizes |= host_sizes
        for param, value in launch_bindings(kernel, call).items():
            if param in kernel.constexprs and (label(value) in host_sizes or _rounds_up(value)):
                sizes.add(param)
    f = flow(file, kernel)
    for node in ast.walk(kernel.node):
        if isinstance(node, ast.For):
            r = range_args(file, node.iter)
            if r and r[2] is not None:
                sizes.add(label(r[2]))
        op = tl_name(file, node) if isinstance(node, ast.Call) else None
        if isinstance(node, ast.Call) and op in ("load", "store"):
            mask = access_mask(node, op)
            if mask is not None:
                sizes |= mask_bounds(f, mask)
    cache[key] = frozenset(sizes)
    return cache[key]


# -- block-size roles (matmul-like kernels) --------------------------------------------------
_ROLE = re.compile(r"^(?:BLOCK_SIZE_|BLOCK_|BLOCK|TILE_SIZE_|TILE_|B)([MNK])(?:_SIZE)?$")


def block_role(name: str) -> str | None:
    """'M' for BLOCK_M / BLOCK_SIZE_M / BLOCK_M_SIZE / BM / TILE_M; None otherwise."""
    m = _ROLE.match(name)
    return m.group(1) if m else None


def pipeline_buffers(arch: Arch, num_stages: int, block_m: int) -> int:
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
        if loop is None or not within(loop, kernel.node):
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
                tiles[id(load)] = SmemTile(load, sizes, within(load, loop))
    return list(tiles.values())


def _feeding_loads(
    file: PythonFile, f: OffsetFlow, expr: ast.AST, depth: int, seen: set[int]
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
        def tiles(ts: list[tuple[tuple[int, ...], str]]) -> str:
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
    arch: Arch,
    nbytes: int,
    env_extra: dict[str, Any] | None = None,
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

    def elems(ts: list[tuple[tuple[int, ...], str]]) -> int:
        total = 0
        for dims, _ in ts:
            n = 1
            for d in dims:
                n *= d
            total += n
        return total

    total = (buffers * elems(per_stage) + elems(once)) * nbytes
    return SmemEstimate(total, buffers, per_stage, once, nbytes)
