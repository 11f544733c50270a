"""Applying autofixes without ever breaking or half-writing a file.

Edits from all fixable findings of a file are applied together (overlapping ones are left for a
later run); the result must still parse, with `ast` and by round-tripping through libcst, or
nothing is written. Writes go to a temp file in the same directory, keep the file's mode, and
replace the original atomically, and only if the file on disk is still the one that was linted.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpulint.diagnostics import Edit, Finding
from gpulint.frontends import ParseError, decode


@dataclass
class FixOutcome:
    path: Path
    applied: int = 0
    new_text: str | None = None
    old_text: str | None = None
    error: str | None = None


def apply_edits(text: str, edits: list[Edit]) -> tuple[str, int]:
    """Apply non-overlapping edits (later ones that overlap are skipped). Returns (text, count)."""
    chosen: list[Edit] = []
    for edit in sorted(set(edits)):
        if chosen:
            prev = chosen[-1]
            overlaps = edit.start < prev.end
            same_insertion_point = edit.start == edit.end == prev.start == prev.end
            if overlaps or same_insertion_point:
                continue  # left for the next run, which sees the file as fixed so far
        chosen.append(edit)
    out = text
    for edit in reversed(chosen):
        out = out[: edit.start] + edit.text + out[edit.end :]
    return out, len(chosen)


def still_parses(text: str, filename: str) -> str | None:
    """None when `text` is valid Python for both ast and libcst; otherwise why not."""
    if not filename.endswith((".py", ".pyi")):
        return None
    from gpulint.frontends.python import parse_python

    try:
        parse_python(text, filename)
    except ParseError as e:
        return str(e)
    try:
        import libcst

        if libcst.parse_module(text).code != text:
            return "libcst does not round-trip the fixed file"
    except Exception as e:  # libcst raises its own ParserSyntaxError and friends
        return f"libcst cannot parse the fixed file: {type(e).__name__}"
    return None


def fix_file(path: Path, findings: list[Finding], expected_digest: str, write: bool) -> FixOutcome:
    outcome = FixOutcome(path)
    edits = [e for f in findings if f.fix for e in f.fix.edits]
    if not edits:
        return outcome
    try:
        data = path.read_bytes()
    except OSError as e:
        outcome.error = f"cannot read: {e.strerror}"
        return outcome
    if hashlib.sha256(data).hexdigest() != expected_digest:
        outcome.error = "file changed on disk since it was checked; not fixed"
        return outcome
    try:
        text = decode(data)
    except ParseError as e:
        outcome.error = str(e)
        return outcome
    new_text, count = apply_edits(text, edits)
    problem = still_parses(new_text, path.name)
    if problem:
        outcome.error = f"fix not applied: {problem}"
        return outcome
    outcome.old_text, outcome.new_text, outcome.applied = text, new_text, count
    if write and new_text != text:
        encoding = "utf-8"
        if data.startswith(b"\xef\xbb\xbf"):
            encoding = "utf-8-sig"
        try:
            _atomic_write(path, new_text.encode(encoding), expected_digest)
        except OSError as e:
            outcome.error = f"cannot write: {e.strerror or e}"
            outcome.applied = 0
        except RuntimeError as e:
            outcome.error = str(e)
            outcome.applied = 0
    return outcome


def _atomic_write(path: Path, data: bytes, expected_digest: str) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".gpulint-tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        # Last check before the rename: someone may have saved the file meanwhile.
        if hashlib.sha256(path.read_bytes()).hexdigest() != expected_digest:
            raise RuntimeError("file changed on disk while fixing; not fixed")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def unified_diff(outcome: FixOutcome, shown: str) -> str:
    if outcome.new_text is None or outcome.old_text is None:
        return ""
    return "".join(
        difflib.unified_diff(
            outcome.old_text.splitlines(keepends=True),
            outcome.new_text.splitlines(keepends=True),
            fromfile=f"a/{shown}",
            tofile=f"b/{shown}",
        )
    )
