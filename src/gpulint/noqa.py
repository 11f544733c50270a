"""Writing `noqa` comments: `gpulint check --add-noqa` and the language server's suppress action.

One edit per line that needs a comment, at a position known from the text alone: the end of the
line (after a Python comment already there, the edit holding that comment: `x.item()  # log it
# noqa: GPU101` on one line), or just after the codes of a `noqa` already there (its codes are
kept: `# noqa: E501, GPU101`). A Python finding inside a multi-line string or a
backslash-continued statement gets its comment on the last line of that range, where a comment
is a comment and where flake8 and gpulint read it for every line of the range.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Iterable

from gpulint.diagnostics import ENGINE_CODES, UNUSED_NOQA, Edit, Finding
from gpulint.ruledocs import noqa_comment
from gpulint.source import SourceText
from gpulint.suppression import _NOQA, is_suppressed, noqa_codes


class NoqaPlanner:
    """Where each line's `noqa` goes in one text; build once per text, ask per finding."""

    def __init__(self, text: str, language: str | None):
        self.text = text
        self.language = language
        self.source = SourceText(text)
        self._last_line: dict[int, int] | None = None
        self._comments: dict[int, int] | None = None  # line -> column of its comment (Python)

    def target_line(self, line: int) -> int:
        if self.language != "python":
            return line
        if self._last_line is None:
            from gpulint.frontends.python import _noqa_ranges

            self._last_line = {}
            for first, last in _noqa_ranges(self.text):
                for n in range(first, last + 1):
                    self._last_line[n] = last
        return self._last_line.get(line, line)

    def edits(self, findings: Iterable[Finding]) -> list[Edit]:
        """The edits that suppress `findings` (GPU000 and GPU001 are never suppressed, and an
        unused `noqa`, GPU003, is fixed by deleting it, not by one more)."""
        if self.language is None:
            return []
        wanted: dict[int, set[str]] = {}
        for f in findings:
            if f.code not in ENGINE_CODES and f.code != UNUSED_NOQA:
                wanted.setdefault(self.target_line(f.line), set()).add(f.code)
        out = []
        for line, codes in sorted(wanted.items()):
            edit = self._line_edit(line, codes)
            if edit is not None:
                out.append(edit)
        return out

    def _line_edit(self, line: int, codes: set[str]) -> Edit | None:
        text = self.source.line_text(line)
        existing = noqa_codes(text)
        missing = sorted(c for c in codes if not is_suppressed(c, existing))
        if not missing or self.language is None:  # (edits() asks only with a language)
            return None  # already there (or a blanket noqa): nothing to write
        match = _NOQA.search(text) if existing else None
        if match is not None and match.group("codes"):
            # The comment rewritten from its `#` to the line's end, the new codes after the old
            # ones: the edit holds the whole comment token (fixes may not touch a token they do
            # not hold), and the text around the insertion is what it was.
            start, end, codes_end = match.start(), len(text), match.end("codes")
            new = text[start:codes_end] + ", " + ", ".join(missing) + text[codes_end:end]
            return Edit(self.source.offset(line, start + 1), self.source.offset(line, end + 1), new)
        comment = noqa_comment(self.language, ", ".join(missing))
        end = self.source.offset(line, len(text) + 1)
        padding = "" if not text.strip() else ("  " if comment.startswith("#") else " ")
        col = self._comment_column(line)
        if col is not None:
            # `x.item()  # log it`: the line's comment token runs to its end, so the edit holds
            # it and writes the noqa after it (`# log it  # noqa: GPU101`), as ruff does; an
            # insertion at the end would change a token the edit does not hold.
            return Edit(self.source.offset(line, col + 1), end, text[col:] + padding + comment)
        return Edit(end, end, padding + comment)

    def _comment_column(self, line: int) -> int | None:
        """0-based column of the comment token on `line` (Python), or None."""
        if self.language != "python":
            return None
        if self._comments is None:
            self._comments = {}
            try:
                readline = io.StringIO(self.text, newline=None).readline
                for tok in tokenize.generate_tokens(readline):
                    if tok.type == tokenize.COMMENT:
                        self._comments[tok.start[0]] = tok.start[1]
            except (tokenize.TokenError, SyntaxError):
                pass
        return self._comments.get(line)
