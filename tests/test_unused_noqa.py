"""GPU003 unused-noqa (ruff's RUF100): which `noqa` comments it reports, what its fix leaves, how
the selection decides what is judged, and that the CLI, the cache, SARIF, flake8 and
`--add-noqa` agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpulint.config import Config
from gpulint.engine import Linter
from gpulint.fixes import apply_edits
from gpulint.registry import registry
from gpulint.testing import example_config

LOOP = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100):  # noqa: GPU202
        loss = model(torch.randn(8, 4, device="cuda")).sum()
        loss.backward()
        opt.step()
        print(loss.item()){comment}
    """
)


def unused(text: str, filename: str = "train.py", config: Config | None = None):
    config = config or example_config()
    findings, _ = Linter(config).lint_bytes(filename, text.encode())
    return [f for f in findings if f.code == "GPU003"]


def fixed(text: str, filename: str = "train.py") -> str:
    edits = [e for f in unused(text, filename) if f.fix for e in f.fix.edits]
    return apply_edits(text, edits)[0]


def selecting(*codes: str) -> Config:
    config = Config(root=Path.cwd())
    config.select = list(codes)
    return config


# -- what is reported ------------------------------------------------------------------------
def test_a_used_noqa_is_silent_and_the_same_code_unused_is_reported():
    assert unused(LOOP.format(comment="  # noqa: GPU101")) == []
    (finding,) = unused("import torch\nx = torch.ones(3)  # noqa: GPU101\n")
    assert (finding.line, finding.col, finding.end_col) == (2, 20, 34)
    assert finding.message == "unused `noqa` (unused: GPU101)"


def test_only_the_unused_codes_of_a_comment_are_named_and_removed():
    text = LOOP.format(comment="  # noqa: GPU101, GPU104")
    (finding,) = unused(text)
    assert finding.message == "unused `noqa` (unused: GPU104)"
    assert "print(loss.item())  # noqa: GPU101\n" in fixed(text)


def test_other_tools_codes_are_left_alone_and_kept_by_the_fix():
    assert unused("import torch\nx = torch.ones(3)  # noqa: E501, F401\n") == []
    text = "import torch\nx = torch.ones(3)  # noqa: e501,GPU105\n"
    assert fixed(text) == "import torch\nx = torch.ones(3)  # noqa: e501\n"


def test_unknown_gpulint_codes_are_reported():
    (finding,) = unused("import torch\nx = torch.ones(3)  # noqa: GPU999, GPU1011\n")
    assert finding.message == "unused `noqa` (unknown: GPU999, GPU1011)"


def test_the_fix_removes_an_emptied_comment_and_keeps_what_follows():
    cases = {
        "x = 1  # noqa: GPU101\n": "x = 1\n",
        "x = 1  # log it  # noqa: GPU101\n": "x = 1  # log it\n",
        "x = 1  # noqa: GPU101  # log it\n": "x = 1  # log it\n",
        "x = 1  # noqa: GPU101 reason in words\n": "x = 1  # reason in words\n",
    }
    for before, after in cases.items():
        text = "import torch\n" + before
        assert fixed(text) == "import torch\n" + after, before


def test_a_blanket_noqa_in_python_is_left_to_flake8_and_ruff():
    assert unused("import torch\nx = torch.ones(3)  # noqa\n") == []


def test_a_blanket_noqa_elsewhere_is_reported():
    cuda = "__global__ void k(float* x) {}\nvoid run(float* x) { int n = 0; }  // noqa\n"
    (finding,) = unused(cuda, "k.cu")
    assert finding.message == "unused `noqa` (blanket, nothing suppressed)"
    assert fixed(cuda, "k.cu").endswith("int n = 0; }\n")
    md = "# Results\n\nNothing measured here. <!-- noqa --> More text.\n"
    assert fixed(md, "results.md") == "# Results\n\nNothing measured here. More text.\n"
    assert fixed("export CUDA_VISIBLE_DEVICES=0  # noqa\n", "run.sh") == (
        "export CUDA_VISIBLE_DEVICES=0\n"
    )


def test_noqa_that_is_no_comment_is_not_judged():
    assert unused('import torch\ns = "x.item()  # noqa: GPU101"\n') == []
    assert unused("import torch\n# write `# noqa: GPU101` to silence it\n") == []
    fence = "# Guide\n\n```python\nprint(loss.item())  # noqa: GPU101\n```\n"
    assert unused(fence, "guide.md") == []


def test_a_comment_naming_gpu003_is_kept_on_purpose():
    assert unused("import torch\nx = torch.ones(3)  # noqa: GPU101, GPU003\n") == []
    assert unused("import torch\nx = torch.ones(3)  # noqa: GPU0, GPU101\n") == []


def test_a_noqa_ending_a_multi_line_string_is_used_by_a_finding_on_its_first_line():
    text = LOOP.format(comment=' or """\n    per step"""  # noqa: GPU101')
    assert unused(text) == []
    text = LOOP.format(comment=' or """\n    per step"""  # noqa: GPU105')
    assert [f.message for f in unused(text)] == ["unused `noqa` (unused: GPU105)"]


def test_per_file_ignores_turn_it_off():
    config = example_config()
    config.per_file_ignores = {"train.py": ["GPU003"]}
    assert unused("import torch\nx = torch.ones(3)  # noqa: GPU101\n", config=config) == []


# -- what the selection decides --------------------------------------------------------------
def test_codes_of_rules_not_selected_are_not_judged():
    text = "import torch\nx = torch.ones(3)  # noqa: GPU101\n"
    assert unused(text, config=selecting("GPU003")) == []
    assert len(unused(text, config=selecting("GPU003", "GPU101"))) == 1


