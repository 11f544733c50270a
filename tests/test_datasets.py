"""What the Python front-end says a DataLoader's samples cost: in memory or not, on the device,
and which loops iterate a loader."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gpulint.frontends.python.datasets import (
    items_in_memory,
    items_on_device,
    per_item_evaluation,
)
from gpulint.frontends.python.file import PythonFile

HEAD = "import numpy as np\nimport torch\nfrom torch.utils.data import DataLoader, Dataset\n"


def _loader(src: str):
    text = HEAD + textwrap.dedent(src)
    file = PythonFile("x.py", text, ast.parse(text))
    calls = [
        n
        for n in ast.walk(file.tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "DataLoader"
    ]
    assert len(calls) == 1
    return file, calls[0]


def _dataset(getitem: str, init: str = "self.x = np.load(path)") -> str:
    return f"""
class D(Dataset):
    def __init__(self, path, transform=None):
        {init}
        self.transform = transform

    def __getitem__(self, i):
        {getitem}

loader = DataLoader(D("f.npy"), batch_size=64)
"""


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        (_dataset("return torch.from_numpy(self.x[i]).float()"), True),
        (_dataset("return self.x[i]", "self.x = torch.load(path)"), True),
        (_dataset("return self.x[i]", "self.x = torch.randn(100, 8)"), True),
        (_dataset("return self.x[i]", "self.x = np.load(path, mmap_mode='r')"), False),
        (_dataset("return self.transform(self.x[i])"), False),
        (_dataset("return np.load(self.x[i])"), False),
        ("loader = DataLoader(list(range(10)), batch_size=2)\n", True),
        ("loader = DataLoader(TensorDataset(x, y), batch_size=2)\n", True),
        ("def f(ds):\n    loader = DataLoader(ds, batch_size=2)\n", False),
        (
            "class T(Dataset):\n    def __init__(self, tokens):\n        self.tokens = tokens\n"
            "    def __getitem__(self, i):\n        return self.tokens[i]\n"
            "def f(tokens):\n    loader = DataLoader(T(tokens))\n",
            False,  # the caller's data: the module cannot tell what it is
        ),
        (
            "class P(Dataset):\n    def __init__(self, prompt):\n        self.prompt = prompt\n"
            "    def __getitem__(self, i):\n        return {'prompt': self.prompt, 'index': i}\n"
            "def f(prompt):\n    loader = DataLoader(P(prompt))\n",
            True,  # only handed on, never read into
        ),
    ],
)
def test_items_in_memory(src, expected):
    file, call = _loader(src.replace("TensorDataset(", "torch.utils.data.TensorDataset("))
    assert items_in_memory(file, call) is expected


def test_collate_that_moves_to_the_device():
    file, call = _loader(
        "def collate(b):\n    return torch.stack(b).cuda()\n"
        "loader = DataLoader(list(range(10)), collate_fn=collate)\n"
    )
    assert items_on_device(file, call)


@pytest.mark.parametrize(
    ("body", "size", "expected"),
    [
        ("scores.append(model(x.cuda()).item())", 1, True),
        ("scores.append(model(x.cuda()).item())", 8, False),
        ("scores.append(model(x.cuda()))", 1, False),  # nothing read back per sample
        ("loss = model(x.cuda())\n    loss.backward()\n    opt.step()\n    loss.item()", 1, False),
    ],
)
def test_per_item_evaluation(body, size, expected):
    file, call = _loader(
        f"loader = DataLoader(ds, batch_size={size})\nscores = []\nfor x in loader:\n    {body}\n"
    )
    assert per_item_evaluation(file, call) is expected
