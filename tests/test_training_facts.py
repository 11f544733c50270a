"""What the Python front-end says about training: does the module train, does a wrapped model
only run forward, does an optimizer update inputs rather than weights."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.training import forward_only, module_trains, optimizes_inputs

HEAD = "import torch\nimport torch.nn as nn\n"


def _file(src: str) -> PythonFile:
    text = HEAD + textwrap.dedent(src)
    return PythonFile("x.py", text, ast.parse(text))


def _wrapper(file: PythonFile) -> ast.Call:
    return next(
        n
        for n in ast.walk(file.tree)
        if isinstance(n, ast.Call) and (file.qualname(n) or "").endswith("DataParallel")
    )


def test_module_trains_through_a_helper():
    file = _file(
        "def step(loss, opt):\n    loss.backward()\n    opt.step()\n"
        "for x in xs:\n    step(model(x), optimizer)\n"
    )
    assert module_trains(file)
    assert not module_trains(_file("for x in xs:\n    model(x)\n"))


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("net = nn.DataParallel(Net().eval())\n", True),
        ("net = Wrap(base.eval()).cuda()\nnet = nn.DataParallel(net)\n", True),
        ("net = nn.DataParallel(Net().eval())\nnet.train()\n", False),
        ("net = nn.DataParallel(Net())\nfor x in xs:\n    net(x)\n", True),
        ("net = nn.DataParallel(Net())\nfit(net)\n", False),  # handed on: maybe trained
        (
            "net = nn.DataParallel(Net())\nfor x in xs:\n    net(x).sum().backward()\n"
            "    opt.step()\n",
            False,
        ),
        ("def build():\n    return nn.DataParallel(Net())\n", False),
    ],
)
def test_forward_only(src, expected):
    file = _file(src)
    assert forward_only(file, _wrapper(file)) is expected


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("w = torch.zeros(512, requires_grad=True)\nopt = torch.optim.Adam([w], lr=0.1)\n", True),
        (
            "noise = {n: b for (n, b) in G.named_buffers()}\n"
            "w = avg.detach().clone().requires_grad_(True)\n"
            "opt = torch.optim.Adam([w] + list(noise.values()), lr=0.1)\n",
            True,  # a latent and a generator's noise buffers: inputs, not weights
        ),
        (
            "w = torch.zeros(8, requires_grad=True)\n"
            "opt = torch.optim.Adam([w] + list(model.parameters()), lr=0.1)\n",
            False,
        ),
        ("opt = torch.optim.Adam(model.parameters(), lr=0.1)\n", False),
        ("p = list(model.parameters())\nopt = torch.optim.SGD([p], lr=0.1)\n", False),
        ("x = 1\n", False),
        (
            "trunk = []\nfor n, p in model.named_parameters():\n    trunk.append(p)\n"
            "opt = torch.optim.SGD([{'params': trunk}], lr=0.1)\n",
            False,  # filled from the parameters after it was bound
        ),
    ],
)
def test_optimizes_inputs(src, expected):
    assert optimizes_inputs(_file(src)) is expected


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("from . import _C\ndef f(x):\n    return _C.rasterize(x)\n", True),
        ("from simple_knn._C import distCUDA2\nd = distCUDA2(points)\n", True),
        ("_C = utils.get_extension()\ny = _C.__dict__['render_cuda'](x)\n", True),
        (
            "from torch.utils.cpp_extension import load\n"
            "backend = load(name='march', sources=['march.cu'])\nbackend.march_rays(x)\n",
            True,
        ),
        ("from . import _C\n", False),  # bound, never called
        ("import torch._C\ntorch._C._log_api_usage_once('x')\n", False),  # PyTorch's own
        ("from torch import _C\n_C._get_tracing_state()\n", False),
    ],
)
def test_runs_compiled_ops(src, expected):
    from gpulint.frontends.python.extensions import runs_compiled_ops

    assert runs_compiled_ops(_file(src)) is expected
