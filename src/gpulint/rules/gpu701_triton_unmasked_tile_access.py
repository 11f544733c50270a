import ast

from gpulint.diagnostics import Severity
from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Rule


class TritonUnmaskedTileAccess(Rule):
    """
    ## What it does
    Finds `tl.load` / `tl.store` in a `@triton.jit` kernel whose offsets are tiled, and that
    nothing bounds. Offsets are followed by dataflow, not by their names: a value is tiled when
    it is `start + tl.arange(0, X)` where the start steps by the same `X`: a program id times
    `X` (`pid * BLOCK + tl.arange(0, BLOCK)`, in one or two dimensions), the variable of a loop
    `for start in range(0, n, X)` over a run-time `n`, or a pointer advanced by `X` on each
    iteration of a loop over `cdiv(n, X)` blocks (the K loop of a matmul, the KV loop of an
    attention kernel). A program-id tile counts where the code treats `X` as a tile of a larger
    extent: an autotuned meta-parameter, a divisor of `cdiv` (in the kernel or its launch grid),
    a loop step, or a size the kernel's own masks bound, or constexpr arithmetic of one by a
    literal or another constexpr (`pid * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)`, the
    packed bytes of a fp4 tile; `pid * BLOCK * 2 + tl.arange(0, BLOCK * 2)`; the
    `BLOCK // GROUP_SIZE` scales of a group quantizer); `row * D + tl.arange(0, D)` with none
    of these is a whole row and is left alone. A kernel with no launch in its file (its
    launcher lives elsewhere) that is passed a size it never reads (the textbook
    `add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE)` with its masks left out; not a
    pointer or a stride, by their names) has its constexpr blocks taken as tiles of it, unless
    its docstring or comments say a size is divisible by (a multiple of) the block, or it hints
    alignment (`tl.multiple_of`, `tl.max_contiguous`, `tl.assume`). Block pointers are checked
    the same way: a
    `tl.make_block_ptr` whose offsets are tiled by a program id, or that `tl.advance` moves by
    its block in such a loop, needs `boundary_check` on that dimension unless the dimension's
    shape is a compile-time constant.

    An access is bounded, and left alone, when its `mask=` bounds the tiled offsets (a mask on
    the rows alone does not cover columns tiled by the K loop: that is reported); the offsets
    are wrapped with `% size` or clamped (`tl.minimum`, `tl.where`); an alignment hint
    (`tl.multiple_of`, `tl.max_contiguous`) wraps the tiled value itself (a hint covers only the
    value it wraps, not the kernel); it sits in the branch of an `if` where a divisibility test
    holds: an `EVEN_K`/`*_DIVISIBLE` flag, a flag set by a heuristic or launch keyword testing
    `%` (`NEED_MASK = n % BLOCK != 0` guards its `else`), or `n % BLOCK == 0` itself (a causal or
    feature flag is not such a test); it is under a test of the tile's own position
    (`if pid * BLOCK + BLOCK <= n:`) or after an early `return` for tiles past the end; a loop's
    bound is rounded down to a multiple (`n // X * X`) or comes from a helper it cannot read;
    `tl.static_assert`/`tl.assume` of divisibility in the kernel; a launcher in the same file
    that asserts divisibility (`assert n % BLOCK == 0`, or `if n % BLOCK: raise ...`) or launches
    an exact grid (`kernel[(n // BLOCK,)]`, no `cdiv`); a tile that every launch in the file keeps
    whole: a constant (or every autotune value) dividing a multiple the launcher makes sure of, before
    the launch, for a dimension it passes (`assert n % 128 == 0`, `if n % C: raise`,
    `torch._check(n % C == 0)`), or a block computed as a divisor of a dimension it passes
    (`math.gcd(n, 256)`, or a helper of the file that returns only a `d` it tested with
    `n % d == 0`); a pointer the launcher binds to a buffer it allocated rounded up to a multiple
    of a tile it passes (`torch.empty((triton.cdiv(m, B) * B, k))`, `m + (B - m % B) % B`); pointers into a buffer strided by a size
    named as rounded or padded (`seqlen_q_rounded`: allocated up to a multiple of the block),
    also through a `@triton.jit` helper whose callers all pass such a pointer; test code.
    Launches in other modules of the checked tree count as the file's own: a kernels module
    launched from `ops.py` (`from .kernels import add_kernel; add_kernel[grid](...)`, or
    `from . import kernels; kernels.add_kernel[grid](...)`) takes its tiles from that
    launcher's `cdiv` grid, and is left alone where that launcher asserts divisibility or
    launches an exact grid.
    A definition under `if MODE == "a":` on a constexpr does not reach a use under
    `if MODE == "b":`.

    ## Why is this bad?
    The grid is `cdiv(n, BLOCK)` (or the loop runs `cdiv(n, BLOCK)` times), so unless `n` is a
    multiple of `BLOCK` the last program (or iteration) reads or writes past the end of the
    tensor. Out-of-bounds loads return whatever lies there (or fault
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
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    severity = Severity.ERROR  # an out-of-bounds access
    name = "triton-unmasked-tile-access"
    triggers = ("triton",)
    message = (
        "`tl.{op}` on offsets tiled by {by} in steps of `{size}` with no `mask=`: the last block "
        "{verb} past the end unless the size is a multiple of `{size}`; pass "
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

def add(x, y, out):
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, x.numel(), BLOCK_SIZE=1024)
""",
        # `other=` only, an alias import; autotuned, so BLOCK is a tile of a larger extent.
        """
import triton as tr
import triton.language as tl

@tr.autotune(configs=[tr.Config({"BLOCK": 1024}), tr.Config({"BLOCK": 4096})], key=["n"])
@tr.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, other=0.0)
""",
    ]

    def finish(self, file: PythonFile):
        if file.is_test:
            return
        kernels = tt.kernels(file)
        if not kernels or _launcher_asserts_divisibility(file, kernels):
            return
        exact = _exact_grid_kernels(file)
        for kernel in kernels:
            if kernel.name in exact or _kernel_declares_divisibility(file, kernel):
                continue
            remote = {id(host): host for host, _ in tt.remote_launches(file, kernel)}
            if any(
                kernel.name in _exact_grid_kernels(host)
                or _launcher_asserts_divisibility(host, [kernel], file)
                for host in remote.values()
            ):
                continue  # launched from another module that relies on or asserts divisibility
            flow = tt.flow(file, kernel)
            known = tt.tile_sizes(file, kernel)
            constexprs = frozenset(kernel.constexprs)
            if (
                not tt.host_launches(file, kernel)
                and tt.unread_sizes(kernel)
                and not tt.documents_divisibility(file, kernel)
                and not tt.hints_alignment(file, kernel)
            ):
                # Launched from elsewhere, and a size it is passed goes unread (the textbook
                # `n_elements` of a kernel with no mask): its constexpr blocks tile that size.
                known = known | frozenset(kernel.constexprs)
            divided = tt.launch_divided_tiles(file, kernel)
            flags = tt.divisibility_flags(file, kernel)
            returns_before = _early_return_lines(file, kernel, flow)
            for call in ast.walk(kernel.node):
                if not isinstance(call, ast.Call):
                    continue
                op = tt.tl_name(file, call)
                if op not in ("load", "store") or any(k.arg is None for k in call.keywords):
                    continue
                pointer = (
                    call.args[0]
                    if call.args
                    else next((k.value for k in call.keywords if k.arg == "pointer"), None)
                )
                if pointer is None:
                    continue
                value = flow.of(pointer)
                # A program-id tile counts where the code treats its size as a tile of a larger
                # extent; a loop over `cdiv(n, X)` blocks says so itself.
                partial = False
                if value.bits & tt.BLOCKPTR:
                    unchecked = _unchecked_dims(call, value, known)
                    if not unchecked:
                        continue
                    tiles = [(x, o) for _, x, o in unchecked]
                else:
                    unchecked = None
                    tiles = sorted(
                        (
                            (x, o)
                            for x, o in value.tiles
                            if o == tt.LOOP or tt.is_tile(x, known, constexprs)
                        ),
                        key=lambda t: (t[0] not in known, t),  # a size as written first
                    )
                    if not tiles or value.bits & tt.PADDED:
                        continue
                    mask = tt.access_mask(call, op)
                    if mask is not None:
                        bounded = flow.of(mask).bounded_sizes
                        tiles = [t for t in tiles if t[0] not in bounded]
                        if not bounded or not tiles:
                            continue  # bounded, or a mask not built from offsets: trusted
                        partial = True
                tiles = [t for t in tiles if t[0] not in divided]
                if unchecked is not None:
                    unchecked = [u for u in unchecked if u[1] not in divided]
                if not tiles:
                    continue  # every launch keeps these tiles whole
                if _guarded(file, call, kernel, flow, flags) or any(
                    line < call.lineno for line in returns_before
                ):
                    continue
                yield self._finding(file, call, op, tiles[0], unchecked, partial)

    def _finding(self, file: PythonFile, call, op, tile, unchecked, partial):
        size, origin = tile
        by = "the program id" if origin == tt.PROGRAM else "a loop over blocks"
        verb = "reads" if op == "load" else "writes"
        if unchecked is not None:
            dims = sorted({d for d, _, _ in unchecked})
            want = ", ".join(map(str, sorted(set(dims) | _checked_dims(call))))
            pad = ', padding_option="zero"' if op == "load" else ""
            return self.report(
                file,
                call,
                message=(
                    f"`tl.{op}` on a block pointer tiled by {by} (block `{size}` in dimension "
                    f"{dims[0]}) with no `boundary_check` for it: the last block {verb} past "
                    f"the end unless the size is a multiple of `{size}`; pass "
                    f"`boundary_check=({want}{',' if len(dims) == 1 and ',' not in want else ''}){pad}`"
                ),
            )
        if partial:
            return self.report(
                file,
                call,
                message=(
                    f"`tl.{op}` masks some of its dimensions but not the one tiled by {by} in "
                    f"steps of `{size}`: the last block {verb} past the end unless that size "
                    f"is a multiple of `{size}`; add its bound to the mask (or assert the "
                    "divisibility)"
                ),
            )
        return self.report(
            file,
            call,
            by=by,
            size=size,
            op=op,
            verb=verb,
            other=", other=0.0" if op == "load" else "",
        )


