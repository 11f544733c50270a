"""The Python front-end (PyTorch training code and Triton kernels).

Analysis runs on the standard library's `ast`: it parses about ten times faster than libcst (see
README, "Architecture"), and rules need positions, names and structure, not formatting. libcst
checks every autofix: a fixed file must round-trip through libcst's parser before it is written.
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Iterable, Sequence

from gpulint.diagnostics import Finding
from gpulint.frontends import MemoKey, ParseError, decode, noqa_by_line, run_rules
from gpulint.frontends.python.file import PythonFile
from gpulint.settings import Settings
from gpulint.suppression import (
    NoqaComment,
    find_noqa,
    noqa_codes,
    noqa_comment_at,
    opens_comment,
)


class PythonFrontend:
    language = "python"
    extensions = (".py", ".pyi")
    strict_encoding = True  # PEP 263: undecodable bytes are an error even where no rule looks

    def parse(self, display_path: str, data: bytes, settings: Settings) -> PythonFile:
        text = decode(data)
        return PythonFile(display_path, text, parse_python(text, display_path))

    def run(self, parsed: PythonFile, rules: Sequence) -> Iterable[Finding]:
        by_type = parsed.nodes_by_type
        return run_rules(parsed, rules, lambda kind: by_type.get(getattr(ast, kind, ast.AST), ()))

    def noqa_lines(self, parsed: PythonFile) -> dict[int, frozenset[str]]:
        out = noqa_by_line(parsed.source)
        if out:
            _spread_over_ranges(parsed, out)
        return out

    def noqa_comments(self, parsed: PythonFile) -> list[NoqaComment]:
        """The `# noqa` comments that are comment tokens (not text in a string), each covering
        its line, or the whole range (`_noqa_ranges`) its line is in, as `noqa_lines` reads it.
        flake8 and ruff read the same comments: `shared`."""
        source = parsed.source
        if "noqa" not in source.text.lower():
            return []
        lines, spans = _noqa_tokens_of(parsed)
        if lines is None:
            return []
        ranges = {}
        for first, last in spans:
            for n in range(first, last + 1):
                ranges[n] = tuple(range(first, last + 1))
        out = []
        for number in sorted(lines):
            line = source.line_text(number)
            match = find_noqa(line, lines[number])
            if match is None or not opens_comment(line, match, "#"):
                continue
            start = source.line_starts[number - 1]
            out.append(noqa_comment_at(line, number, start, match, ranges.get(number), True))
        return out


def _spread_over_ranges(parsed: PythonFile, out: dict[int, frozenset[str]]) -> None:
    """As flake8 does, a `noqa` comment covers every line of the token range it is in: a
    multi-line string with the rest of its statement, or a backslash-continued statement. So
    `flake8 --select GPU` (which applies its own noqa after ours) and `gpulint check` agree."""
    source = parsed.source
    for first, last in _noqa_tokens_of(parsed)[1]:
        if not any(n in out for n in range(first, last + 1)):
            continue
        start = source.line_starts[first - 1]
        end = source.line_starts[last] if last < source.line_count else len(parsed.text)
        found = [out[n] for n in range(first, last + 1) if n in out]
        joined = noqa_codes(parsed.text[start:end])  # flake8 searches the joined lines
        if joined is not None:
            found.append(joined)
        merged = frozenset() if any(not c for c in found) else frozenset().union(*found)
        for n in range(first, last + 1):
            out[n] = merged


# (lines of `noqa` comments, noqa line ranges): suppressing and judging a file's `noqa`
# comments both need them, from one tokenize pass (the slowest step of a file that has some).
_NOQA_TOKENS: MemoKey[tuple[dict[int, int] | None, list[tuple[int, int]]]] = MemoKey("noqa")


def _noqa_tokens_of(parsed: PythonFile) -> tuple[dict[int, int] | None, list[tuple[int, int]]]:
    return parsed.memo.get(_NOQA_TOKENS, lambda: _noqa_tokens(parsed.text))


def _noqa_ranges(text: str) -> list[tuple[int, int]]:
    """flake8's noqa line ranges (processor._noqa_line_mapping): the lines spanned by the tokens
    between two NL/NEWLINE tokens, where that spans more than one line."""
    return _noqa_tokens(text)[1]


def _noqa_tokens(text: str) -> tuple[dict[int, int] | None, list[tuple[int, int]]]:
    """In one tokenize pass: the column of each comment token naming `noqa`, by line (None if
    the text does not tokenize), and `_noqa_ranges` (as far as it tokenizes)."""
    comments: dict[int, int] = {}
    ranges = []
    first, last = None, -1
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text, newline=None).readline):
            kind = tok.type
            if kind in (tokenize.ENDMARKER, tokenize.DEDENT):
                continue
            if kind == tokenize.COMMENT and "noqa" in tok.string.lower():
                comments[tok.start[0]] = tok.start[1]
            first = tok.start[0] if first is None else min(first, tok.start[0])
            last = max(last, tok.end[0])
            if kind in (tokenize.NL, tokenize.NEWLINE):
                if last > first:
                    ranges.append((first, last))
                first, last = None, -1
    except (tokenize.TokenError, SyntaxError):
        return None, ranges
    return comments, ranges


def parse_python(text: str, display_path: str = "<string>") -> ast.Module:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings about the user's escapes are noise
            return ast.parse(text, filename=display_path)
    except SyntaxError as e:
        raise ParseError(f"syntax error: {e.msg}", e.lineno or 1, max(e.offset or 1, 1)) from None
    except (RecursionError, MemoryError):
        raise ParseError("file too deeply nested to parse") from None
    except ValueError as e:
        raise ParseError(f"cannot parse: {e}") from None


FRONTEND = PythonFrontend()
