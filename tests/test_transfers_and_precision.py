"""The shared helpers behind GPU102-104 and GPU203/205: what counts as a host-to-device transfer,
which dtype an autocast runs in, and where a stated reason is read."""

from __future__ import annotations

import ast

import pytest

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.precision import autocast_dtype, comment_near
from gpulint.frontends.python.transfers import device_transfer, non_blocking


def _call(src: str, imports: str = "import torch\n"):
    text = imports + src + "\n"
    file = PythonFile("x.py", text, ast.parse(text))
    stmt = file.tree.body[-1]
    return file, stmt.value


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("x.cuda()", True),
        ("x.to(device)", True),
        ("x.to(self.device)", True),
        ("x.to(args.local_rank)", True),
        ("x.to('cuda:0')", True),
        ("x.to(f'cuda:{rank}')", True),
        ("x.to(torch.device('cuda'))", True),
        ("x.to(y.device)", True),
        ("x.to(device=dev, non_blocking=True)", True),
        ("x.to(torch.float16)", False),
        ("x.to('cpu')", False),
        ("x.to(cpu_device)", False),
        ("x.to(other)", False),
        ("x.float()", False),
    ],
)
def test_device_transfer(src, expected):
    file, call = _call(src)
    assert device_transfer(file, call) is expected


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("x.cuda()", "false"),
        ("x.cuda(non_blocking=True)", "true"),
        ("x.to(device, non_blocking=False)", "false"),
        ("x.to(device, non_blocking=flag)", "unknown"),
        ("x.to(device, **kw)", "unknown"),
    ],
)
def test_non_blocking(src, expected):
    _, call = _call(src)
    assert non_blocking(call) == expected


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("torch.autocast('cuda')", "fp16"),
        ("torch.amp.autocast(device_type='cuda')", "fp16"),
        ("torch.autocast('cuda', dtype=torch.bfloat16)", "bf16"),
        ("torch.autocast('cuda', torch.float16)", "fp16"),
        ("torch.autocast('cpu')", "bf16"),
        ("torch.autocast(device_type=device_type)", "unknown"),
        ("torch.autocast('cuda', dtype=ptdtype)", "unknown"),
        ("torch.cuda.amp.autocast()", "fp16"),
        ("torch.cuda.amp.autocast(enabled=args.amp)", "fp16"),
        ("torch.cuda.amp.autocast(enabled=False)", None),
        ("torch.cuda.amp.autocast(dtype=torch.bfloat16)", "bf16"),
        ("torch.autocast('cuda', **cfg)", "unknown"),
    ],
)
def test_autocast_dtype(src, expected):
    file, call = _call(src)
    assert autocast_dtype(file, call) == expected


def test_comment_near_reads_the_line_and_the_one_above():
    text = "import torch\n# exact numerics\nx = 1\ny = 2  # because\nz = 3\n\nw = 4\n"
    file = PythonFile("x.py", text, ast.parse(text))
    x, y, z, w = file.tree.body[1:]
    assert "exact" in comment_near(file, x)
    assert "because" in comment_near(file, y)
    assert "because" in comment_near(file, z)  # a trailing reason covers the next setting too
    assert comment_near(file, w) == ""