def _checked_dims(call: ast.Call) -> set[int]:
    node = next((k.value for k in call.keywords if k.arg == "boundary_check"), None)
    if node is None:
        return set()
    try:
        value = tt.evaluate(node, {})
    except tt.Unknown:
        return set(range(8))  # not a literal: take it as checking what it must
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    return {v for v in value if isinstance(v, int)} if isinstance(value, list) else set(range(8))


def _unchecked_dims(call: ast.Call, value, known) -> list[tuple[int, str, str]]:
    checked = _checked_dims(call)
    return sorted(
        (d, x, o) for d, x, o in value.bp_tiles if d not in checked and (o == tt.LOOP or x in known)
    )


def _has_mod(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node))


def _launcher_asserts_divisibility(
    file: PythonFile, kernels, home: PythonFile | None = None
) -> bool:
    """`assert n % BLOCK == 0`, or `if n % BLOCK != 0: raise ...`, anywhere in the module (a
    modulus that is one of the kernels' tile sizes, or a literal of 32 or more: `% 16` is
    alignment, `% nheads_k` a shape check). `home`: the kernels' own file, where `file` is
    another module that launches them."""
    sizes = set().union(*(tt.tile_sizes(home or file, k) for k in kernels))
    constexprs = {c for k in kernels for c in k.constexprs}
    for call in file.nodes(ast.Call):  # kernel[grid](..., BLOCK_SIZE=block_size)
        if isinstance(call.func, ast.Subscript):
            sizes |= {tt.label(k.value) for k in call.keywords if k.arg in sizes | constexprs}
    if any(_block_mod(a.test, sizes) for a in file.nodes(ast.Assert)):
        return True
    return any(
        _block_mod(node.test, sizes) and any(isinstance(s, ast.Raise) for s in node.body)
        for node in file.nodes(ast.If)
        if tt.kernel_of(file, node) is None
    )


