"""The README's quick start stays true: what it shows each `gpulint check ... examples/` printing
is what it prints (the default tier, then the full review with the pedantic tier)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
# A ```bash block whose last command is `gpulint check ...`, then the ```text block it prints.
SHOWN = re.findall(
    r"```bash\n[^`]*?gpulint check ([^\n`]*examples/)\n```\n\n```text\n(examples/.*?)\n```",
    README,
    re.S,
)


def test_the_readme_shows_the_default_run_and_the_full_review():
    assert [args for args, _ in SHOWN] == ["examples/", "--extend-select pedantic examples/"]


@pytest.mark.parametrize(("args", "block"), SHOWN, ids=[a for a, _ in SHOWN])
def test_quick_start_output_is_what_check_prints(args, block):
    shown = [line for line in block.splitlines() if line != "..."]
    run = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", *shlex.split(args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"NO_COLOR": "1", "PATH": ""},
    )
    assert run.returncode == 1  # the README says it exits 1: it found something
    printed = run.stdout.splitlines()
    for line in shown:
        assert line in printed, f"README shows a line check does not print: {line}"
    assert shown[-1] == printed[-1]  # the summary line, counts included
