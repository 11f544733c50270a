"""ruff side by side: ruff has no plugins, and its RUF100/RUF102 treat `# noqa: GPU201` as a code
it does not know: `ruff check --fix` deletes it, and the gpulint finding comes back. With
`lint.external = ["GPU"]` (docs/integrations.md) ruff keeps our codes. Checked with the real ruff.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None,
    reason="ruff is not installed (pip install 'gpulint[dev]')",
)

SOURCE = """\
import torch

scaler = torch.cuda.amp.GradScaler()  # noqa: GPU201
long_name_for_a_scaler_object = torch.cuda.amp.GradScaler()  # noqa: E501, GPU201
"""

RUFF_CONFIG = """\
[tool.ruff]
line-length = 40

[tool.ruff.lint]
select = ["E", "F", "RUF100", "RUF102"]
{external}
[tool.gpulint]
"""


def _project(tmp_path: Path, external: bool) -> Path:
    line = 'external = ["GPU"]\n' if external else ""
    (tmp_path / "pyproject.toml").write_text(RUFF_CONFIG.format(external=line), encoding="utf-8")
    (tmp_path / "train.py").write_text(SOURCE, encoding="utf-8")
    return tmp_path


def ruff(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *args, "."],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def gpulint_codes(cwd: Path) -> list[tuple[int, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", "--format", "json", "."],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return [(f["line"], f["code"]) for f in json.loads(proc.stdout)["findings"]]


def test_without_external_ruff_deletes_our_codes(tmp_path):
    project = _project(tmp_path, external=False)
    assert gpulint_codes(project) == []
    check = ruff(project, "--output-format", "concise")
    assert check.returncode == 1
    assert "RUF102" in check.stdout and "GPU201" in check.stdout
    ruff(project, "--fix")
    fixed = (project / "train.py").read_text(encoding="utf-8")
    assert "GPU201" not in fixed
    # The suppressions are gone, so gpulint reports both lines again.
    assert gpulint_codes(project) == [(3, "GPU201"), (4, "GPU201")]


def test_with_external_ruff_keeps_our_codes(tmp_path):
    project = _project(tmp_path, external=True)
    check = ruff(project, "--output-format", "concise")
    assert check.returncode == 0, check.stdout + check.stderr
    ruff(project, "--fix")
    assert (project / "train.py").read_text(encoding="utf-8") == SOURCE
    # One comment serves both tools: E501 for ruff, GPU201 for gpulint.
    assert gpulint_codes(project) == []
