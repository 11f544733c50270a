"""The `gpulint` command as a user runs it: exit codes, formats, config, suppression, fixes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpulint.cli import main

BAD = textwrap.dedent(
    """\
    import torch
    from torch.utils.checkpoint import checkpoint

    scaler = torch.cuda.amp.GradScaler()
    y = checkpoint(block, x)
    """
)
GOOD = "import torch\nscaler = torch.amp.GradScaler('cuda')\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "good.py").write_text(GOOD)
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def test_findings_exit_1_with_text_format(project):
    code, out = run("check", "--no-cache", ".")
    assert code == 1
    assert "bad.py:4:10: GPU201 `torch.cuda.amp.GradScaler` is deprecated" in out
    assert "bad.py:5:5: GPU501" in out
    assert "Found 2 findings in 1 file (2 checked). 2 fixable" in out


def test_no_findings_exit_0(project):
    code, out = run("check", "--no-cache", "good.py")
    assert code == 0
    assert "All checks passed" in out


def test_exit_zero(project):
    assert run("check", "--no-cache", "--exit-zero", ".")[0] == 0


def test_json_format(project):
    code, out = run("check", "--no-cache", "--format", "json", "bad.py")
    data = json.loads(out)
    assert [(f["code"], f["line"], f["col"]) for f in data["findings"]] == [
        ("GPU201", 4, 10),
        ("GPU501", 5, 5),
    ]
    assert data["findings"][0]["fix"]["edits"]


def test_github_format(project):
    _, out = run("check", "--no-cache", "--format", "github", "bad.py")
    assert out.startswith("::warning file=bad.py,line=4,col=10,")
    assert "title=GPU201::GPU201" in out


def test_select_and_ignore_flags(project):
    _, out = run("check", "--no-cache", "--select", "GPU5", ".")
    assert "GPU501" in out and "GPU201" not in out
    _, out = run("check", "--no-cache", "--ignore", "GPU2", ".")
    assert "GPU201" not in out and "GPU501" in out


def test_pyproject_config_and_per_file_ignores(project):
    (project / "pyproject.toml").write_text(
        '[tool.gpulint]\nignore = ["GPU501"]\n[tool.gpulint.per-file-ignores]\n"bad.py" = ["GPU201"]\n'
    )
    code, out = run("check", "--no-cache", ".")
    assert code == 0, out


def test_config_found_walking_up(project):
    (project / "pyproject.toml").write_text('[tool.gpulint]\nselect = ["GPU5"]\n')
    sub = project / "pkg" / "deep"
    sub.mkdir(parents=True)
    (sub / "m.py").write_text(BAD)
    _, out = run("check", "--no-cache", str(sub))
    assert "GPU501" in out and "GPU201" not in out


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[tool.gpulint]\nselect = "GPU1"\n', "select: expected a list of strings"),
        ('[tool.gpulint]\nselct = ["GPU1"]\n', "unknown key 'selct'"),
        ('[tool.gpulint]\nignore = ["GPU999"]\n', "unknown rule code or prefix 'GPU999'"),
        ('[tool.gpulint]\ntargets = ["sm_99"]\n', "unknown target 'sm_99'; known: sm_70"),
        ("[tool.gpulint\nselect = 1\n", "not valid TOML"),
        ("[tool.gpulint]\njobs = -1\n", "jobs: expected a non-negative integer"),
    ],
)
def test_bad_config_is_exit_2_naming_the_key(project, capsys, toml, needle):
    (project / "pyproject.toml").write_text(toml)
    assert main(["check", "--no-cache", "."]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and needle in err


def test_unknown_target_flag_is_exit_2(project, capsys):
    assert main(["check", "--targets", "H900", "."]) == 2
    assert "unknown target 'H900'" in capsys.readouterr().err


def test_noqa_forms(project):
    (project / "bad.py").write_text(
        "import torch\n"
        "a = torch.cuda.amp.GradScaler()  # noqa: GPU201\n"
        "b = torch.cuda.amp.GradScaler()  # noqa: GPU2\n"
        "c = torch.cuda.amp.GradScaler()  # noqa\n"
        "d = torch.cuda.amp.GradScaler()  # noqa: GPU501\n"
        "e = torch.cuda.amp.GradScaler()  # NOQA:GPU201,GPU501\n"
    )
    _, out = run("check", "--no-cache", "--format", "json", "bad.py")
    found = {(f["line"], f["code"]) for f in json.loads(out)["findings"]}
    # GPU501 suppresses nothing on lines 5 and 6: GPU003 (unused noqa) says so
    assert found == {(5, "GPU201"), (5, "GPU003"), (6, "GPU003")}


def test_fix_writes_parses_and_relints_clean(project):
    os.chmod(project / "bad.py", 0o640)
    code, out = run("check", "--no-cache", "--fix", "bad.py")
    assert code == 0, out
    text = (project / "bad.py").read_text()
    assert 'torch.amp.GradScaler("cuda")' in text
    assert "checkpoint(block, x, use_reentrant=False)" in text
    assert oct((project / "bad.py").stat().st_mode & 0o777) == "0o640"
    assert not [p for p in project.iterdir() if "gpulint-tmp" in p.name]
    # Fixing again changes nothing.
    before = (project / "bad.py").read_bytes()
    run("check", "--no-cache", "--fix", "bad.py")
    assert (project / "bad.py").read_bytes() == before


def test_diff_writes_nothing(project):
    code, out = run("check", "--no-cache", "--diff", "bad.py")
    assert code == 1
    assert '+scaler = torch.amp.GradScaler("cuda")' in out
    assert (project / "bad.py").read_text() == BAD


def test_bad_inputs_become_gpu000_and_the_run_goes_on(project):
    (project / "broken.py").write_text("def f(:\n    torch.cuda.amp.autocast()\n")
    (project / "latin1.py").write_bytes(b"x = '\xff\xfe'\namp = 1\n")
    (project / "binary.py").write_bytes(b"\x00\x01\x02amp\x00" * 100)
    code, out = run("check", "--no-cache", "--format", "json", ".")
    data = json.loads(out)
    by_path = {}
    for f in data["findings"]:
        by_path.setdefault(f["path"], []).append(f["code"])
    assert by_path["broken.py"] == ["GPU000"]
    assert by_path["latin1.py"] == ["GPU000"]
    assert by_path["binary.py"] == ["GPU000"]
    assert "GPU201" in by_path["bad.py"]
    assert code == 1


def test_gitignore_and_exclude_are_honoured(project):
    (project / ".gitignore").write_text("generated/\n")
    (project / "generated").mkdir()
    (project / "generated" / "x.py").write_text(BAD)
    (project / "third_party").mkdir()
    (project / "third_party" / "y.py").write_text(BAD)
    (project / "pyproject.toml").write_text('[tool.gpulint]\nextend-exclude = ["third_party"]\n')
    _, out = run("check", "--no-cache", "--format", "json", ".")
    paths = {f["path"] for f in json.loads(out)["findings"]}
    assert paths == {"bad.py"}


def test_vendored_folders_are_excluded_by_default_and_exclude_brings_them_back(project):
    for vendored in ("third_party", "vendor", "deps/lib", "src/external"):
        (project / vendored).mkdir(parents=True)
        (project / vendored / "v.py").write_text(BAD)
    (project / "src" / "deps.py").write_text(BAD)  # a file of that name is the project's own
    _, out = run("check", "--no-cache", "--format", "json", ".")
    assert {f["path"] for f in json.loads(out)["findings"]} == {"bad.py", "src/deps.py"}
    # Setting `exclude` replaces the defaults: the vendored code is checked again.
    (project / "pyproject.toml").write_text('[tool.gpulint]\nexclude = [".venv"]\n')
    _, out = run("check", "--no-cache", "--format", "json", ".")
    paths = {f["path"] for f in json.loads(out)["findings"]}
    assert {"third_party/v.py", "vendor/v.py", "deps/lib/v.py", "src/external/v.py"} <= paths


def test_missing_path_is_reported(project):
    code, out = run("check", "--no-cache", "nope.py")
    assert code == 1 and "GPU000" in out and "no such file" in out


def test_rules_and_rule_commands(capsys):
    assert main(["rules"]) == 0
    listing = capsys.readouterr().out
    assert "GPU101  host-sync-in-step-loop" in listing
    assert main(["rule", "GPU101"]) == 0
    doc = capsys.readouterr().out
    for heading in (
        "## What it does",
        "## Why is this bad?",
        "## Example",
        "## Use instead",
        "## References",
    ):
        assert heading in doc
    assert main(["rule", "GPU999"]) == 2


def test_rules_lists_one_short_summary_per_rule(capsys):
    from gpulint.rule import all_rules
    from gpulint.ruledocs import short_summary

    assert main(["rules"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("GPU")]
    assert len(lines) == len(all_rules())
    for rule, line in zip(all_rules(), lines, strict=True):
        summary = short_summary(rule)
        assert line.startswith(rule.code) and line.endswith(summary)
        assert len(summary) <= 140, (rule.code, summary)
        assert summary.rstrip(".…") in " ".join(rule.summary().split()) or "(" in rule.summary()
    # The whole sentence stays in `gpulint rule`.
    gpu202 = next(r for r in all_rules() if r.code == "GPU202")
    assert len(gpu202.summary()) > 140 and main(["rule", "GPU202"]) == 0
    assert " ".join(gpu202.summary().split()) in " ".join(capsys.readouterr().out.split())


def test_cache_serves_identical_findings_and_respects_config(project):
    first = run("check", "--format", "json", ".")[1]
    assert list((project / ".gpulint_cache").glob("results-*.json"))
    second = run("check", "--format", "json", ".")[1]
    assert json.loads(first)["findings"] == json.loads(second)["findings"]
    third = json.loads(run("check", "--format", "json", "--select", "GPU5", ".")[1])
    assert {f["code"] for f in third["findings"]} == {"GPU501"}


def test_parallel_jobs_give_the_same_output(project):
    for i in range(20):
        (project / f"m{i}.py").write_text(BAD)
    serial = run("check", "--no-cache", "--jobs", "1", "--format", "json", ".")[1]
    parallel = run("check", "--no-cache", "--jobs", "2", "--format", "json", ".")[1]
    assert serial == parallel


def test_module_entry_point_does_not_import_torch(project):
    code = (
        "import sys, gpulint.cli, gpulint.engine, gpulint.rule;"
        "gpulint.rule.all_rules();"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_force_exclude_applies_exclude_to_named_files(project):
    (project / "pyproject.toml").write_text('[tool.gpulint]\nextend-exclude = ["vendored"]\n')
    (project / "vendored").mkdir()
    (project / "vendored" / "v.py").write_text(BAD)
    code, out = run("check", "--no-cache", "vendored/v.py")
    assert code == 1 and "GPU201" in out  # named explicitly: checked, as flake8 and ruff do
    code, out = run("check", "--no-cache", "--force-exclude", "vendored/v.py", "good.py")
    assert code == 0, out


def test_cache_is_not_served_after_the_rules_change(project, monkeypatch):
    from gpulint import engine

    run("check", "--format", "json", ".")
    monkeypatch.setattr(engine, "_code_stamp", lambda: "edited rules")
    linter_cache = list((project / ".gpulint_cache").glob("results-*.json"))
    run("check", "--format", "json", ".")
    assert len(list((project / ".gpulint_cache").glob("results-*.json"))) == len(linter_cache) + 1


def test_cache_key_is_the_same_in_every_process(project):
    """Set and dict order vary between processes (hash randomisation): the key must not."""
    code = (
        "from pathlib import Path; from gpulint.config import load_config;"
        "from gpulint.engine import Linter; print(Linter(load_config(Path('.'))).fingerprint())"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=project,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            check=True,
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(keys) == 1, keys


def test_per_file_ignores_match_as_ruffs_do():
    """ruff's dialect (globset): anchored at the project root, `*` crosses `/`, a pattern
    also matches the file's name alone, `{a,b}` and classes, `!` negates."""
    from pathlib import Path as _Path

    from gpulint.config import Config

    config = Config(root=_Path("/p"))
    config.per_file_ignores = {
        "tests/*": ["GPU1"],
        "conftest.py": ["GPU2"],
        "**/bench_*.py": ["GPU6"],
        "kernels/*.{cu,cuh}": ["GPU8"],
        "!src/**": ["GPU9"],
    }

    def ignored(path: str) -> set[str]:
        return set(config.ignored_for(path))

    assert ignored("tests/unit/test_a.py") == {"GPU1", "GPU9"}  # `*` crosses `/`, as globset
    assert ignored("pkg/tests/test_a.py") == {"GPU9"}  # anchored at the root, not a suffix
    assert ignored("src/pkg/conftest.py") == {"GPU2"}  # the name alone, at any depth
    assert ignored("src/bench_x.py") == {"GPU6"} and ignored("bench_y.py") == {"GPU6", "GPU9"}
    assert ignored("kernels/a/k.cuh") == {"GPU8", "GPU9"}
    assert ignored("src/kernels/k.cu") == set()  # neither `kernels/...` nor outside src/
