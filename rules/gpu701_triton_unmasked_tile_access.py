import ast
import re

from gpulint.frontends.python import triton as tt
from gpulint.rule import Rule


class TritonUnmaskedTileAccess(Rule):
    """
    ## What it does
    Finds `tl.load` / `tl.store` in a `@triton.jit` kernel whose offsets are tiled by the program
    id, `pid * BLOCK + tl.arange(0, BLOCK)` with the same block size (in one or two dimensions),
    and that pass no `mask=` (an `other=` alone does not count). Only that pattern is checked:
    offsets that cover a whole dimension (`row * stride + tl.arange(0, D)`), sub-tiles of a
    program id taken modulo a count (`i_c % NC`), and sizes not named like a block (`BLOCK_*`,
    `TILE_*`, `XBLOCK`, `BT`/`BK`/`BV`) depend on how the launcher picks them, and are left alone.

    Also left alone, because the size is then known to be a multiple of the block or the access
    is bounded another way: offsets wrapped with `% size` or clamped (`tl.minimum`, `tl.where`);
    kernels that use `tl.multiple_of` / `tl.max_contiguous` (the author states alignment the
    linter cannot see); a `tl.static_assert` / `tl.assume` of divisibility in the kernel; a
    launcher in the same file that asserts divisibility (`assert n % BLOCK == 0`, or
    `if n % BLOCK: raise ...`) or launches an exact grid (`kernel[(n // BLOCK,)]`, no `cdiv`);
    an access under an `if` on a constexpr flag (`if EVEN_K:`) or on the tile's own position
    (`if pid * BLOCK + BLOCK <= n:`), or after an early `return` for tiles past the end; block
    pointers (`tl.make_block_ptr` with `boundary_check`) and tensor descriptors; pointers into
    a buffer strided by a size named as rounded or padded (`seqlen_q_rounded`: allocated up to
    a multiple of the block); test code.

    ## Why is this bad?
    The grid is `cdiv(n, BLOCK)`, so unless `n` is a multiple of `BLOCK` the last program reads or
    writes past the end of the tensor. Out-of-bounds loads return whatever lies there (or fault
    with an illegal memory access); out-of-bounds stores corrupt neighbouring allocations. It
    works in tests with round sizes and breaks on the first odd one.

    ## Example
    ```python
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(axis=0)
        offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + offsets)
        y = tl.load(y_ptr + offsets)
        tl.store(out_ptr + offsets, x + y)
    ```

    ## Use instead
    ```python
    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(axis=0)
        offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, x + y, mask=mask)
    ```

    ## References
    - [Triton tutorial: vector addition (masking the last block)](https://triton-lang.org/main/getting-started/tutorials/01-vector-add.html)
    - [triton.language.load](https://triton-lang.org/main/python-api/generated/triton.language.load.html)
    - [Triton language reference](https://triton-lang.org/main/python-api/triton.language.html)
    """

    code = "GPU701"
    name = "triton-unmasked-tile-access"
    triggers = ("triton",)
    message = (
        "`tl.{op}` on offsets tiled by `tl.program_id` with no `mask=`: the last block {verb} "
        "past the end unless the size is a multiple of the block; pass "
        "`mask=offsets < n_elements`{other} (or assert the divisibility)"
    )
    tags = ("triton", "correctness")

    VALID = [
        # Masked.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x, mask=mask)
""",
        # Wrapped with % (the matmul tutorial).
        """
import triton
import triton.language as tl

@triton.jit
def k(a_ptr, M, K, stride_am, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_k = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + offs_am[:, None] * stride_am + offs_k[None, :])
""",
        # EVEN_K-style constexpr flag guarding the unmasked branch.
        """
from triton import jit
import triton.language as tl

@jit
def k(x_ptr, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
""",
        # Whole-row offsets: not tiled by program id.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, stride, D: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * stride + tl.arange(0, D))
""",
        # Divisibility asserted by the launcher.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)

def launch(x, BLOCK=1024):
    assert x.numel() % BLOCK == 0
    k[(x.numel() // BLOCK,)](x, BLOCK=BLOCK)
""",
        # A buffer allocated rounded up to the block.
        """
import triton
import triton.language as tl

@triton.jit
def k(Delta, off_hb, seqlen_q_rounded, BLOCK_M: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(Delta + off_hb * seqlen_q_rounded + offs_m, tl.zeros([BLOCK_M], dtype=tl.float32))
""",
    ]
    INVALID = [
        """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets)
    tl.store(out_ptr + offsets, x + y)
""",
        # `other=` only, and an alias import.
        """
import triton as tr
import triton.language as tl

@tr.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, other=0.0)
""",
    ]

    def finish(self, file):
        if file.is_test:
            return
        kernels = tt.kernels(file)
        if not kernels or _launcher_asserts_divisibility(file):
            return
        exact = _exact_grid_kernels(file)
        for kernel in kernels:
            if kernel.name in exact or _kernel_declares_divisibility(file, kernel):
                continue
            flow = tt.flow(file, kernel)
            returns_before = _early_return_lines(file, kernel, flow)
            for call in ast.walk(kernel.node):
                if not isinstance(call, ast.Call):
                    continue
                op = tt.tl_name(file, call)
                if op not in ("load", "store"):
                    continue
                if _has_mask(call, op) or any(
                    k.arg in ("boundary_check", None) for k in call.keywords
                ):
                    continue
                pointer = (
                    call.args[0]
                    if call.args
                    else next((k.value for k in call.keywords if k.arg == "pointer"), None)
                )
                if pointer is None or not flow.of(pointer).bits & tt.TILE:
                    continue
                if _padded_buffer(pointer):
                    continue
                if _guarded(file, call, kernel, flow) or any(
                    line < call.lineno for line in returns_before
                ):
                    continue
                yield self.report(
                    file,
                    call,
                    op=op,
                    verb="reads" if op == "load" else "writes",
                    other=", other=0.0" if op == "load" else "",
                )


def _has_mask(call: ast.Call, op: str) -> bool:
    position = 1 if op == "load" else 2
    mask = next((k.value for k in call.keywords if k.arg == "mask"), None)
    if mask is None and len(call.args) > position:
        mask = call.args[position]
    return mask is not None and not (isinstance(mask, ast.Constant) and mask.value is None)


def _has_mod(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node))


def _launcher_asserts_divisibility(file) -> bool:
    """`assert n % BLOCK == 0`, or `if n % BLOCK != 0: raise ...`, anywhere in the module (a
    modulus named like a block, or a literal of 32 or more: `% 16` is alignment, `% nheads_k`
    a shape check)."""
    if any(_block_mod(a.test) for a in file.nodes(ast.Assert)):
        return True
    return any(
        _block_mod(node.test) and any(isinstance(s, ast.Raise) for s in node.body)
        for node in file.nodes(ast.If)
        if tt.kernel_of(file, node) is None
    )


def _block_mod(test: ast.AST) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            for m in ast.walk(n.right):
                if isinstance(m, ast.Name) and tt.is_block_name(m.id):
                    return True
                if isinstance(m, ast.Attribute) and tt.is_block_name(m.attr):
                    return True
                if isinstance(m, ast.Constant) and isinstance(m.value, int) and m.value >= 32:
                    return True
    return False


def _exact_grid_kernels(file) -> set[str]:
    """Kernels launched as `kernel[grid]` with a grid of floor divisions (`n // BLOCK`) and no
    ceiling division (`cdiv`, `(n + B - 1) // B`): the launcher relies on divisibility."""
    out = set()
    for sub in file.nodes(ast.Subscript):
        if not isinstance(sub.value, ast.Name) or not isinstance(file.parent(sub), ast.Call):
            continue
        if file.parent(sub).func is not sub:
            continue
        grid = _resolve_grid(file, sub.slice, sub)
        if grid is None:
            continue
        divs = [
            n for n in ast.walk(grid) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv)
        ]
        ceil = any(
            isinstance(d.left, ast.BinOp) and isinstance(d.left.op, (ast.Add, ast.Sub))
            for d in divs
        )
        cdiv = any(
            isinstance(n, ast.Call)
            and "cdiv" in (ast.unparse(n.func) or "")
            or isinstance(n, ast.Call)
            and "ceil" in ast.unparse(n.func)
            for n in ast.walk(grid)
        )
        if divs and not ceil and not cdiv:
            out.add(sub.value.id)
    return out


def _resolve_grid(file, node, at):
    if isinstance(node, ast.Lambda):
        return node.body
    if isinstance(node, ast.Name):
        scope = file.enclosing_function(at) or file.tree
        found = None
        for n in ast.walk(scope):
            if isinstance(n, ast.Assign) and n.lineno < at.lineno:
                if any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets):
                    found = n.value
        if isinstance(found, ast.Lambda):
            return found.body
        return found
    return node


def _early_return_lines(file, kernel, flow) -> list[int]:
    """`if pid_m * BLOCK_M >= n: return` at the kernel's top level: later tiles are in bounds."""
    lines = []
    for stmt in ast.walk(kernel.node):
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return):
            pos = (stmt.test.lineno, stmt.test.col_offset)
            names = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
            pid_test = any(flow.name_at(n, pos).bits & (tt.PID | tt.PIDMUL) for n in names) or any(
                isinstance(n, ast.Call) and tt.tl_name(file, n) == "program_id"
                for n in ast.walk(stmt.test)
            )
            if pid_test:
                lines.append(stmt.lineno)
    return lines


def _kernel_declares_divisibility(file, kernel) -> bool:
    for call in ast.walk(kernel.node):
        if not isinstance(call, ast.Call):
            continue
        name = tt.tl_name(file, call)
        if (
            name in ("static_assert", "assume", "device_assert")
            and call.args
            and _has_mod(call.args[0])
        ):
            return True
        if name in ("multiple_of", "max_contiguous"):
            return True  # the author states alignment/divisibility facts the linter cannot see
    return False


def _guarded(file, call: ast.AST, kernel, flow) -> bool:
    """Under an `if` on a constexpr flag, a divisibility test, or the tile's own position."""
    for anc in file.ancestors(call):
        if anc is kernel.node:
            return False
        if isinstance(anc, (ast.If, ast.While, ast.IfExp)):
            test = anc.test
            names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
            if names & set(kernel.constexprs) or _has_mod(test):
                return True
            pos = (test.lineno, test.col_offset)
            if any(flow.name_at(n, pos).bits & (tt.PID | tt.PIDMUL) for n in names):
                return True
            if any(
                isinstance(n, ast.Call) and tt.tl_name(file, n) == "program_id"
                for n in ast.walk(test)
            ):
                return True
    return False


# `seqlen_q_rounded`, `n_padded`: the buffer was allocated rounded up to the block.
_PADDED = re.compile(r"rounded|padded", re.IGNORECASE)


def _padded_buffer(pointer: ast.AST) -> bool:
    """The pointer arithmetic strides by a size named as rounded or padded (flash-attention's
    `Delta + off_hb * seqlen_q_rounded + offs_m`): the allocation covers the last block."""
    return any(isinstance(n, ast.Name) and _PADDED.search(n.id) for n in ast.walk(pointer))
