"""Applying autofixes without ever writing wrong code, changing a file's encoding, or replacing
the file the user has.

A fix is accepted only when the fixed text parses (with `ast`, and round-trips through libcst),
tokenizes the same outside the edited spans (an insertion cannot merge into a neighbouring token
or land inside a string), and re-lints without the finding it fixed and with no new finding. When
the fixes of a file together fail that check, each is tried on its own and the good ones are kept.

Writes decode and encode with the file's own encoding (BOM or PEP 263 cookie) and refuse a file
whose bytes would not come back identical. The file is written in place through the descriptor
whose contents were checked, so its inode, owner, mode and hard links stay; a symbolic link is
followed only to a regular file inside the checked tree; files the user cannot write, or that
are read-only, are left alone. No temporary file is created, so nothing is left behind.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
import io
import os
import signal
import stat
import tokenize
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpulint.diagnostics import Edit, Finding, Fix
from gpulint.frontends import ParseError, decode
from gpulint.frontends.python.edits import tokenizer_line_starts

MAX_PASSES = 4  # fixes iterate to a fixed point; a few passes at most

Relint = Callable[[bytes], list[Finding]]


@dataclass
class FixOutcome:
    path: Path
    applied: int = 0
    new_text: str | None = None
    old_text: str | None = None
    error: str | None = None
    refused: list[tuple[Fix, str]] = field(default_factory=list)  # fixes left out, and why


def apply_edits(text: str, edits: list[Edit]) -> tuple[str, int]:
    """Apply non-overlapping edits (later ones that overlap are skipped). Returns (text, count)."""
    chosen = _non_overlapping(edits)
    out = text
    for edit in reversed(chosen):
        out = out[: edit.start] + edit.text + out[edit.end :]
    return out, len(chosen)


def _non_overlapping(edits: list[Edit]) -> list[Edit]:
    chosen: list[Edit] = []
    for edit in sorted(set(edits)):
        if chosen:
            prev = chosen[-1]
            overlaps = edit.start < prev.end
            same_insertion_point = edit.start == edit.end == prev.start == prev.end
            if overlaps or same_insertion_point:
                continue  # left for the next pass, which sees the file as fixed so far
        chosen.append(edit)
    return chosen


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


# -- encodings ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Encoding:
    """How a file's text becomes its bytes again: the BOM it starts with and the codec."""

    bom: bytes
    codec: str

    def encode(self, text: str) -> bytes:
        return self.bom + text.encode(self.codec)


