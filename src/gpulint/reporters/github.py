"""GitHub Actions workflow commands: `::warning file=...,line=...,col=...,title=...::message`."""

from __future__ import annotations

from gpulint.diagnostics import Finding, Severity
from gpulint.safeio import escape

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(s: str) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return escape(s)  # the other control characters, visibly


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding], **_: object) -> str:
    out = []
    for f in findings:
        props = f"file={_escape_property(f.path)},line={f.line},col={f.col}"
        if f.end_line:
            props += f",endLine={f.end_line}"
        if f.end_col and f.end_line == f.line:
            props += f",endColumn={f.end_col}"
        props += f",title={_escape_property(f.code)}"
        out.append(f"::{_COMMAND[f.severity]} {props}::{_escape_data(f'{f.code} {f.message}')}")
    return "\n".join(out) + ("\n" if out else "")
