"""The README's quick start stays true: what it shows `gpulint check examples/` printing is what
it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_quick_start_output_is_what_check_prints():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n(examples/.*?)\n```", readme, re.S)
    assert block, "the README's quick start output block is missing"
    shown = [line for line in block.group(1).splitlines() if line != "..."]
    run = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", "examples/"],
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
