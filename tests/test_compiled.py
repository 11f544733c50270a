"""What `torch.compile` compiles (frontends/python/compiled.py) and GPU510 across modules."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap

import pytest

from gpulint.cli import main
from gpulint.frontends.python import FRONTEND
from gpulint.frontends.python.compiled import (
    compiled_code,
    graph_break_sites,
    graph_breaks,
    label,
)
from gpulint.settings import Settings


def parse(src: str):
    return FRONTEND.parse("m.py", textwrap.dedent(src).encode(), Settings())


MODEL = """
import torch
import torch.nn as nn


class MLP(nn.Module):
    def forward(self, x):
        return self.act(x)

    def act(self, x):
        return x.relu()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP()

    def forward(self, x):
        return x + self.mlp(x)


class GPT(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(h=nn.ModuleList([Block() for _ in range(n)])))
        self.head = nn.Sequential(nn.LayerNorm(8), Unused())

    def forward(self, x):
        for block in self.transformer.h:
            x = block(x)
        return x

    def generate(self, x):
        return self(x)


class Unused(nn.Module):
    def forward(self, x):
        return x


model = GPT(4).cuda()
model = torch.compile(model)
"""


def test_a_compiled_model_reaches_its_submodules_and_their_methods():
    file = parse(MODEL)
    code = compiled_code(file)
    reached = {label(file, r.function) for r in code.reached.values()}
    assert reached == {"GPT.forward", "Block.forward", "MLP.forward", "MLP.act"}
    (entry,) = code.entries
    assert entry.line == 44 and not entry.fullgraph
    act = next(r for r in code.reached.values() if r.function.name == "act")
    assert act.via == ("Block.forward", "MLP.forward", "MLP.act")


def test_a_module_that_is_not_compiled_reaches_nothing():
    file = parse(MODEL.replace("model = torch.compile(model)\n", ""))
    assert compiled_code(file).reached == {}


def test_breaks_name_the_registry_kind():
    file = parse(
        """
        import torch

        @torch.compile
        def f(x, lengths):
            if torch.isnan(x).any():
                x = torch.nan_to_num(x)
            n = int(x.sum())
            idx = x.nonzero()
            print("n", n)
            return x[x > 0], lengths.tolist(), idx
        """
    )
    kinds = [(b.node.lineno, b.gb_id) for b in graph_breaks(file)]
    assert kinds == [(6, "GB0170"), (8, "GB0124"), (9, "GB0036"), (10, "GB0059"),
                     (11, "GB0036"), (11, "GB0033")]  # fmt: skip


def test_sites_dynamo_handles_are_flagged_with_the_reason_and_left_out_of_breaks():
    file = parse(
        """
        import torch
        torch._dynamo.config.capture_scalar_outputs = True

        @torch.compiler.disable
        def log(x):
            print(x)

        @torch.compile
        def f(x):
            log(x)
            n = x.sum().item()
            if not torch.compiler.is_compiling():
                print(n)
            print(x.shape)
            return x * n
        """
    )
    flags = {
        b.node.lineno: (b.gb_id, b.untraced, b.disabled, b.captured)
        for b in graph_break_sites(file)
    }
    assert flags == {
        7: ("GB0059", False, True, False),
        12: ("GB0124", False, False, True),
        14: ("GB0059", True, False, False),
        15: ("GB0059", False, False, False),
    }
    assert [b.node.lineno for b in graph_breaks(file)] == [15]


def test_is_compiling_guards_and_early_returns_hide_code_from_dynamo():
    file = parse(
        """
        import torch

        @torch.compile
        def f(x):
            if torch.compiler.is_compiling():
                y = x * 2
            else:
                print(x)
            return g(x)

        def g(x):
            if torch.compiler.is_compiling():
                return x
            print(x.sum().item())
            return x
        """
    )
    assert graph_breaks(file) == []


TRAIN = """
import torch
from pkg.model import GPT

