"""A release people can pin: every `rev:` of gpulint's pre-commit hooks, every
`uses: gpulint/gpulint@...` and every `git+https://...@` in the README and docs names a git tag
that exists, or the version being released (the changelog's newest section, tagged `v` + it when
it is released). The version is the tag's (setuptools-scm): `gpulint --version` and
`gpulint.__version__` say what the installed metadata says.

The release check (.ci/release) refuses an untagged HEAD, a tag the changelog, the docs or the
built version disagree with, a lightweight tag and a dirty tree: tried here on temporary git
repositories made from this tree, tagged or not, so this passes on an untagged clone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version as metadata_version
from pathlib import Path

import pytest

import gpulint

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", REPO / ".pre-commit-hooks.yaml", *sorted((REPO / "docs").glob("*.md"))]
# `repo: https://github.com/gpulint/gpulint` then, within the entry, `rev: ...`.
HOOK = re.compile(
    r"repo:\s*https://github\.com/gpulint/gpulint\S*\s*\n(?:[ \t#]*\n)*?[ \t#]*rev:\s*(\S+)"
)
ACTION = re.compile(r"uses:\s*gpulint/gpulint@([\w.+-]+)")
GIT_URL = re.compile(r"git\+https://github\.com/gpulint/gpulint@([\w.+-]+)")
SECTION = re.compile(r"^## (\S+) \(\d{4}-\d{2}-\d{2}\)$", re.M)
RELEASE = REPO / ".ci" / "release"
TAG = re.compile(r"^v\d+\.\d+\.\d+(?:[-.]?(?:a|b|rc)\d+)?$")


def pinned_refs() -> list[tuple[str, str]]:
    refs = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        refs += [(path.name, m.group(1)) for m in HOOK.finditer(text)]
        refs += [(path.name, m.group(1)) for m in ACTION.finditer(text)]
        refs += [(path.name, m.group(1)) for m in GIT_URL.finditer(text)]
    return refs


def git_tags() -> set[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return set()
    proc = subprocess.run(["git", "-C", str(REPO), "tag", "--list"], capture_output=True, text=True)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


def newest_release() -> str:
    """The version being released, or last released: the changelog's first dated section."""
    m = SECTION.search((REPO / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert m, "CHANGELOG.md has no `## X.Y.Z (YYYY-MM-DD)` section"
    return m.group(1)


def test_docs_pin_gpulint_somewhere():
    files = {name for name, _ in pinned_refs()}
    assert {"integrations.md", ".pre-commit-hooks.yaml", "README.md"} <= files


@pytest.mark.parametrize("where,ref", pinned_refs())
def test_every_pinned_ref_exists_or_is_this_version(where, ref):
    assert TAG.match(ref), f"{where}: {ref!r} is not a release tag (vMAJOR.MINOR.PATCH)"
    assert ref in git_tags() or ref == f"v{newest_release()}", (
        f"{where} pins {ref}, which is neither a git tag nor the release (v{newest_release()})"
    )


def test_a_tag_of_this_version_is_on_an_ancestor_of_head():
    """Once `v<version>` is tagged, the code at that tag is this version (or older work)."""
    tag = f"v{newest_release()}"
    if tag not in git_tags():
        pytest.skip(f"{tag} is not tagged in this checkout")
    proc = subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "--is-ancestor", tag, "HEAD"],
        capture_output=True,
    )
    assert proc.returncode == 0, f"{tag} is not an ancestor of HEAD"


def test_changelog_has_an_unreleased_section_above_the_release():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.index("## Unreleased") < text.index(f"## {newest_release()} (")


def test_the_version_is_the_installed_metadata():
    """`gpulint.__version__` and `gpulint --version` say what pip installed (setuptools-scm's
    version from the tag: the release itself at a tag, a development version after one)."""
    installed = metadata_version("gpulint")
    assert gpulint.__version__ == installed
    proc = subprocess.run(
        [sys.executable, "-m", "gpulint", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout == f"gpulint {installed}\n"
    release = newest_release()
    assert installed == release or ".dev" in installed or "+" in installed, (
        f"installed {installed}: neither the release {release} nor a development version"
    )


# -- the release check on temporary repositories ---------------------------------------------
def _git(cwd: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """This working tree (tracked and new files, what `git add -A` would commit), committed
    in a fresh repository with no tag."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("git and a git checkout are needed")
    base = tmp_path_factory.mktemp("release") / "base"
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, base / name)
    _git(base, "init", "--quiet")
    _git(base, "add", "-A")
    _git(base, "commit", "--quiet", "-m", "the tree")
    return base


@pytest.fixture
def clone(tree, tmp_path) -> Path:
    path = tmp_path / "gpulint"
    _git(tmp_path, "clone", "--quiet", str(tree), str(path))
    return path


def release_check(repo: Path, *flags: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, str(RELEASE), "--repo", str(repo), *flags],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_release_check_refuses_an_untagged_head(clone):
    code, out = release_check(clone, "--preflight-only")
    assert code == 1 and "HEAD carries no v* tag" in out, out


def test_release_check_accepts_the_changelogs_version_tagged(clone):
    release = newest_release()
    _git(clone, "tag", "-a", f"v{release}", "-m", f"gpulint {release}")
    code, out = release_check(clone, "--preflight-only")
    assert code == 0, out
    assert f"v{release}: version {release}" in out


def test_release_check_refuses_a_tag_the_changelog_does_not_have(clone):
    major, minor, patch = newest_release().split(".")[:3]
    bumped = int(re.match(r"\d+", patch).group()) + 1  # type: ignore[union-attr]
    tag = f"v{major}.{minor}.{bumped}"
    _git(clone, "tag", "-a", tag, "-m", "a release nobody wrote up")
    code, out = release_check(clone, "--preflight-only")
    assert code == 1 and "the changelog's newest release is" in out, out


def test_release_check_refuses_docs_pinned_to_another_tag(clone):
    release = newest_release()
    readme = clone / "README.md"
    readme.write_text(
        readme.read_text(encoding="utf-8").replace(f"gpulint@v{release}", "gpulint@v0.0.9"),
        encoding="utf-8",
    )
    _git(clone, "commit", "--quiet", "-am", "pin an old release")
    _git(clone, "tag", "-a", f"v{release}", "-m", f"gpulint {release}")
    code, out = release_check(clone, "--preflight-only")
    assert code == 1 and "the docs pin other refs than" in out and "v0.0.9" in out, out


def test_release_check_refuses_a_lightweight_tag_and_a_dirty_tree(clone):
    release = newest_release()
    _git(clone, "tag", f"v{release}")
    code, out = release_check(clone, "--preflight-only")
    assert code == 1 and "lightweight" in out, out
    _git(clone, "tag", "-d", f"v{release}")
    _git(clone, "tag", "-a", f"v{release}", "-m", f"gpulint {release}")
    (clone / "CHANGELOG.md").write_text("edited after the tag\n", encoding="utf-8")
    code, out = release_check(clone, "--preflight-only")
    assert code == 1 and "not committed at" in out, out


@pytest.mark.slow
def test_the_release_builds_installs_and_runs(clone):
    """The whole check on this tree tagged: sdist and wheel (no deprecation warning, twine
    check), the wheel and the git URL at the tag in fresh environments, `gpulint check
    examples/`, pre-commit try-repo at the tag, the Action's steps from a git archive."""
    release = newest_release()
    _git(clone, "tag", "-a", f"v{release}", "-m", f"gpulint {release}")
    code, out = release_check(clone)
    assert code == 0, out[-4000:]
    assert f"release check: v{release} ({release}) passed" in out
