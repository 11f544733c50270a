import ast
from typing import ClassVar

from gpulint.diagnostics import Severity
from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule


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
    `BLOCK // GROUP_SIZE` scales of a group quantizer). A kernel with no launch in its file
    (its launcher lives elsewhere) that is passed a size it never reads (the textbook
    `add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE)` with its masks left out; not a
    pointer or a stride, by their names) has its constexpr blocks taken as tiles of it. Block
    pointers are checked the same way: a `tl.make_block_ptr` whose offsets are tiled by a
    program id, or that `tl.advance` moves by its block in such a loop, needs `boundary_check`
    on that dimension unless the dimension's shape is a compile-time constant.

    An access is bounded when its `mask=` bounds the tiled offsets (a mask on the rows alone
    does not cover columns tiled by the K loop: that is reported); the offsets are wrapped with
    `% size` or clamped (`tl.minimum`, `tl.where`); an alignment hint (`tl.multiple_of`,
    `tl.max_contiguous`) wraps the tiled value itself (a hint covers only the value it wraps,
    not the kernel); or a loop's bound is rounded down to a multiple (`n // X * X`) or comes
    from a helper it cannot read. Launches in other modules of the checked tree count as the
    file's own: a kernels module launched from `ops.py` (`from .kernels import add_kernel;
    add_kernel[grid](...)`, or `from . import kernels; kernels.add_kernel[grid](...)`) takes
    its tiles from that launcher's `cdiv` grid, and its divisibility checks and exact grids
    count as the file's. A definition under `if MODE == "a":` on a constexpr does not reach a
    use under `if MODE == "b":`.

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

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "whole-row",
            "`row * D + tl.arange(0, D)` where nothing treats `D` as a tile of a larger extent "
            "(no autotune, `cdiv`, loop step or mask of it): a whole row, in bounds.",
            """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, D: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * D + tl.arange(0, D))
""",
        ),
        Exemption(
            "launcher-asserts-divisibility",
            "A launcher (in the file, or in the module that launches the kernel) that asserts "
            "divisibility: `assert n % BLOCK == 0`, or `if n % BLOCK: raise ...`.",
            """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))

def add(x, y, out, BLOCK_SIZE=1024):
    assert x.numel() % BLOCK_SIZE == 0
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
""",
        ),
        Exemption(
            "exact-grid",
            "A kernel launched (in the file, or from the module that launches it) on an exact "
            "grid, `kernel[(n // BLOCK,)]` with no `cdiv`: the launcher relies on divisibility.",
            """
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 4096})], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)

def double(x):
    k[lambda meta: (x.numel() // meta["BLOCK"],)](x, x.numel())
""",
        ),
        Exemption(
            "kernel-asserts-divisibility",
            "A kernel that states divisibility itself: `tl.static_assert`, `tl.assume` or "
            "`tl.device_assert` of a `%` test.",
            """
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 4096})], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    tl.assume(n % BLOCK == 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)
""",
        ),
        Exemption(
            "documented-divisibility",
            "A kernel with no launch in its file whose docstring or comments say a size is "
            "divisible by (a multiple of) the block: its blocks are not taken as tiles of the "
            "size it never reads.",
            """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    \"\"\"The caller pads: n_elements is a multiple of BLOCK_SIZE.\"\"\"
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))
""",
        ),
        Exemption(
            "alignment-hint",
            "A kernel with no launch in its file that hints alignment (`tl.multiple_of`, "
            "`tl.max_contiguous`, `tl.assume`): its author states what its offsets are multiples "
            "of, so its blocks are not taken as tiles of the size it never reads.",
            """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    start = tl.multiple_of(pid * BLOCK_SIZE, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + start))
""",
        ),
        Exemption(
            "padded-buffer",
            "Pointers into a buffer strided by a size named as rounded or padded "
            "(`seqlen_q_rounded`), or bound by the launcher to a buffer it allocated rounded up "
            "to a multiple of the tile (also through a `@triton.jit` helper whose callers all "
            "pass one): allocated up to the block.",
            """
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK_M": 64}), triton.Config({"BLOCK_M": 128})], key=[])
@triton.jit
def k(Delta, off_hb, seqlen_q_rounded, BLOCK_M: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(Delta + off_hb * seqlen_q_rounded + offs_m, tl.zeros([BLOCK_M], dtype=tl.float32))
""",
        ),
        Exemption(
            "mask-not-from-offsets",
            "An access whose `mask=` is not built from its offsets (a loaded flag, a "
            "parameter): trusted, as the author chose what it bounds.",
            """
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 4096})], key=["n"])
@triton.jit
def k(x_ptr, keep_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = tl.load(keep_ptr) != 0
    x = tl.load(x_ptr + offs, mask=keep, other=0.0)
""",
        ),
        Exemption(
            "launch-keeps-tiles-whole",
            "A tile every launch keeps whole: a constant block (or every autotune value) "
            "dividing a multiple the launcher makes sure of (`assert n % 128 == 0`, "
            "`torch._check(n % C == 0)`), or a block computed as a divisor of the size it "
            "passes (`math.gcd(n, 256)`).",
            fixture="triton/gpu701_silent_launch_dataflow.py",
        ),
        Exemption(
            "divisibility-branch",
            "An access in the branch of an `if` where a divisibility test holds: an "
            "`EVEN_K`/`*_DIVISIBLE` flag, a flag a heuristic or launch keyword sets by testing "
            "`%` (`NEED_MASK = n % BLOCK != 0` guards its `else`), or `n % BLOCK == 0` itself.",
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
        ),
        Exemption(
            "position-guard",
            "An access under a test of the tile's own position (`if pid * BLOCK + BLOCK <= n:`), "
            "or after an early `return` for tiles past the end: in bounds where it runs.",
            """
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 1024}), triton.Config({"BLOCK": 4096})], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid * BLOCK + BLOCK <= n:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)
""",
        ),
        Exemption(
            "test-code",
            "Test code, whose sizes the test picks.",
            """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))
""",
            filename="tests/test_add.py",
        ),
    )

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
        if self.exempt("test-code", file.is_test):
            return
        kernels = tt.kernels(file)
        if not kernels:
            return
        if self.exempt(
            "launcher-asserts-divisibility", _launcher_asserts_divisibility(file, kernels)
        ):
            return
        exact = _exact_grid_kernels(file)
        for kernel in kernels:
            if self.exempt("exact-grid", kernel.name in exact):
                continue
            if self.exempt(
                "kernel-asserts-divisibility", _kernel_declares_divisibility(file, kernel)
            ):
                continue
            # launched from another module that relies on or asserts divisibility
            remote = {id(host): host for host, _ in tt.remote_launches(file, kernel)}
            if self.exempt(
                "exact-grid", any(kernel.name in _exact_grid_kernels(h) for h in remote.values())
            ):
                continue
            if self.exempt(
                "launcher-asserts-divisibility",
                any(_launcher_asserts_divisibility(h, [kernel], file) for h in remote.values()),
            ):
                continue
            flow = tt.flow(file, kernel)
            known = tt.tile_sizes(file, kernel)
            constexprs = frozenset(kernel.constexprs)
            if (
                not tt.host_launches(file, kernel)
                and tt.unread_sizes(kernel)
                and not self.exempt(
                    "documented-divisibility", tt.documents_divisibility(file, kernel)
                )
                and not self.exempt("alignment-hint", tt.hints_alignment(file, kernel))
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
                    # (a size no code treats as a tile of a larger extent: a whole row)
                    tiles = sorted(
                        (
                            (x, o)
                            for x, o in value.tiles
                            if o == tt.LOOP
                            or not self.exempt("whole-row", not tt.is_tile(x, known, constexprs))
                        ),
                        key=lambda t: (t[0] not in known, t),  # a size as written first
                    )
                    if not tiles:
                        continue
                    if self.exempt("padded-buffer", value.bits & tt.PADDED):
                        continue
                    mask = tt.access_mask(call, op)
                    if mask is not None:
                        bounded = flow.of(mask).bounded_sizes
                        if self.exempt("mask-not-from-offsets", not bounded):
                            continue  # a mask not built from offsets: trusted
                        tiles = [t for t in tiles if t[0] not in bounded]
                        if not tiles:
                            continue  # bounded
                        partial = True
                # (every launch keeps these tiles whole)
                tiles = [
                    t for t in tiles if not self.exempt("launch-keeps-tiles-whole", t[0] in divided)
                ]
                if unchecked is not None:
                    unchecked = [u for u in unchecked if u[1] not in divided]
                if not tiles:
                    continue
                guard = _guarded(file, call, kernel, flow, flags)
                if self.exempt("divisibility-branch", guard == "divisible"):
                    continue
                if self.exempt(
                    "position-guard",
                    guard == "position" or any(line < call.lineno for line in returns_before),
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


def _guarded(file: PythonFile, call: ast.AST, kernel, flow, flags) -> str | None:
    """ "divisible": in the branch of an `if` where a divisibility test holds; "position":
    under a test of the tile's own position; None: neither (the innermost `if` decides)."""
    child = call
    for anc in file.ancestors(call):
        if anc is kernel.node:
            return None
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test:
            holds = _divisible_when(anc.test, flags)
            in_body = child in anc.body if isinstance(anc, ast.If) else child is anc.body
            if holds is not None and holds == in_body:
                return "divisible"
            if _position_test(file, anc.test, flow):
                return "position"
        child = anc
    return None
