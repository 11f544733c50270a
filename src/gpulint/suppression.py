"""`noqa` comments, as flake8 reads them: `# noqa`, `# noqa: GPU101`, `# noqa: GPU1` (prefix).

C/C++/CUDA use `// noqa: GPU802`, Markdown `<!-- noqa: GPU910 -->`, shell/YAML `# noqa: ...`.
As in flake8, a `noqa:` whose list holds no code with digits (`# noqa: GPU`) is a blanket noqa.
"""

from __future__ import annotations

import re

_NOQA = re.compile(
    r"(?:#|//|<!--)\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?",
    re.IGNORECASE,
)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


def noqa_codes(line: str) -> frozenset[str] | None:
    """None: no noqa on this line. Empty set: blanket noqa. Otherwise the listed codes."""
    if "noqa" not in line.lower():
        return None
    m = _NOQA.search(line)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return frozenset()
    return frozenset(c.upper() for c in _CODE.findall(codes))


def is_suppressed(code: str, noqa: frozenset[str] | None) -> bool:
    if noqa is None:
        return False
    if not noqa:
        return True
    return any(code.startswith(c) for c in noqa)