def _block_mod(test: ast.AST, sizes) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            for m in ast.walk(n.right):
                if isinstance(m, (ast.Name, ast.Attribute, ast.Subscript)) and tt.label(m) in sizes:
                    return True
                if isinstance(m, ast.Constant) and isinstance(m.value, int) and m.value >= 32:
                    return True
    return False


def _exact_grid_kernels(file: PythonFile) -> set[str]:
    """Kernels launched as `kernel[grid]` with a grid of floor divisions (`n // BLOCK`) and no
    ceiling division (`cdiv`, `(n + B - 1) // B`): the launcher relies on divisibility."""
    out = set()
    for sub in file.nodes(ast.Subscript):
        call = file.parent(sub)
        if not isinstance(sub.value, ast.Name) or not isinstance(call, ast.Call):
            continue
        if call.func is not sub:
            continue
        grid = _resolve_grid(file, sub.slice, sub)
        if grid is None:
            continue
        divs = [
            n for n in ast.walk(grid) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv)
        ]
        if divs and not tt.ceil_division(grid):
            out.add(sub.value.id)
    return out


def _resolve_grid(file: PythonFile, node, at):
    if isinstance(node, ast.Lambda):
        return node.body
    if isinstance(node, ast.Name):
        # The last `grid = ...` above the launch in the launcher's own body.
        scope = file.enclosing_function(at) or file.tree
        found = None
        for b in file.model.bindings_in(scope, node.id):  # in source order
            if isinstance(b.node, ast.Assign) and b.node.lineno < at.lineno and b.value is not None:
                found = b.value
        if isinstance(found, ast.Lambda):
            return found.body
        return found
    return node


