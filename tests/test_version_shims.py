"""Version shims (frontends/python/compat.py) and GPU201's fix: a fix never rewrites the
branch that exists for an older PyTorch. The shapes are those of real training scripts and
compatibility helpers (rewritten): conditional expressions on a release flag or a feature
probe, if/elif chains, probes whose body returns, `try` fallbacks."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gpulint.frontends.python import compat
from gpulint.frontends.python.file import PythonFile

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "python"


def _file(text: str) -> PythonFile:
    return PythonFile("x.py", text, ast.parse(text))


def _test_of_last_if(text: str) -> tuple[PythonFile, ast.expr]:
    file = _file(text)
    last = [n for n in ast.walk(file.tree) if isinstance(n, (ast.If, ast.IfExp))][-1]
    return file, last.test


@pytest.mark.parametrize(
    "test",
    [
        "torch.__version__ >= '2.3'",
        "version.parse(torch.__version__) < version.parse('2.3')",
        "LooseVersion(torch.__version__) >= LooseVersion('1.10')",
        "TORCH_VERSION >= (2, 4)",
        "torch_version > 2",
        "TORCH_2_4",
        "IS_TORCH_LT_2_3",
        "_TORCH_GREATER_EQUAL_2_0",
        "is_torch_greater_or_equal_than_1_13",
        "is_torch_greater_or_equal('2.5')",
        "NEW_TORCH",
        "not OLD_PYTORCH",
        "hasattr(torch, 'amp')",
        "use_amp and hasattr(torch.amp, 'GradScaler')",
        "getattr(torch.amp, 'GradScaler', None) is not None",
        "sys.version_info >= (3, 8)",
        "importlib.metadata.version('torch') >= '2'",
    ],
)
def test_version_checks(test):
    prelude = (
        "import sys, importlib.metadata, torch\nfrom packaging import version\n"
        "from distutils.version import LooseVersion\n"
    )
    file, node = _test_of_last_if(f"{prelude}if {test}:\n    pass\n")
    assert compat.is_version_check(file, node)


@pytest.mark.parametrize(
    "test",
    [
        "device_type == 'cpu'",
        "not (cuda and use_amp)",
        "cfg.fp16",
        "use_torch_compile",
        "is_torch_available()",
        "torch_dtype == torch.float16",
        "hasattr(self, 'scaler')",
        "hasattr(model, 'module')",
        "torch.cuda.is_available()",
    ],
)
def test_not_version_checks(test):
    file, node = _test_of_last_if(f"import torch\nif {test}:\n    pass\n")
    assert not compat.is_version_check(file, node)


def test_a_flag_bound_to_a_check_is_one():
    file, node = _test_of_last_if(
        "import torch\nAMP_OK = hasattr(torch, 'amp')\nREADY = AMP_OK\nif READY:\n    pass\n"
    )
    assert compat.is_version_check(file, node)
    file, node = _test_of_last_if("import torch\nREADY = load()\nif READY:\n    pass\n")
    assert not compat.is_version_check(file, node)


def test_alternatives_are_the_other_arms():
    file = _file(
        "def f(flag):\n"
        "    if probe():\n"
        "        try:\n"
        "            return new()\n"
        "        except TypeError:\n"
        "            return newer()\n"
        "    x = a() if flag else old()\n"
        "    return x\n"
    )
    old = next(n for n in ast.walk(file.tree) if isinstance(n, ast.Name) and n.id == "old")
    names = {
        n.id
        for alt in compat.alternatives(file, old)
        for n in ast.walk(alt)
        if isinstance(n, ast.Name)
    }
    assert {"a", "new", "newer"} <= names and "old" not in names


def _fix(tmp_path: Path, name: str) -> tuple[str, str]:
    source = (FIXTURES / name).read_text()
    target = tmp_path / name
    target.write_text(source)
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulint",
            "check",
            "--no-cache",
            "--fix",
            "--select",
            "GPU201",
            name,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    return source, target.read_text()


def test_fix_leaves_every_shim_alone(tmp_path):
    before, after = _fix(tmp_path, "gpu201_silent_conditional_shims.py")
    assert after == before


def test_fix_still_rewrites_conditionals_that_are_no_shim(tmp_path):
    before, after = _fix(tmp_path, "gpu201_conditional_not_a_shim.py")
    assert "torch.cuda.amp" not in after.split('"""', 2)[2]
    assert 'else torch.amp.autocast("cuda", dtype=dtype)' in after
    assert 'else torch.amp.GradScaler("cuda")' in after
