import ast
from typing import ClassVar

from gpulint.diagnostics import Severity
from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule

MAX_NAMED = 3  # offsets named in one finding; the rest are counted


# A row kernel whose int32 row offset overflows past 2^31 elements: the failing example, and the
# same kernel in a test file for the `test-code` exemption.
_ROW_KERNEL = """
import triton
import triton.language as tl

@triton.jit
def k(out_ptr, in_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * stride_row + cols, x * 2, mask=cols < n_cols)
"""


class TritonInt32OffsetOverflow(Rule):
    """
    ## What it does
    Finds a `@triton.jit` kernel that offsets a pointer by the product of a program id and a
    run-time integer argument (`pid * stride_xm`, `row * n_cols`, `pid_m * stride_am`) and
    widens nothing to 64 bits anywhere: no `.to(tl.int64)` or `tl.cast(..., tl.int64)`, no
    `tl.int64` annotation. The product must be the row offset of a 2-D tile: followed
    through assignments, it reaches the pointer of a `tl.load`, `tl.store` or atomic that
    addresses a tile (an `arange` in its offsets), or a `tl.make_block_ptr` base, as that
    pointer's only term stepped by a run-time size (`x_ptr + row * stride + cols`,
    `x_ptr += pid * stride_x`). Products of a constexpr (`pid * BLOCK_SIZE`) or of a loop
    counter, and one element per program (`scale_ptr + row * stride_s`), are not such offsets.
    One finding per kernel, at its first such product, naming the others.

    ## Why is this bad?
    Triton types `tl.program_id` as int32, and an integer argument as int32 unless the value
    passed does not fit, so `pid * stride` is computed in 32 bits before it is added to the
    64-bit pointer. Past 2^31 elements (8 GiB of bf16: 16k rows of a 128k vocabulary, a
    long-context KV cache) the offset `row * stride` of the last rows exceeds 2^31 - 1 (with
    16385 rows of 131072, the last starts at 16384 × 131072 = 2^31): the product wraps
    negative and the last rows read or write memory outside the tensor, an illegal memory
    access or, worse, silently wrong values. It works on every test size and breaks at scale.

    ## Example
    ```python
    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        y = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * stride_row + cols, y / tl.sum(y, axis=0), mask=cols < n_cols)
    ```

    ## Use instead
    ```python
    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)  # the row offset of a large tensor needs 64 bits
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * stride_row + cols, mask=cols < n_cols, other=-float("inf"))
        y = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * stride_row + cols, y / tl.sum(y, axis=0), mask=cols < n_cols)
    ```

    ## References
    - [triton.language.program_id (returns int32)](https://triton-lang.org/main/python-api/generated/triton.language.program_id.html)
    - [Triton issue #1058: invalid memory access for very large tensors](https://github.com/triton-lang/triton/issues/1058)
    - [flash-linear-attention #1082: int32 overflow in pointer arithmetic, promoted to int64](https://github.com/fla-org/flash-linear-attention/pull/1082)
    - [microsoft/dion #102: int64 batched pointer offsets (`batch_idx * stride` wrapped)](https://github.com/microsoft/dion/pull/102)
    """

    code = "GPU705"
    tier = "preview"  # new, unjudged
    bench = "int32-offset"
    severity = Severity.WARNING
    name = "triton-int32-offset-overflow"
    triggers = ("program_id",)
    requires = ("triton",)
    message = (
        "{offsets} in `{kernel}` {is_are} computed in int32 (program ids and integer arguments "
        "are 32-bit): past 2^31 elements (8 GiB of bf16) the offset of the last rows wraps and "
        "the access lands outside the tensor; widen one operand, `{widen}`"
    )
    tags = ("triton", "correctness")

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "widened-elsewhere",
            "A kernel that widens some offsets to 64 bits (`.to(tl.int64)`, `tl.cast`, a "
            "`tl.int64` annotation): its author has weighed which offsets need it.",
            """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, y_ptr, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < N)
    tl.store(y_ptr + row * stride + cols, x, mask=cols < N)
""",
        ),
        Exemption(
            "several-terms",
            "A pointer that combines the product with other terms stepped by a run-time size "
            "(`off_z * stride_qz + off_h * stride_qh`, a head offset beside "
            "`offs_m[:, None] * stride_m`): the row term is not the program id's, and a "
            "token-major head stride is small.",
            """
import triton
import triton.language as tl

@triton.jit
def k(q_ptr, stride_qz, stride_qh, stride_qm, D: tl.constexpr, BLOCK_M: tl.constexpr):
    off_z = tl.program_id(1)
    off_h = tl.program_id(2)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(
        q_ptr + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    )
""",
        ),
        Exemption(
            "literal-argument",
            "A kernel whose every launch in the file passes the size as an integer literal: "
            "a compile-time size whose products the author can see.",
            """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(x_ptr + row * stride_row + cols, tl.load(x_ptr + row * stride_row + cols) * 2)

def run(x):
    k[(x.shape[0],)](x, 128, BLOCK=128)
""",
        ),
        Exemption(
            "test-code",
            "Test code, whose tensors are small.",
            _ROW_KERNEL,
            filename="tests/test_kernels.py",
        ),
    )

    VALID = [
        # Widened where the program id is read.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N)
""",
        # A constexpr stride: a compile-time size, and a 1-D tile of it.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
""",
        # The argument annotated as 64-bit.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, stride: tl.int64, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N)
""",
    ]
    INVALID = [_ROW_KERNEL]

    def finish(self, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        for kernel in tt.kernels(file):
            if self.exempt("widened-elsewhere", tt.widens_anywhere(file, kernel)):
                continue  # its author chose which offsets need 64 bits
            products = [
                p
                for p in tt.index_products(file, kernel)
                if not p.wide and not self.exempt("several-terms", not p.alone)
            ]
            if not products:
                continue
            fixed = _literal_sizes(file, kernel)
            products = [p for p in products if not self.exempt("literal-argument", p.size in fixed)]
            if not products:
                continue
            texts = list(dict.fromkeys(f"`{p.text}`" for p in products))
            named = ", ".join(texts[:MAX_NAMED])
            more = len(texts) - MAX_NAMED
            offsets = named + (f" (and {more} more)" if more > 0 else "")
            first = products[0]
            index = first.index
            widen = (
                f"{_text(index)}.to(tl.int64) * {first.size}"
                if first.node.left is index
                else f"{first.size} * {_text(index)}.to(tl.int64)"
            )
            yield self.report(
                file,
                first.node,
                offsets=offsets,
                kernel=kernel.name,
                is_are="is" if len(texts) == 1 else "are",
                widen=widen,
            )


def _text(node) -> str:
    text = ast.unparse(node)
    return text if isinstance(node, (ast.Name, ast.Call, ast.Attribute)) else f"({text})"


def _literal_sizes(file: PythonFile, kernel) -> set[str]:
    """Run-time arguments every launch (one at least) passes as an integer literal."""
    launches = tt.host_launches(file, kernel)
    if not launches:
        return set()
    out: set[str] | None = None
    for _, call in launches:
        here = set()
        for param, value in tt.launch_bindings(kernel, call).items():
            if isinstance(value, ast.Constant) and type(value.value) is int:
                here.add(param)
        out = here if out is None else out & here
    return out or set()
