"""What a run hands its reporters: one `FileResult` per file, gathered in a `Report`. Below the
engine (which makes them), the process pool and the cache (which carry and store them) and the
commands (which print them), so that none of those imports another for them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulint.diagnostics import INTERNAL_ERROR, NOTE_CODES, VENDORED, Finding
from gpulint.pathutil import below


@dataclass
class FileResult:
    path: str  # as displayed
    findings: list[Finding]
    digest: str = ""  # sha256 of the bytes that were linted
    parsed: bool = False
    cached: bool = False
    # Other files of the tree whose function summaries the findings used (relpath -> sha256):
    # the cache serves these findings only while all of them are unchanged.
    deps: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] | None = (
        None  # evidence path -> stamp the findings cite (gpulint.cache)
    )


@dataclass
class Report:
    results: list[FileResult] = field(default_factory=list)
    # Internal errors (GPU001) of the run rather than of one file's rules: a project index
    # that failed to build (its files were then judged alone).
    errors: list[Finding] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        """What the files' rules found, without the notes on the analysis (NOTE_CODES)."""
        out = [f for r in self.results for f in r.findings if f.code not in NOTE_CODES]
        return sorted(out, key=Finding.sort_key)

    @property
    def notes(self) -> list[Finding]:
        """Per-file notes on the analysis (GPU800: lines not analysed); never findings."""
        out = [f for r in self.results for f in r.findings if f.code in NOTE_CODES]
        return sorted(out + self.errors, key=Finding.sort_key)

    @property
    def internal_errors(self) -> list[Finding]:
        """GPU001: where gpulint itself failed (a rule or a front-end raised). Any of them makes
        the exit status 2."""
        return [f for f in self.notes if f.code == INTERNAL_ERROR]

    @property
    def files_checked(self) -> int:
        """Files linted: those left alone as vendored copies (GPU002) are not."""
        return sum(1 for r in self.results if not (r.findings and r.findings[0].code == VENDORED))


def display_path(path: Path) -> str:
    """Relative to the working directory when below it, as flake8 and ruff print paths.
    Symbolic links are not resolved: a finding names the path the user has."""
    rel = below(os.path.abspath(path), os.getcwd())
    if rel is not None:
        return rel
    return path.as_posix() if isinstance(path, Path) else Path(path).as_posix()
