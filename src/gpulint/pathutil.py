"""Path arithmetic on strings, for the per-file work of a run (a warm run over thousands of
files is mostly this): `pathlib` parses every path it builds, which costs more than the work."""

from __future__ import annotations

import os
from pathlib import Path


def below(path: str, base: str) -> str | None:
    """`path` relative to `base` (both absolute and normalised, as `os.path.abspath` gives
    them), as `Path(path).relative_to(base).as_posix()` would say ("." for `base` itself), or
    None where `path` is not below `base`."""
    if path == base:
        return "."
    if path.startswith("//") or base.startswith("//"):  # POSIX's implementation-defined root
        try:
            return Path(path).relative_to(base).as_posix()
        except ValueError:
            return None
    prefix = base if base.endswith("/") else base + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def repository_root(start: Path) -> Path | None:
    """The folder holding `.git` (a folder, or a file in a worktree) at or above `start`."""
    start = Path(os.path.abspath(start))
    for directory in (start, *start.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None
