"""gpulint: static analysis for GPU and deep-learning performance anti-patterns.

`gpulint.__version__` is the installed distribution's version: what setuptools-scm took from the
git tag when it was built (`v0.1.0` -> "0.1.0"), written into gpulint/_version.py beside the
metadata. It is looked up on first use, not at import; the file, not importlib.metadata, which
costs 20 ms or more (every run with a cache asks).
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "version"]

_version: str | None = None


def version() -> str:
    """The version of gpulint that is running: the one its build wrote (gpulint/_version.py),
    else its installed metadata; in a source tree that was never built, what setuptools-scm
    reads from git (if it is there), else "0+unknown"."""
    global _version
    if _version is None:
        _version = _built() or _installed() or _from_git() or "0+unknown"
    return _version


def _built() -> str | None:
    try:
        from gpulint._version import version as built  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(built)


def _installed() -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version("gpulint")
    except PackageNotFoundError:
        return None


def _from_git() -> str | None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / ".git").exists():
        return None
    try:
        from setuptools_scm import get_version
    except ImportError:
        return None
    try:
        return get_version(root=str(root))
    except Exception:  # not a git checkout after all, git missing, no commit: unknown
        return None


def __getattr__(name: str) -> Any:  # Any: mypy reads submodules' attributes through it too
    if name == "__version__":
        return version()
    raise AttributeError(f"module 'gpulint' has no attribute {name!r}")
