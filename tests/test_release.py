"""A release people can pin: every `rev:` of gpulint's pre-commit hooks and every
`uses: gpulint/gpulint@...` in the README and docs names a git tag that exists, or the version
being released (`v` + gpulint.__version__, tagged when it is released); the changelog has that
version's section."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import gpulint

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", REPO / ".pre-commit-hooks.yaml", *sorted((REPO / "docs").glob("*.md"))]
# `repo: https://github.com/gpulint/gpulint` then, within the entry, `rev: ...`.
HOOK = re.compile(
    r"repo:\s*https://github\.com/gpulint/gpulint\S*\s*\n(?:[ \t#]*\n)*?[ \t#]*rev:\s*(\S+)"
)
ACTION = re.compile(r"uses:\s*gpulint/gpulint@(\S+)")
TAG = re.compile(r"^v\d+\.\d+\.\d+(?:[-.]?(?:a|b|rc)\d+)?$")


def pinned_refs() -> list[tuple[str, str]]:
    refs = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        refs += [(path.name, m.group(1)) for m in HOOK.finditer(text)]
        refs += [(path.name, m.group(1)) for m in ACTION.finditer(text)]
    return refs


def git_tags() -> set[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return set()
    proc = subprocess.run(["git", "-C", str(REPO), "tag", "--list"], capture_output=True, text=True)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


def test_docs_pin_gpulint_somewhere():
    files = {name for name, _ in pinned_refs()}
    assert {"integrations.md", ".pre-commit-hooks.yaml"} <= files


@pytest.mark.parametrize("where,ref", pinned_refs())
def test_every_pinned_ref_exists_or_is_this_version(where, ref):
    assert TAG.match(ref), f"{where}: {ref!r} is not a release tag (vMAJOR.MINOR.PATCH)"
    assert ref in git_tags() or ref == f"v{gpulint.__version__}", (
        f"{where} pins {ref}, which is neither a git tag nor this version (v{gpulint.__version__})"
    )


def test_a_tag_of_this_version_is_on_an_ancestor_of_head():
    """Once `v<version>` is tagged, the code at that tag is this version (or older work)."""
    tag = f"v{gpulint.__version__}"
    if tag not in git_tags():
        pytest.skip(f"{tag} is not tagged in this checkout")
    proc = subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "--is-ancestor", tag, "HEAD"],
        capture_output=True,
    )
    assert proc.returncode == 0, f"{tag} is not an ancestor of HEAD"


def test_changelog_has_this_version():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(
        rf"^## {re.escape(gpulint.__version__)} \(\d{{4}}-\d{{2}}-\d{{2}}\)$", text, re.M
    )
    assert "## Unreleased" in text
