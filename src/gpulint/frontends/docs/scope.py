"""Whose claims a document makes: the project's own (a README, a results or benchmark
page) or someone else's (a changelog, a blog post, a vendored copy), and where its evidence
references are resolved from."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path, PurePosixPath

from gpulint.claims import EvidenceContext
from gpulint.settings import Settings
from gpulint.source import VENDORED_DIRS

CHANGELOG = re.compile(
    r"^(changelog|changes|history|news|release[-_ ]?notes?|releases?)(?![a-z])", re.IGNORECASE
)

# Which documents claims are judged in by default: the project's own result documents. Other
# documents (blog posts, news, changelogs, vendored copies of other projects) are opted in with
# `[tool.gpulint.claims] include = [globs]`; docstrings with `docstrings = true`.
_OWN_DIRS = {
    "docs",
    "doc",
    "documentation",
    "benchmark",
    "benchmarks",
    "bench",
    "results",
    "perf",
    "performance",
}
_OWN_NAME = re.compile(r"^readme|results?|benchmark|perf|leaderboard", re.IGNORECASE)
_OTHER_DIRS = {
    "blog",
    "blogs",
    "news",
    "posts",
    "_posts",
    "changelog",
    "changelogs",
    "releases",
    "release-notes",
    "release_notes",
    "history",
    *VENDORED_DIRS,
}
_OTHER_NAME = re.compile(r"^(blog|news|posts?)(?![a-z])", re.IGNORECASE)


def claims_scope(display_path: str, settings: Settings | None) -> bool:
    """Whether claims in this document are judged (the project's own result documents), or only
    its evidence references are checked."""
    rel = _relative(display_path, settings)
    include = settings.option("claims", "include", []) if settings is not None else []
    if any(fnmatch.fnmatch(rel, g) or PurePosixPath(rel).match(g) for g in include):
        return True
    parts = rel.lower().split("/")
    name, folders = parts[-1], parts[:-1]
    if CHANGELOG.match(name) or _OTHER_NAME.match(name) or any(p in _OTHER_DIRS for p in folders):
        return False
    return bool(_OWN_NAME.match(name) or _OWN_NAME.search(name.rsplit(".", 1)[0])) or any(
        p in _OWN_DIRS for p in folders
    )


def _relative(display_path: str, settings: Settings | None) -> str:
    path = display_path.replace("\\", "/")
    root = settings.option("config", "root") if settings is not None else None
    if root:
        try:
            return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
        except (ValueError, OSError):
            pass
    return path.lstrip("./") if path.startswith("./") else path


def evidence_context(display_path: str, settings: Settings | None) -> EvidenceContext:
    root = settings.option("config", "root") if settings is not None else None
    doc_dir = Path(display_path).parent
    return EvidenceContext(doc_dir=doc_dir, root=Path(root) if root else None)
