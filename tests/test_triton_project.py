"""GPU701 with kernels launched from another module of the checked tree: the launcher's host
code (its `cdiv` grid, its divisibility asserts, its exact grid) is read where the kernel is
imported (`from .kernels import add_kernel`, `from . import kernels`)."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap

import pytest

from gpulint.cli import main

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets)
    tl.store(output_ptr + offsets, x + y)


@triton.jit
def scale_cols_kernel(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols)
    tl.store(out_ptr + row * n_cols + cols, x * scale)
"""

# The launchers: ceiling-divided grids, so the last block of each kernel overruns.
OPS_CDIV = """
import torch
import triton

from . import kernels
from .kernels import add_kernel


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    return out


def scale_cols(x, scale, BLOCK=256):
    out = torch.empty_like(x)
    rows, cols = x.shape
    kernels.scale_cols_kernel[(rows, triton.cdiv(cols, BLOCK))](x, out, cols, scale, BLOCK)
    return out
"""

# The same launchers making sure of divisibility: an exact grid under an assert, a raise.
OPS_DIVISIBLE = """
import torch
import triton

from . import kernels
from .kernels import add_kernel


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    assert n % 1024 == 0, "pad to a multiple of the block"
    add_kernel[(n // 1024,)](x, y, out, n, BLOCK_SIZE=1024)
    return out


def scale_cols(x, scale, BLOCK=256):
    out = torch.empty_like(x)
    rows, cols = x.shape
    if cols % BLOCK:
        raise ValueError("cols must be a multiple of BLOCK")
    kernels.scale_cols_kernel[(rows, triton.cdiv(cols, BLOCK))](x, out, cols, scale, BLOCK)
    return out
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernels.py").write_text(textwrap.dedent(KERNELS))
    return tmp_path


def check(*args: str, paths: tuple[str, ...] = (".",)) -> list[tuple[str, int]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--format", "json", "--select", "GPU701", "--jobs", "1", *args, *paths])
    return sorted((f["path"], f["line"]) for f in json.loads(out.getvalue())["findings"])


ADD = [("pkg/kernels.py", 10), ("pkg/kernels.py", 11), ("pkg/kernels.py", 12)]
SCALE = [("pkg/kernels.py", 19), ("pkg/kernels.py", 20)]


def test_a_kernel_launched_from_another_module_takes_its_grids_tiles(tree):
    # `scale_cols_kernel` reads `n_cols` (as a row stride): alone, nothing says BLOCK tiles
    # anything, and it was silent; its launcher divides the columns with `cdiv`.
    assert check("--no-cache") == ADD  # the textbook default: n_elements is never read
    (tree / "pkg" / "ops.py").write_text(textwrap.dedent(OPS_CDIV))
    assert check("--no-cache") == ADD + SCALE
    # Checked alone (an editor, pre-commit), the kernels module still sees its launcher.
    assert check("--no-cache", paths=("pkg/kernels.py",)) == ADD + SCALE


def test_a_launcher_in_another_module_that_makes_sure_of_divisibility_silences(tree):
    (tree / "pkg" / "ops.py").write_text(textwrap.dedent(OPS_DIVISIBLE))
    assert check("--no-cache") == []


def test_an_edited_launcher_invalidates_the_kernels_cached_result(tree):
    (tree / "pkg" / "ops.py").write_text(textwrap.dedent(OPS_DIVISIBLE))
    assert check() == []
    (tree / "pkg" / "ops.py").write_text(textwrap.dedent(OPS_CDIV))
    assert check() == ADD + SCALE


def test_a_launch_of_another_kernel_of_the_same_name_is_not_this_ones(tree):
    # `add_kernel` here is the module's own, not pkg.kernels' (which stays on its default).
    other = OPS_DIVISIBLE.replace("from .kernels import add_kernel", "from .mine import add_kernel")
    (tree / "pkg" / "ops.py").write_text(textwrap.dedent(other))
    (tree / "pkg" / "mine.py").write_text(textwrap.dedent(KERNELS))
    found = [f for f in check("--no-cache") if f[0] == "pkg/kernels.py"]
    assert found == ADD


# A package that re-exports its kernels (`pkg/__init__.py`: `from .kernels import add_kernel`),
# launched as `pkg.add_kernel[grid](...)` and `from pkg import ...` in a module outside it.
REEXPORTED = """
import torch
import triton

import pkg
from pkg import scale_cols_kernel


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    pkg.add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    return out


def scale_cols(x, scale, BLOCK=256):
    out = torch.empty_like(x)
    rows, cols = x.shape
    scale_cols_kernel[(rows, triton.cdiv(cols, BLOCK))](x, out, cols, scale, BLOCK)
    return out
"""


def test_a_kernel_re_exported_by_its_package_takes_its_launchers_grids(tree):
    (tree / "pkg" / "__init__.py").write_text(
        "from .kernels import add_kernel, scale_cols_kernel\n"
    )
    (tree / "ops.py").write_text(textwrap.dedent(REEXPORTED))
    assert check("--no-cache") == ADD + SCALE
    assert check("--no-cache", paths=("pkg/kernels.py",)) == ADD + SCALE


def test_a_package_that_does_not_re_export_the_kernel_is_not_its_launcher(tree):
    # `pkg.scale_cols_kernel` names nothing of pkg.kernels when the package does not import it.
    (tree / "pkg" / "__init__.py").write_text("from .kernels import add_kernel\n")
    (tree / "pkg" / "other.py").write_text(textwrap.dedent(KERNELS))
    (tree / "ops.py").write_text(
        textwrap.dedent(REEXPORTED).replace(
            "from pkg import scale_cols_kernel", "from pkg.other import scale_cols_kernel"
        )
    )
    found = [f for f in check("--no-cache") if f[0] == "pkg/kernels.py"]
    assert found == ADD
