"""GitHub Actions workflow commands: `::warning file=...,line=...,col=...,title=...::message`.

GitHub places an annotation by its path relative to the repository root, whichever directory
the step ran in; paths outside the repository stay as they were."""

from __future__ import annotations

import os
from pathlib import Path

from gpulint.diagnostics import Finding, Severity
from gpulint.safeio import escape

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(s: str) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return escape(s)  # the other control characters, visibly


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def repository_path(path: str, base: Path) -> str:
    absolute = Path(os.path.abspath(path))
    for candidate in (absolute, Path(os.path.realpath(absolute))):  # never raises on a loop
        try:
            return candidate.relative_to(base).as_posix()
        except ValueError:
            continue
    return path


def render(findings: list[Finding], *, root: Path | None = None, **_: object) -> str:
    from gpulint.reporters.sarif import source_root

    base = source_root(root or Path.cwd())
    out = []
    for f in findings:
        path = repository_path(f.path, base)
        props = f"file={_escape_property(path)},line={f.line},col={f.col}"
        if f.end_line:
            props += f",endLine={f.end_line}"
        if f.end_col and f.end_line == f.line:
            props += f",endColumn={f.end_col}"
        props += f",title={_escape_property(f.code)}"
        # A notebook's line counts within its cell (as every format's): the cell is named.
        cell = "" if f.cell is None else f"cell {f.cell}: "
        out.append(
            f"::{_COMMAND[f.severity]} {props}::{_escape_data(f'{cell}{f.code} {f.message}')}"
        )
    return "\n".join(out) + ("\n" if out else "")
