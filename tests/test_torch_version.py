"""The torch releases a project declares (gpulint.torchversion), and the rules that read them:
advice a pinned release cannot take is not given (GPU201, GPU303, GPU403, GPU502)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulint.config import Config, ConfigError, apply_table
from gpulint.engine import Linter
from gpulint.testing import example_config
from gpulint.torchversion import declared_range, range_of


@pytest.mark.parametrize(
    ("spec", "at_least_2_4", "all_2_0"),
    [
        ("==2.0.0", False, True),
        ("==2.3.0+cu121", False, True),
        (">=1.7,<2.4", False, False),
        ("<=2.4", True, False),
        (">=2.4", True, True),
        ("~=2.3.0", False, True),  # 2.3.x
        ("~=2.3", True, True),  # 2.x from 2.3
        ("=1.11.0", False, False),  # conda: the 1.11.0 series
        ("==2.4.*", True, True),
    ],
)
def test_ranges_from_specifiers(spec, at_least_2_4, all_2_0):
    r = range_of(spec, spec)
    assert r is not None
    assert r.admits_at_least((2, 4)) is at_least_2_4
    assert r.all_at_least((2, 0)) is all_2_0


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "text", "high"),
    [
        (
            "requirements.txt",
            "numpy\ntorch==2.0.0  # pinned for triton\ntorchvision==0.15\n",
            "2.0.0",
        ),
        ("environment.yaml", "dependencies:\n  - python=3.8\n  - pytorch=1.11.0\n", "1.11.0"),
        (
            "pyproject.toml",
            '[project]\nname = "x"\ndependencies = ["torch==2.3.0", "numpy"]\n',
            "2.3.0",
        ),
        ("setup.py", 'setup(install_requires=["torch>=1.4,<1.5", "tqdm"])\n', "1.5"),
    ],
)
def test_declared_range_reads_each_kind_of_dependency_file(tmp_path, name, text, high):
    _write(tmp_path, name, text)
    r = declared_range(str(tmp_path))
    assert r is not None and ".".join(map(str, r.high or ())).startswith(high)
    assert name in r.why


def test_nothing_declared_is_nothing_known(tmp_path):
    _write(tmp_path, "requirements.txt", "torch\ntorchvision>=0.15\npytorch-lightning==1.9\n")
    _write(tmp_path, "setup.py", "# torch==1.0 broke us once\nsetup(name='x')\n")
    assert declared_range(str(tmp_path)) is None


AMP = """import torch
scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast():
    loss = model(x)
"""
ATTENTION = """import torch
import torch.nn as nn

class Attention(nn.Module):
    def forward(self, q, k, v):
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        return attn @ v
"""
LOADER = """import torch
from torch.utils.data import DataLoader
loader = DataLoader(ImageFolder(root), batch_size=64, num_workers=8, pin_memory=True)
model = Net().cuda()
for epoch in range(100):
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).sum()
        loss.backward()
        opt.step()
"""


def _lint(root: Path, text: str, filename: str = "train.py"):
    linter = Linter(example_config(root=root))
    findings, _ = linter.lint_bytes(filename, text.encode())
    return findings


def _codes(findings, code):
    return [f for f in findings if f.code == code]


def test_undeclared_torch_keeps_every_finding_and_fix(tmp_path):
    amp = _codes(_lint(tmp_path, AMP), "GPU201")
    assert len(amp) == 2 and all(f.fix is not None for f in amp)
    assert _codes(_lint(tmp_path, ATTENTION, "model.py"), "GPU502")
    assert _codes(_lint(tmp_path, LOADER), "GPU303")


def test_a_pinned_old_torch_is_not_told_of_a_later_deprecation_or_api(tmp_path):
    _write(tmp_path, "requirements.txt", "torch==1.6.0\n")
    assert _codes(_lint(tmp_path, AMP), "GPU201") == []  # deprecated only in 2.4
    assert _codes(_lint(tmp_path, ATTENTION, "model.py"), "GPU502") == []  # SDPA: 2.0
    assert _codes(_lint(tmp_path, LOADER), "GPU303") == []  # persistent_workers: 1.7


def test_a_range_admitting_releases_without_the_replacement_is_left_alone(tmp_path):
    # The project still supports torch 2.1/2.2, which have no torch.amp.GradScaler (new in
    # 2.3): moving to it would drop them, so only the autocast (since 1.10) is reported.
    _write(tmp_path, "requirements.txt", "torch>=2.1\n")
    by_line = {f.line: f for f in _codes(_lint(tmp_path, AMP), "GPU201")}
    assert sorted(by_line) == [3]
    assert by_line[3].fix is not None


def test_torch_version_in_the_configuration_wins_over_the_files(tmp_path):
    _write(tmp_path, "requirements.txt", "torch==1.6.0\n")
    config = example_config(root=tmp_path)
    apply_table(config, {"torch-version": ">=2.4"})
    findings, _ = Linter(config).lint_bytes("train.py", AMP.encode())
    assert len(_codes(findings, "GPU201")) == 2


def test_a_bad_torch_version_names_the_key():
    with pytest.raises(ConfigError, match="torch-version"):
        apply_table(Config(root=Path.cwd()), {"torch-version": "new enough"})


def test_the_declared_range_is_part_of_the_cache_key(tmp_path):
    before = Linter(example_config(root=tmp_path)).fingerprint()
    _write(tmp_path, "requirements.txt", "torch==2.0.0\n")
    assert Linter(example_config(root=tmp_path)).fingerprint() != before