def _position_test(file: PythonFile, test: ast.expr, flow) -> bool:
    """A test on the program's own position (`pid * BLOCK + BLOCK <= n`)."""
    pos = (test.lineno, test.col_offset)
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    if any(flow.name_at(n, pos).bits & (tt.INDEX | tt.START) for n in names):
        return True
    return any(
        isinstance(n, ast.Call) and tt.tl_name(file, n) == "program_id" for n in ast.walk(test)
    )


def _early_return_lines(file: PythonFile, kernel, flow) -> list[int]:
    """`if pid_m * BLOCK_M >= n: return` in the kernel: later tiles are in bounds."""
    return [
        stmt.lineno
        for stmt in ast.walk(kernel.node)
        if isinstance(stmt, ast.If)
        and stmt.body
        and isinstance(stmt.body[-1], ast.Return)
        and _position_test(file, stmt.test, flow)
    ]


def _kernel_declares_divisibility(file: PythonFile, kernel) -> bool:
    """`tl.static_assert(n % BLOCK == 0)` / `tl.assume(...)` / `tl.device_assert(...)`."""
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
    return False


def _divisible_when(test: ast.AST, flags: dict[str, bool]) -> bool | None:
    """True when the test holding means a size is a multiple of its block (`EVEN_K`,
    `N % BLOCK_N == 0`), False when its failing does (`not EVEN_K`, `N % BLOCK_N`,
    `NEED_MASK`), None when it says nothing about divisibility (a causal or feature flag)."""
    if isinstance(test, ast.Name):
        return flags.get(test.id)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _divisible_when(test.operand, flags)
        return None if inner is None else not inner
    polarity = tt.mod_polarity(test)
    if polarity is not None:
        return polarity
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], (ast.Eq, ast.Is)) and isinstance(right, ast.Constant):
            inner = _divisible_when(left, flags)
            if inner is not None:
                return inner if right.value else not inner
        if isinstance(test.ops[0], ast.Eq) and isinstance(left, ast.BinOp):
            # `EVEN_MN & d == BLOCK_K` (parsed as `(EVEN_MN & d) == BLOCK_K`): the flag's branch
            return _divisible_when(left, flags)
        return None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        if any(_divisible_when(v, flags) is True for v in test.values):
            return True
    if isinstance(test, ast.BinOp) and isinstance(test.op, ast.BitAnd):  # `EVEN_M & EVEN_N`
        if True in (_divisible_when(test.left, flags), _divisible_when(test.right, flags)):
            return True
    parts = None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        parts = test.values
    if isinstance(test, ast.BinOp) and isinstance(test.op, ast.BitOr):  # `M_MASK | N_MASK`
        parts = [test.left, test.right]
    if parts and all(_divisible_when(v, flags) is False for v in parts):
        return False
    return None


def _guarded(file: PythonFile, call: ast.AST, kernel, flow, flags) -> bool:
    """In the branch of an `if` where a divisibility test holds, or under a test of the tile's
    own position."""
    child = call
    for anc in file.ancestors(call):
        if anc is kernel.node:
            return False
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test:
            holds = _divisible_when(anc.test, flags)
            in_body = child in anc.body if isinstance(anc, ast.If) else child is anc.body
            if holds is not None and holds == in_body:
                return True
            if _position_test(file, anc.test, flow):
                return True
        child = anc
    return False
