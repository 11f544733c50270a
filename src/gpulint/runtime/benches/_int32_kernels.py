"""The Triton kernels of the int32-offset bench; imported only where triton is installed.

Both add 1 in place to a row-major 2-D int8 tensor, one program per (row, block of columns).
`add_one_int32` computes the row offset `row * stride_row` in 32 bits (`tl.program_id` is int32
and so is a stride that fits in int32): GPU705's pattern, on purpose. `add_one_int64` widens
the program id first, the rule's fix.
"""

import triton
import triton.language as tl


@triton.jit
def add_one_int32(x_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask)  # noqa: GPU705 - on purpose
    tl.store(x_ptr + row * stride_row + cols, x + 1, mask=mask)


@triton.jit
def add_one_int64(x_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask)
    tl.store(x_ptr + row * stride_row + cols, x + 1, mask=mask)


KERNELS = {"int32": add_one_int32, "int64": add_one_int64}


def launch(x, variant: str, block: int = 1024) -> None:
    """One in-place add over the 2-D tensor ``x`` with the kernel of ``variant``."""
    rows, cols = x.shape
    grid = (rows, triton.cdiv(cols, block))
    KERNELS[variant][grid](x, x.stride(0), cols, BLOCK=block)
