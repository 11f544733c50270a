"""GitLab Code Quality: a JSON array of issues (description, check_name, fingerprint, severity,
location.path relative to the repository, location.lines.begin), as GitLab's merge request
widget reads it (`artifacts: reports: codequality`)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from gpulint.diagnostics import Finding, Severity
from gpulint.reporters.github import repository_path

# GitLab's scale: info, minor, major, critical, blocker.
_SEVERITY = {Severity.ERROR: "critical", Severity.WARNING: "major", Severity.INFO: "info"}


def render(findings: list[Finding], *, root: Path | None = None, read_text=None, **_) -> str:
    from gpulint.reporters.sarif import source_root

    base = source_root(root or Path.cwd())
    seen: Counter = Counter()
    issues = []
    from gpulint.reporters import finding_source

    texts: dict = {}
    for f in findings:
        path = repository_path(f.path, base)
        if f.cell is None:
            text = read_text(f.path) if read_text else None
            count = text.count("\n") + 1 if text else 0
            line_text = text.splitlines()[f.line - 1] if text and f.line <= count else ""
        else:  # a notebook: the line of the cell
            src = finding_source(read_text, f.path, f.cell, texts)
            line_text = src.line_text(f.line) if src else ""
        # Stable when unrelated lines move: the file, the code, the line's own text, and which
        # of identical lines it is.
        key: tuple[str, ...] = (path, f.code, " ".join(line_text.split()))
        if f.cell is not None:
            key = (*key, f"cell {f.cell}")
        seen[key] += 1
        fingerprint = hashlib.md5(
            "\0".join([*key, str(seen[key])]).encode("utf-8", "surrogatepass"),
            usedforsecurity=False,
        ).hexdigest()
        issues.append(
            {
                "description": f"{'' if f.cell is None else f'cell {f.cell}: '}{f.code} {f.message}",
                "check_name": f.code,
                "fingerprint": fingerprint,
                "severity": _SEVERITY[f.severity],
                "location": {
                    "path": path,
                    "lines": {"begin": f.line, "end": f.end_line or f.line},
                },
            }
        )
    return json.dumps(issues, indent=2) + "\n"
