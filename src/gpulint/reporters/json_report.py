from __future__ import annotations

import json

from gpulint import __version__
from gpulint.diagnostics import Finding


def render(findings: list[Finding], *, files_checked: int, **_: object) -> str:
    payload = {
        "tool": "gpulint",
        "version": __version__,
        "files_checked": files_checked,
        "findings": [f.to_dict() for f in findings],
    }
    return json.dumps(payload, indent=2) + "\n"
