"""`flake8 --select GPU` reports exactly what `gpulint check` reports: same lines, columns, codes
and messages, the same `[tool.gpulint]` configuration, the same `noqa` reading.

Both tools run as a user runs them: the real executables, in subprocesses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"

pytest.importorskip("flake8", reason="flake8 is not installed (pip install 'gpulint[dev]')")

# path, line, col, code, message
FLAKE8_FORMAT = "%(path)s\t%(row)d\t%(col)d\t%(code)s\t%(text)s"


def _norm(path: str) -> str:
    return path.removeprefix("./")


def run_cli(cwd: Path, *args: str) -> set[tuple[str, int, int, str, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", "--format", "json", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert proc.returncode in (0, 1), proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    return {(_norm(f["path"]), f["line"], f["col"], f["code"], f["message"]) for f in findings}


def run_flake8(
    cwd: Path, *args: str, stdin: str | None = None
) -> set[tuple[str, int, int, str, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", f"--format={FLAKE8_FORMAT}", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=stdin,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    out = set()
    for row in proc.stdout.splitlines():
        path, line, col, code, message = row.split("\t", 4)
        out.add((_norm(path), int(line), int(col), code, message))
    return out


def _python(findings, suffix=".py"):
    return {f for f in findings if f[0].endswith(suffix)}


def test_plugin_is_registered():
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--version"], capture_output=True, text=True, check=True
    )
    assert "gpulint" in proc.stdout


def test_cli_and_flake8_agree_on_every_python_fixture(tmp_path):
    python_fixtures = sorted(FIXTURES.rglob("*.py"))
    assert python_fixtures, "no Python fixtures"
    # A copy, so that whatever this repository's own [tool.gpulint] excludes, every fixture is
    # linted, by both tools with the same (default) configuration.
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    cli = _python(run_cli(tmp_path, "--exit-zero", "fixtures"))
    assert {f[0] for f in cli} <= {p.relative_to(REPO).as_posix() for p in python_fixtures}
    # E999: flake8 does not run plugins on a file that does not parse; gpulint says GPU000.
    flake8 = run_flake8(tmp_path, "--select", "GPU,E999", "fixtures")
    unparsed_cli = {f[0] for f in cli if f[3] == "GPU000" and f[4].startswith("syntax error")}
    unparsed_flake8 = {f[0] for f in flake8 if f[3] == "E999"}
    assert unparsed_cli == unparsed_flake8
    cli = {f for f in cli if f[0] not in unparsed_cli}
    flake8 = {f for f in flake8 if f[0] not in unparsed_flake8}
    assert cli, "the fixtures produced no findings: nothing was compared"
    assert sorted(cli - flake8) == [], "reported by gpulint check only"
    assert sorted(flake8 - cli) == [], "reported by flake8 only"


def _project(tmp_path: Path, pyproject: str, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject), encoding="utf-8")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


DEPRECATED = "scaler = torch.cuda.amp.GradScaler()"

NOQA_FORMS = f'''\
import torch

{DEPRECATED}
{DEPRECATED}  # noqa: GPU201
{DEPRECATED}  # noqa:GPU201
{DEPRECATED}  # noqa: GPU2
{DEPRECATED}  # noqa
{DEPRECATED}  # noqa: GPU
{DEPRECATED}  # noqa: GPU101
{DEPRECATED}  # NOQA: E501,GPU201
{DEPRECATED}  # noqa: E501 GPU201 -- explained
doc = """
text
""", torch.cuda.amp.GradScaler()  # noqa: GPU201
other = torch.cuda.amp.GradScaler(), """
"""  # noqa: GPU201
cont = 1 + \\
    torch.cuda.amp.GradScaler()  # noqa: GPU201
call = torch.cuda.amp.autocast(  # noqa: GPU201
    enabled=True,
)
inner = f(
    torch.cuda.amp.GradScaler(),
    x,  # noqa: GPU201
)
'''


def test_noqa_forms_agree(tmp_path):
    project = _project(tmp_path, "[tool.gpulint]\n", {"train.py": NOQA_FORMS})
    cli = run_cli(project, ".")
    flake8 = run_flake8(project, "--select", "GPU", ".")
    assert cli == flake8
    lines = sorted(f[1] for f in cli if f[3] == "GPU201")
    # Unsuppressed: the bare line, `noqa: GPU101` (another code), and the second line of a
    # bracketed call (flake8 and gpulint both read noqa per line inside brackets).
    assert lines == [3, 9, 23], cli
    # ... so those two comments suppress nothing: GPU003 (unused noqa), in both tools alike
    assert sorted(f[1] for f in cli if f[3] == "GPU003") == [9, 24], cli


def test_configuration_is_honoured(tmp_path):
    project = _project(
        tmp_path,
        """
        [tool.gpulint]
        ignore = ["GPU5"]
        targets = ["sm_90"]

        [tool.gpulint.per-file-ignores]
        "scripts/*.py" = ["GPU201"]
        """,
        {
            "src/train.py": f"import torch\n{DEPRECATED}\n",
            "scripts/run.py": f"import torch\n{DEPRECATED}\n",
            "src/ckpt.py": "from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x)\n",
        },
    )
    cli = run_cli(project, ".")
    flake8 = run_flake8(project, "--select", "GPU", ".")
    assert cli == flake8
    assert {(f[0], f[3]) for f in flake8} == {("src/train.py", "GPU201")}
    # And from a subdirectory: the configuration is found upwards from each file.
    assert {f[3] for f in run_flake8(project / "src", "--select", "GPU", ".")} == {"GPU201"}

    from gpulint.integrations.flake8_plugin import GpulintChecker

    found = GpulintChecker._project_for(project / "src" / "train.py")
    assert found.problem is None
    assert [t.arch.name for t in found.linter.settings.targets] == ["sm_90"]


def test_excludes_are_honoured(tmp_path):
    """flake8 walks into build/ and .venv/; gpulint's default and configured excludes apply."""
    bad = f"import torch\n{DEPRECATED}\n"
    project = _project(
        tmp_path,
        """
        [tool.gpulint]
        extend-exclude = ["third_party", "gen_*.py"]
        """,
        {
            "src/train.py": bad,
            "build/lib/train.py": bad,
            ".venv/lib/site.py": bad,
            "third_party/vendored/model.py": bad,
            "src/gen_ops.py": bad,
        },
    )
    cli = run_cli(project, ".")
    assert {f[0] for f in cli} == {"src/train.py"}
    assert run_flake8(project, "--select", "GPU", ".") == cli


