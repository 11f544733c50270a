from __future__ import annotations

from gpulint.diagnostics import Finding
from gpulint.safeio import escape


def render(findings: list[Finding], *, files_checked: int, **_: object) -> str:
    # One finding per line, whatever a file name or an analysed file holds (escape sequences,
    # newlines): printed escaped.
    lines = [f"{escape(f.path)}:{f.line}:{f.col}: {f.code} {escape(f.message)}" for f in findings]
    fixable = sum(1 for f in findings if f.fix)
    files = len({f.path for f in findings})
    if findings:
        summary = f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''}"
        summary += f" in {files} file{'s' if files != 1 else ''}"
        summary += f" ({files_checked} checked)."
        if fixable:
            summary += f" {fixable} fixable with `gpulint check --fix`."
    else:
        summary = (
            f"All checks passed ({files_checked} file{'s' if files_checked != 1 else ''} checked)."
        )
    return "\n".join([*lines, summary]) + "\n"
