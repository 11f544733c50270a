from __future__ import annotations

import json
from collections.abc import Sequence

from gpulint import __version__
from gpulint.diagnostics import Finding, note_level


def render(
    findings: list[Finding], *, files_checked: int, notes: Sequence[Finding] = (), **_: object
) -> str:
    """`notes` (per-file notes on the analysis, GPU800, level note; internal errors, GPU001,
    level error) go to `diagnostics`, not `findings`."""
    payload = {
        "tool": "gpulint",
        "version": __version__,
        "files_checked": files_checked,
        "findings": [f.to_dict() for f in findings],
        "diagnostics": [_note(f) for f in notes],
    }
    return json.dumps(payload, indent=2) + "\n"


def _note(f: Finding) -> dict:
    out = {
        "path": f.path,
        "line": f.line,
        "col": f.col,
        "code": f.code,
        "level": note_level(f),
        "message": f.message,
    }
    if f.cell is not None:
        out["cell"] = f.cell
    return out