model = GPT(4).cuda()
model = torch.compile(model)
fast = torch.compile(GPT(2), fullgraph=True)
"""
BROKEN = MODEL.replace("return x.relu()", "print(x.shape)\n        return x.relu()").replace(
    "model = GPT(4).cuda()\nmodel = torch.compile(model)\n", ""
)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "model.py").write_text(textwrap.dedent(BROKEN))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    return tmp_path


def check(*args: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--format", "json", "--select", "GPU510", "--jobs", "1", *args, "."])
    return json.loads(out.getvalue())["findings"]


def test_a_model_from_another_module_is_reported_at_its_compile(tree):
    # The model's own file does not compile it, so nothing is reported there; the compile in
    # train.py names the break in pkg/model.py. The fullgraph=True compile is left alone.
    (finding,) = check("--no-cache")
    assert finding["path"] == "train.py" and finding["line"] == 6
    assert "`torch.compile` of `GPT` (pkg/model.py)" in finding["message"]
    assert "`print()` at pkg/model.py:11 in `MLP.act` (GB0059" in finding["message"]


# taming-transformers' VQGAN discriminator: its layers are a list built under a flag that picks
# the norm class, `ActNorm` from a third module, whose forward breaks on `.item()`.
NORM = """
import torch
import torch.nn as nn

class ActNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    def forward(self, x):
        if self.training and self.initialized.item() == 0:
            self.initialized.fill_(1)
        return x
"""
DISC = """
import torch.nn as nn
from pkg.norm import ActNorm

class Disc(nn.Module):
    def __init__(self, n_layers=3, use_actnorm=False):
        super().__init__()
        if not use_actnorm:
            norm_layer = nn.BatchNorm2d
        else:
            norm_layer = ActNorm
        sequence = [nn.Conv2d(3, 16, 4), nn.LeakyReLU(0.2)]
        for n in range(1, n_layers):
            sequence += [nn.Conv2d(16, 16, 4), norm_layer(16), nn.LeakyReLU(0.2)]
        self.main = nn.Sequential(*sequence)

    def forward(self, x):
        return self.main(x)
"""


def test_a_break_two_modules_away_through_a_flag_chosen_layer_class(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "norm.py").write_text(NORM)
    (tmp_path / "pkg" / "disc.py").write_text(DISC)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom pkg.disc import Disc\n\ndisc = torch.compile(Disc(use_actnorm=True))\n"
    )
    (finding,) = check("--no-cache")
    assert finding["path"] == "train.py" and finding["line"] == 4
    assert "`torch.compile` of `Disc` (pkg/disc.py)" in finding["message"]
    assert "`.item()` at pkg/norm.py:11 in `ActNorm.forward` (GB0124" in finding["message"]
    # An edit to the third module reaches the finding through the cache.
    (tmp_path / "pkg" / "norm.py").write_text(NORM.replace("self.initialized.item() == 0", "False"))
    assert check() == []


def test_a_layer_class_alias_that_holds_only_torch_classes_is_silent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "norm.py").write_text(NORM)
    (tmp_path / "pkg" / "disc.py").write_text(
        DISC.replace("norm_layer = ActNorm", "norm_layer = nn.InstanceNorm2d")
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom pkg.disc import Disc\n\ndisc = torch.compile(Disc(use_actnorm=True))\n"
    )
    assert check("--no-cache") == []


def test_an_edit_to_the_model_invalidates_the_cached_finding(tree):
    assert len(check()) == 1
    model = tree / "pkg" / "model.py"
    model.write_text(model.read_text().replace("print(x.shape)", "pass"))
    assert check() == []


def test_a_compiled_name_is_the_def_it_holds_at_the_compile():
    # A script that defines `f` twice (FlagGems' examples/use_cpp_runtime.py): the first, which
    # prints, is overwritten before `torch.compile(f)`.
    file = parse(
        """
        import torch

        def f(x):
            print(x)

        def f(x, y):
            return x + y

        F = torch.compile(f)
        """
    )
    (entry,) = compiled_code(file).entries
    assert entry.function.lineno == 7
    assert graph_breaks(file) == []


def test_a_model_built_by_a_factory_of_the_file_is_followed_to_its_classes():
    # The shape of airbench's make_net(): layers subclassing torch.nn ones, a Sequential built,
    # moved and returned by a helper, then compiled at module level.
    file = parse(
        """
        import torch
        import torch.nn as nn

        class Conv(nn.Conv2d):
            def forward(self, x):
                print("conv", x.shape)
                return super().forward(x)

        def make_net():
            net = nn.Sequential(Conv(3, 8, 3), nn.GELU())
            net = net.half().cuda()
            net = net.to(memory_format=torch.channels_last)
            return net

        model = make_net()
        model = torch.compile(model, mode="max-autotune")
        """
    )
    (found,) = graph_breaks(file)
    assert found.gb_id == "GB0059" and label(file, found.reached.function) == "Conv.forward"
