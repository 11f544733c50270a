"""`noqa` comments, as flake8 reads them: `# noqa`, `# noqa: GPU101`, `# noqa: GPU1` (prefix).

C/C++/CUDA use `// noqa: GPU802`, Markdown `<!-- noqa: GPU910 -->`, shell/YAML `# noqa: ...`.
As in flake8, a `noqa:` whose list holds no code with digits (`# noqa: GPU`) is a blanket noqa.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class NoqaComment:
    """One `noqa` comment where it is written, as a front-end finds it (`noqa_comments`): what
    an unused-suppression check reports, and what its fix rewrites. Offsets are character
    offsets into the decoded file, as an `Edit`'s."""

    line: int  # 1-based line it is written on
    col: int  # 1-based column of its opening
    opening: str  # `#`, `//` or `<!--`
    start: int  # offset of its opening
    end: int  # offset just after its last code (after `noqa` for a blanket one)
    codes: tuple[tuple[str, int, int], ...]  # (code as written, start, end); () for a blanket one
    covers: tuple[int, ...]  # the lines whose findings it suppresses (its own, or a range)
    padding: int  # blanks just before the opening
    rest: str  # the line's text after it (a closing ` -->` included)
    closing: str = ""  # the ` -->` that closes it in Markdown, when it follows the codes
    shared: bool = False  # other tools read this comment too (flake8 and ruff in Python)

    @property
    def listed(self) -> tuple[str, ...]:
        """Its codes, upper-cased (as suppression compares them)."""
        return tuple(code.upper() for code, _, _ in self.codes)


@dataclass(frozen=True)
class NoqaUse:
    """A `noqa` comment after suppression: which of its codes suppressed a finding in this run
    (`""` for a blanket one that did), and what each listed code is to this run (`kinds`, one
    per code of `comment.listed`): "run" (every gpulint rule it names ran on this file's
    settings), "off" (it names a rule this run did not select, or one that cannot run under
    these settings), "unknown" (a `GPU` code that names no gpulint rule), "other" (another
    tool's code: `E501`)."""

    comment: NoqaComment
    used: frozenset[str]
    kinds: tuple[str, ...]


def find_noqa(line: str, pos: int = 0) -> re.Match[str] | None:
    """The `noqa` comment of one line's text (from column `pos`), as `noqa_codes` reads it."""
    if "noqa" not in line.lower():
        return None
    return _NOQA.search(line, pos)


def opens_comment(line: str, match: re.Match[str], opening: str) -> bool:
    """Whether `match` (from `find_noqa`) is a `noqa` comment of a format whose comments open
    with `opening`, as written to suppress: at the start of the line or after a blank, not
    quoted in the words of another comment (``# `# noqa` here means...``)."""
    start = match.start()
    return match.group(0).startswith(opening) and (start == 0 or line[start - 1].isspace())


def noqa_comment_at(
    line: str,
    number: int,
    line_start: int,
    match: re.Match[str],
    covers: tuple[int, ...] | None = None,
    shared: bool = False,
) -> NoqaComment:
    """The `NoqaComment` for `match` (from `find_noqa`) on `line`, number `number`, which
    starts at offset `line_start` of the file."""
    codes = []
    if match.group("codes"):
        base = line_start + match.start("codes")
        for m in _CODE.finditer(match.group("codes")):
            codes.append((m.group(0), base + m.start(), base + m.end()))
    opening = next(o for o in ("<!--", "//", "#") if match.group(0).startswith(o))
    closing = ""
    if opening == "<!--":
        close = re.match(r"\s*-->", line[match.end() :])
        closing = close.group(0) if close else ""
    before = line[: match.start()]
    return NoqaComment(
        line=number,
        col=match.start() + 1,
        opening=opening,
        start=line_start + match.start(),
        end=line_start + match.end(),
        codes=tuple(codes),
        covers=covers or (number,),
        padding=len(before) - len(before.rstrip()),
        rest=line[match.end() :],
        closing=closing,
        shared=shared,
    )