def test_flake8_own_filters_work_with_our_codes(tmp_path):
    code = f"import torch\n{DEPRECATED}\nfrom torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x)\n"
    project = _project(tmp_path, "[tool.gpulint]\n", {"a.py": code})
    codes = lambda found: sorted(f[3] for f in found)  # noqa: E731
    assert codes(run_flake8(project, "--select", "GPU", ".")) == ["GPU201", "GPU501"]
    assert codes(run_flake8(project, "--select", "GPU", "--extend-ignore", "GPU2", ".")) == [
        "GPU501"
    ]
    assert codes(run_flake8(project, "--select", "GPU501", ".")) == ["GPU501"]
    assert codes(
        run_flake8(project, "--select", "GPU", "--per-file-ignores", "a.py:GPU5", ".")
    ) == ["GPU201"]
    # Plugins are on by default: plain `flake8` reports them next to pycodestyle/pyflakes codes.
    assert {"GPU201", "GPU501"} <= set(codes(run_flake8(project, ".")))


def test_columns_are_one_based_in_output(tmp_path):
    # TorchFix reported columns one off; flake8 adds 1 to a plugin's 0-based offset.
    project = _project(
        tmp_path, "[tool.gpulint]\n", {"a.py": f"import torch\nx = 1; é = 2; {DEPRECATED}\n"}
    )
    (finding,) = run_flake8(project, "--select", "GPU", ".")
    line = (project / "a.py").read_text(encoding="utf-8").splitlines()[1]
    assert finding[1:3] == (2, line.index("torch.cuda") + 1)
    assert run_cli(project, ".") == {finding}


def test_standard_input_as_editors_send_it(tmp_path):
    """VS Code's flake8 extension sends the unsaved buffer on stdin with --stdin-display-name."""
    project = _project(
        tmp_path,
        """
        [tool.gpulint]
        [tool.gpulint.per-file-ignores]
        "scripts/*.py" = ["GPU201"]
        """,
        {"src/train.py": "import torch\n", "scripts/run.py": "import torch\n"},
    )
    buffer = f"import torch\n\n{DEPRECATED}\n"  # not saved: the file on disk is clean
    found = run_flake8(
        project, "--select", "GPU", "--stdin-display-name", "src/train.py", "-", stdin=buffer
    )
    assert {(f[0], f[1], f[3]) for f in found} == {("src/train.py", 3, "GPU201")}
    found = run_flake8(
        project, "--select", "GPU", "--stdin-display-name", "scripts/run.py", "-", stdin=buffer
    )
    assert found == set()


def test_configuration_error_is_reported_not_raised(tmp_path):
    project = _project(
        tmp_path,
        '[tool.gpulint]\ntargets = ["sm_999"]\n',
        {"a.py": f"import torch\n{DEPRECATED}\n"},
    )
    found = run_flake8(project, "--select", "GPU", ".")
    assert [(f[1], f[3]) for f in found] == [(1, "GPU000")]
    assert "configuration error" in next(iter(found))[4]


def test_non_utf8_file_reads_like_the_cli(tmp_path):
    project = _project(tmp_path, "[tool.gpulint]\n", {})
    (project / "latin.py").write_bytes(
        b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9t\xe9'; s = torch.cuda.amp.GradScaler()\n"
    )
    (project / "broken.py").write_bytes(
        b"import torch\nname = '\xe9t\xe9'\nx = torch.cuda.amp.GradScaler()\n"
    )
    cli = run_cli(project, ".")
    assert {(f[0], f[3]) for f in cli} == {("latin.py", "GPU201"), ("broken.py", "GPU000")}
    assert run_flake8(project, "--select", "GPU", ".") == cli


def test_in_process_runs_see_an_edited_configuration(tmp_path, capsys, monkeypatch):
    """VS Code's flake8 extension may run flake8 inside its language server, again and again."""
    from flake8.main.cli import main

    project = _project(tmp_path, "[tool.gpulint]\n", {"a.py": f"import torch\n{DEPRECATED}\n"})
    monkeypatch.chdir(project)
    args = ["--isolated", "--select", "GPU", "--format", "%(code)s", "a.py"]
    main(args)
    assert capsys.readouterr().out.split() == ["GPU201"]
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[tool.gpulint]\nignore = ["GPU201"]\n', encoding="utf-8")
    stat = pyproject.stat()
    os.utime(pyproject, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    main(args)
    assert capsys.readouterr().out.split() == []