_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def file_encoding(data: bytes) -> Encoding:
    """The encoding `decode` reads `data` with, as something that writes it back."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return Encoding(bom, codec)
    try:
        name, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        raise ParseError(f"cannot decode: {e}") from None
    return Encoding(b"", "utf-8" if name == "utf-8-sig" else name)


def decode_for_rewrite(data: bytes) -> tuple[str, Encoding]:
    """The text rules saw, and how to write it back; ParseError when the file's bytes would
    not come back identical (then no fix may touch it)."""
    text = decode(data)
    encoding = file_encoding(data)
    try:
        same = encoding.encode(text) == data
    except (UnicodeError, LookupError):
        same = False
    if not same:
        raise ParseError(f"its {encoding.codec} bytes would not be written back identically")
    return text, encoding


# -- verification ------------------------------------------------------------------------------
def _tokens(text: str) -> list[tuple[int, str, int]] | None:
    """(type, string, start offset) of each token with text, or None when it does not tokenize."""
    starts = tokenizer_line_starts(text)
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.string and tok.type not in (tokenize.DEDENT, tokenize.ENDMARKER):
                out.append((tok.type, tok.string, starts[tok.start[0] - 1] + tok.start[1]))
    except (tokenize.TokenError, SyntaxError):
        return None
    return out


def tokens_kept_outside(old: str, new: str, edits: list[Edit]) -> str | None:
    """None when every token of `old` that no edit touches is in `new`, unchanged, where the
    edits moved it; otherwise what changed. Catches an insertion that glues onto a neighbouring
    token or lands inside a string or comment, which parsing alone would not."""
    if not edits:
        return None
    old_tokens, new_tokens = _tokens(old), _tokens(new)
    if old_tokens is None or new_tokens is None:
        return "the fixed file does not tokenize"
    present = set(new_tokens)
    ordered = sorted(edits)
    for kind, string, start in old_tokens:
        end = start + len(string)
        shift = 0
        for e in ordered:
            if e.start == e.end and start < e.start < end:
                line = old.count("\n", 0, start) + 1
                return f"the fix would insert into `{string}` on line {line}"
            if e.end <= start:
                shift += len(e.text) - (e.end - e.start)
            elif e.start < end and start < e.end:
                break  # a replacement covers this token: it is the edit's own
        else:
            if (kind, string, start + shift) not in present:
                line = old.count("\n", 0, start) + 1
                return f"the fix would change `{string}` on line {line}, outside its own edit"
    return None


def _verify(
    old: str,
    new: str,
    edits: list[Edit],
    filename: str,
    relint: Relint | None,
    encoding: Encoding,
    before: Counter | None,
    fixed: Counter,
) -> str | None:
    problem = still_parses(new, filename)
    if problem:
        return problem
    if filename.endswith((".py", ".pyi")):
        problem = tokens_kept_outside(old, new, edits)
        if problem:
            return problem
    if relint is not None and before is not None:
        try:
            data = encoding.encode(new)
        except UnicodeError:
            return f"the fixed text cannot be written as {encoding.codec}"
        after = Counter(f.code for f in relint(data))
        for code, count in after.items():
            if count > before[code] - fixed[code]:
                what = "is still reported" if fixed[code] else "would be a new finding"
                return f"after the fix, {code} {what}"
    return None


def choose_fixes(
    text: str,
    findings: list[Finding],
    filename: str,
    relint: Relint | None = None,
    encoding: Encoding | None = None,
) -> tuple[str, int, list[tuple[Fix, str]]]:
    """The fixed text, how many fixes went in, and the fixes left out with the reason. All
    fixes together when they pass; else each one on its own, in order, kept when it passes."""
    encoding = encoding or Encoding(b"", "utf-8")
    if filename.lower().endswith(".ipynb"):
        return choose_notebook_fixes(text, findings, relint, encoding)
    fixable = [(f, fix) for f in findings if (fix := f.fix) and fix.edits]
    if not fixable:
        return text, 0, []
    before = Counter(f.code for f in findings) if relint is not None else None

    def attempt(chosen: list[tuple[Finding, Fix]]) -> tuple[str, str | None]:
        edits = [e for _, fix in chosen for e in fix.edits]
        if len(_non_overlapping(edits)) != len(set(edits)):
            return text, "its edits overlap another fix's; left for the next pass"
        new, _ = apply_edits(text, edits)
        fixed = Counter(f.code for f, _ in chosen)
        return new, _verify(text, new, edits, filename, relint, encoding, before, fixed)

    new, problem = attempt(fixable)
    if problem is None:
        return new, len(fixable), []
    if len(fixable) == 1:
        return text, 0, [(fixable[0][1], problem)]
    return _one_at_a_time(text, fixable, attempt, [])


def choose_notebook_fixes(
    text: str, findings: list[Finding], relint: Relint | None, encoding: Encoding
) -> tuple[str, int, list[tuple[Fix, str]]]:
    """`choose_fixes` for a notebook's text (its JSON): each fix's edits (offsets into its
    cell's source, `Finding.cell`) go into that cell's source only, and the notebook is written
    back with nothing else changed (`Notebook.with_sources`). The checks are the Python ones,
    on the joined code cells: they parse, keep every token outside the edits, and re-lint (the
    whole notebook) without the finding fixed and with no new one."""
    from gpulint.frontends.notebook import Notebook

    try:
        nb = Notebook.from_text(text)
    except ParseError as e:
        fixes = [f.fix for f in findings if f.fix and f.fix.edits]
        return text, 0, [(fix, f"not fixed: {e}") for fix in fixes]
    fixable = [(f, fix) for f in findings if (fix := f.fix) and fix.edits]
    if not fixable:
        return text, 0, []
    before = Counter(f.code for f in findings) if relint is not None else None
    refused: list[tuple[Fix, str]] = []
    usable = []
    for f, fix in fixable:
        cell = nb.cell(f.cell) if f.cell is not None and 1 <= f.cell <= len(nb.cells) else None
        if cell is None or cell.analysed is None:
            refused.append((fix, "the fix names no code cell of this notebook"))
        elif any(not 0 <= e.start <= e.end <= len(cell.source) for e in fix.edits):
            refused.append((fix, "the fix lies outside its cell"))
        else:
            usable.append((f, fix))

    def attempt(chosen: list[tuple[Finding, Fix]]) -> tuple[str, str | None]:
        by_cell: dict[int, list[Edit]] = {}
        joined: list[Edit] = []
        for f, fix in chosen:
            assert f.cell is not None
            by_cell.setdefault(f.cell, []).extend(fix.edits)
            cell = nb.cell(f.cell)
            joined += [
                Edit(nb.joined_offset(cell, e.start), nb.joined_offset(cell, e.end), e.text)
                for e in fix.edits
            ]
        if any(len(_non_overlapping(es)) != len(set(es)) for es in by_cell.values()):
            return text, "its edits overlap another fix's; left for the next pass"
        sources = {n: apply_edits(nb.cell(n).source, es)[0] for n, es in by_cell.items()}
        new = nb.with_sources(sources)
        try:
            fixed_nb = Notebook.from_text(new)
        except ParseError as e:  # pragma: no cover - with_sources writes valid JSON
            return text, f"the fixed notebook does not read back: {e}"
        if [c.source for c in fixed_nb.cells] != [
            sources.get(c.number, c.source) for c in nb.cells
        ]:
            return text, "the fixed notebook's cells do not read back as written"
        fixed = Counter(f.code for f, _ in chosen)

        def relint_notebook(_data: bytes) -> list[Finding]:
            assert relint is not None
            return relint(encoding.encode(new))

        problem = _verify(
            nb.source,
            fixed_nb.source,
            joined,
            "cells.py",
            relint_notebook if relint is not None else None,
            encoding,
            before,
            fixed,
        )
        return new, problem

    if not usable:
        return text, 0, refused
    new, problem = attempt(usable)
    if problem is None:
        return new, len(usable), refused
    return _one_at_a_time(text, usable, attempt, refused)


def _one_at_a_time(
    text: str,
    fixes: list[tuple[Finding, Fix]],
    attempt: Callable[[list[tuple[Finding, Fix]]], tuple[str, str | None]],
    refused: list[tuple[Fix, str]],
) -> tuple[str, int, list[tuple[Fix, str]]]:
    """When the fixes together fail their check: take them one at a time, keeping each that
    still passes with those kept before it, refusing the rest with its problem."""
    accepted: list[tuple[Finding, Fix]] = []
    result = text
    for finding, fix in fixes:
        candidate, problem = attempt([*accepted, (finding, fix)])
        if problem is None:
            accepted.append((finding, fix))
            result = candidate
        else:
            refused.append((fix, problem))
    return result, len(accepted), refused


# -- writing -----------------------------------------------------------------------------------
def writable_target(path: Path, root: Path | None) -> tuple[Path | None, str | None]:
    """The regular file a fix may write for `path`, or why none: a symbolic link is followed only
    to a regular file inside `root`; files the user cannot write, or marks read-only, are not."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return None, f"cannot read: {e.strerror}"
    target = path
    if stat.S_ISLNK(st.st_mode):
        resolved = Path(os.path.realpath(path))
        inside = root is None or resolved.is_relative_to(Path(os.path.realpath(root)))
        if not inside:
            return None, "symbolic link to a file outside the checked tree; not fixed"
        try:
            st = os.stat(resolved)
        except OSError as e:
            return None, f"cannot read: {e.strerror}"
        target = resolved
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file; not fixed"
    if not st.st_mode & 0o222:
        return None, "read-only file; not fixed"
    if not os.access(target, os.W_OK):
        return None, "you cannot write this file; not fixed"
    return target, None


def _write_in_place(fd: int, data: bytes) -> None:
    """Overwrite the open file with `data`: one write and a truncate, with Ctrl-C and SIGTERM
    held back until both are done, so the file is never left half old and half new."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def fix_file(
    path: Path,
    findings: list[Finding],
    expected_digest: str,
    write: bool,
    relint: Relint | None = None,
    root: Path | None = None,
) -> FixOutcome:
    """Fix one file: `findings` are what was reported for the bytes with `expected_digest`;
    `relint` lints candidate bytes (to prove a fix removes its finding and adds none)."""
    outcome = FixOutcome(path)
    if not any(f.fix and f.fix.edits for f in findings):
        return outcome
    target, why = writable_target(path, root) if write else (path, None)
    if target is None:
        outcome.error = why
        return outcome
    flags = os.O_RDONLY
    if write:  # no link may be swapped in between the checks above and the open
        flags = os.O_RDWR | (getattr(os, "O_NOFOLLOW", 0) if target == path else 0)
    try:
        fd = os.open(target, flags)
    except OSError as e:
        outcome.error = f"cannot {'write' if write else 'read'}: {e.strerror}"
        return outcome
    try:
        with os.fdopen(fd, "r+b" if write else "rb", buffering=0, closefd=False) as handle:
            data = handle.read()
        if hashlib.sha256(data).hexdigest() != expected_digest:
            outcome.error = "file changed on disk since it was checked; not fixed"
            return outcome
        try:
            text, encoding = decode_for_rewrite(data)
        except ParseError as e:
            outcome.error = f"not fixed: {e}"
            return outcome
        new_text, count, refused = choose_fixes(text, findings, path.name, relint, encoding)
        outcome.refused = refused
        if not count:
            outcome.error = f"fix not applied: {refused[0][1]}" if refused else None
            return outcome
        outcome.old_text, outcome.new_text, outcome.applied = text, new_text, count
        if write and new_text != text:
            new_data = encoding.encode(new_text)
            # Last check, through the same descriptor: someone may have saved the file meanwhile.
            if hashlib.sha256(os.pread(fd, len(data) + 1, 0)).hexdigest() != expected_digest:
                outcome.error = "file changed on disk while fixing; not fixed"
                outcome.applied = 0
                return outcome
            _write_in_place(fd, new_data)
    except OSError as e:
        outcome.error = f"cannot write: {e.strerror or e}"
        outcome.applied = 0
    finally:
        os.close(fd)
    return outcome


def fix_until_stable(
    path: Path,
    findings: list[Finding],
    digest: str,
    write: bool,
    lint: Relint,
    root: Path | None = None,
) -> FixOutcome:
    """Fix, re-lint, fix again until nothing fixable is left or nothing changes (at most
    MAX_PASSES). Without `write`, the passes run in memory and the outcome holds the final text."""
    first = fix_file(path, findings, digest, write, lint, root)
    if not first.applied or first.new_text is None:
        return first
    total, text = first.applied, first.new_text
    encoding = None
    for _ in range(MAX_PASSES - 1):
        if write:
            try:
                data = Path(os.path.realpath(path)).read_bytes()
            except OSError:
                break
            again_findings = lint(data)
            outcome = fix_file(
                path, again_findings, hashlib.sha256(data).hexdigest(), True, lint, root
            )
            if not outcome.applied or outcome.new_text is None:
                break
            total, text = total + outcome.applied, outcome.new_text
        else:
            if encoding is None:
                _, encoding = decode_for_rewrite(Path(path).read_bytes())
            again_findings = lint(encoding.encode(text))
            new, count, _ = choose_fixes(text, again_findings, path.name, lint, encoding)
            if not count or new == text:
                break
            total, text = total + count, new
    first.applied, first.new_text = total, text
    return first


def unified_diff(outcome: FixOutcome, shown: str) -> str:
    if outcome.new_text is None or outcome.old_text is None:
        return ""
    if shown.lower().endswith(".ipynb"):
        cells = _notebook_diff(outcome.old_text, outcome.new_text, shown)
        if cells is not None:
            return cells
    return "".join(
        difflib.unified_diff(
            outcome.old_text.splitlines(keepends=True),
            outcome.new_text.splitlines(keepends=True),
            fromfile=f"a/{shown}",
            tofile=f"b/{shown}",
        )
    )


def _notebook_diff(old: str, new: str, shown: str) -> str | None:
    """A notebook's diff cell by cell, as ruff shows it (`a/nb.ipynb:cell 3`): the sources
    that changed, not the JSON around them. None when either side does not read."""
    from gpulint.frontends.notebook import Notebook

    try:
        before, after = Notebook.from_text(old), Notebook.from_text(new)
    except ParseError:
        return None
    if len(before.cells) != len(after.cells):
        return None
    out: list[str] = []
    for a, b in zip(before.cells, after.cells, strict=True):
        if a.source == b.source:
            continue
        old_lines = a.source.splitlines(keepends=True)
        new_lines = b.source.splitlines(keepends=True)
        for lines in (old_lines, new_lines):
            if lines and not lines[-1].endswith(("\n", "\r")):
                lines[-1] += "\n\\ No newline at end of cell\n"
        out.extend(
            difflib.unified_diff(
                old_lines,
                new_lines,
                fromfile=f"a/{shown}:cell {a.number}",
                tofile=f"b/{shown}:cell {b.number}",
            )
        )
    return "".join(out)