def test_a_prefix_is_judged_only_when_every_rule_it_covers_runs():
    text = "import torch\nx = torch.ones(3)  # noqa: GPU1\n"
    assert unused(text, config=selecting("GPU003", "GPU101")) == []
    (finding,) = unused(text, config=selecting("GPU003", "GPU1"))
    assert finding.message == "unused `noqa` (unused: GPU1)"


def test_a_rule_that_cannot_run_without_targets_is_not_judged():
    ref = next(r for r in registry().rules if r.needs_targets and "python" in r.languages)
    text = f"import triton\nx = 1  # noqa: {ref.code}\n"
    assert unused(text, "kernel.py", config=example_config()) == []
    with_targets = example_config(targets=["sm_90"])
    assert [f.message for f in unused(text, "kernel.py", config=with_targets)] == [
        f"unused `noqa` (unused: {ref.code})"
    ]


def test_not_on_by_default(default_tier_only):
    config = Config(root=Path.cwd())
    assert not config.is_enabled("GPU003", "pedantic")
    assert unused("import torch\nx = torch.ones(3)  # noqa: GPU802\n", config=config) == []


def test_the_rule_is_the_code_add_noqa_skips_and_covers_every_language():
    from gpulint.diagnostics import UNUSED_NOQA
    from gpulint.rule import rule_by_code

    rule = rule_by_code(UNUSED_NOQA)
    assert rule is not None and rule.judges_noqa and rule.tier == "pedantic"
    # every front-end's language is covered
    assert {f.language for f in registry().frontends} <= set(rule.languages())


# -- the command line, the cache, SARIF, flake8 ----------------------------------------------
def gpulint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulint", "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": ""},
    )


def codes_of(proc: subprocess.CompletedProcess) -> list[tuple[int, str]]:
    return [(f["line"], f["code"]) for f in json.loads(proc.stdout)["findings"]]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    (tmp_path / "train.py").write_text(LOOP.format(comment="  # noqa: GPU101, GPU105"))
    return tmp_path


def test_the_cache_judges_again_when_the_selection_changes(project):
    narrow = ("--format", "json", "--select", "GPU003,GPU101", ".")
    wide = ("--format", "json", "--select", "GPU003,GPU1", ".")
    assert codes_of(gpulint(project, *narrow)) == []
    assert codes_of(gpulint(project, *wide)) == [(9, "GPU003")]
    assert codes_of(gpulint(project, *narrow)) == []  # served from the cache, still right
    assert (project / ".gpulint_cache").is_dir()
    # a configuration change (per-file-ignores) is part of the key too
    (project / "pyproject.toml").write_text(
        '[tool.gpulint]\nper-file-ignores = {"train.py" = ["GPU003"]}\n'
    )
    assert codes_of(gpulint(project, *wide)) == []


def test_fix_on_the_command_line(project):
    proc = gpulint(project, "--no-cache", "--select", "GPU003,GPU1,GPU202", "--fix", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "print(loss.item())  # noqa: GPU101\n" in (project / "train.py").read_text()


def test_sarif_carries_the_finding_and_its_rule(project):
    proc = gpulint(project, "--no-cache", "--format", "sarif", "--select", "GPU003,GPU1", ".")
    run = json.loads(proc.stdout)["runs"][0]
    (result,) = [r for r in run["results"] if r["ruleId"] == "GPU003"]
    assert result["message"]["text"] == "unused `noqa` (unused: GPU105)"
    assert "GPU003" in {r["id"] for r in run["tool"]["driver"]["rules"]}


def test_flake8_reports_what_the_cli_reports(project):
    pytest.importorskip("flake8")
    cli = gpulint(project, "--no-cache", "--format", "json", "--select", "GPU003,GPU1", ".")
    flake8 = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select", "GPU003,GPU1", "train.py"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert codes_of(cli) == [(9, "GPU003")]
    assert flake8.stdout.splitlines() == ["train.py:9:25: GPU003 unused `noqa` (unused: GPU105)"], (
        flake8.stderr
    )


# -- --add-noqa ------------------------------------------------------------------------------
def test_add_noqa_after_a_comment_and_into_a_noqa_already_there(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    train = tmp_path / "train.py"
    train.write_text(
        LOOP.format(comment="  # log it").replace("  # noqa: GPU202", "  # noqa: E501")
    )
    proc = gpulint(tmp_path, "--no-cache", "--add-noqa", ".")
    assert "Added 2 noqa codes in 1 file." in proc.stderr, proc.stderr
    text = train.read_text()
    assert "for step in range(100):  # noqa: E501, GPU202\n" in text
    assert "print(loss.item())  # log it  # noqa: GPU101\n" in text
    after = gpulint(tmp_path, "--no-cache", ".")
    assert after.returncode == 0, after.stdout


def test_add_noqa_never_writes_gpu003(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    train = tmp_path / "train.py"
    train.write_text("import torch\nx = torch.ones(3)  # noqa: GPU101\n")
    proc = gpulint(tmp_path, "--no-cache", "--add-noqa", ".")
    assert "Added 0 noqa codes" in proc.stderr
    assert train.read_text() == "import torch\nx = torch.ones(3)  # noqa: GPU101\n"


def test_the_suppress_action_offers_no_noqa_for_gpu003():
    from gpulint.noqa import NoqaPlanner

    text = "import torch\nx = torch.ones(3)  # noqa: GPU101\n"
    (finding,) = unused(text)
    assert NoqaPlanner(text, "python").edits([finding]) == []
    assert finding.fix is not None  # the quick fix is its own: delete the code
