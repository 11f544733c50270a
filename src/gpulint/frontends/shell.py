"""The shell front-end: launch scripts (`.sh`, `.bash`).

A script is read as logical lines (backslash continuations joined, here-documents skipped, a
quoted string that spans lines joined until it closes); each logical line is split off its
comment, tokenised with `shlex` (POSIX rules, punctuation split out), and cut into simple
commands at `;`, `&&`, `||`, `|`, `&` and parentheses. A simple command yields its leading
`VAR=value` words (the environment of that command, or a plain assignment), `export`/`declare -x`
assignments, and its words. Rules see two node types: `EnvSetting` (gpulint.envvars) and
`ShellCommand`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpulint.diagnostics import Finding
from gpulint.envvars import EnvSetting, comments_around
from gpulint.frontends import decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.settings import Settings
from gpulint.source import SourceText
from gpulint.suppression import NoqaComment

_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "|&", "{", "}"}
_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "time", "!", "exec", "nohup"}
_MAX_JOIN = 200  # physical lines one unterminated quote may swallow before we give up


@dataclass(frozen=True)
class ShellCommand:
    """One simple command: its words after the leading assignments, where it starts."""

    words: tuple[str, ...]
    line: int
    col: int
    end_line: int
    end_col: int
    comment: str | None = field(default=None, compare=False)

    @property
    def span(self) -> tuple[int, int, int, int]:
        return self.line, self.col, self.end_line, self.end_col


@dataclass
class LogicalLine:
    text: str  # code part, continuations joined (newlines kept inside quotes)
    comment: str | None
    line: int  # first physical line, 1-based
    last_line: int
    start_offset: int  # character offset of the first physical line in the file
    cursor: int = 0  # where the next word is searched from (see ShellFile._locate)


class ShellFile:
    language = "shell"

    def __init__(self, display_path: str, text: str):
        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        self.lines = [self.source.line_text(n) for n in range(1, self.source.line_count + 1)]
        self.nodes_by_type: dict[str, list[Any]] = {"EnvSetting": [], "ShellCommand": []}
        for logical in logical_lines(self.source):
            self._read(logical)

    def span(self, node: Any) -> tuple[int, int, int, int]:
        span: tuple[int, int, int, int] = node.span
        return span

    def _read(self, logical: LogicalLine) -> None:
        try:
            lexer = shlex.shlex(logical.text, posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split = True
            lexer.commenters = ""
            tokens = list(lexer)
        except ValueError:
            return  # unbalanced quoting the joiner could not close: leave the line alone
        command: list[str] = []
        for token in [*tokens, ";"]:
            if token in _SEPARATORS:
                self._command(command, logical)
                command = []
            else:
                command.append(token)

    def _command(self, words: list[str], logical: LogicalLine) -> None:
        while words and words[0] in _KEYWORDS:
            words = words[1:]
        if words and words[0] == "env":  # `env [-u NAME] VAR=value cmd`: the command's environment
            words = [w for w in words[1:] if not w.startswith("-")]
        if not words:
            return
        exported = words[0] in ("export", "declare", "typeset", "local", "readonly", "setenv")
        if words[0] == "setenv" and len(words) >= 3:  # csh-style, seen in some job scripts
            self._assignment(words[1], words[2], logical)
            return
        rest = words[1:] if exported else words
        i = 0
        while i < len(rest):
            word = rest[i]
            if exported and word.startswith("-"):
                i += 1
                continue
            name, eq, value = word.partition("=")
            if eq and name.isidentifier():
                self._assignment(name, value, logical)
                i += 1
                continue
            break
        if not exported and i < len(rest):
            line, col, end_line, end_col = self._locate(logical, rest[i])
            self.nodes_by_type["ShellCommand"].append(
                ShellCommand(tuple(rest[i:]), line, col, end_line, end_col, logical.comment)
            )

    def _assignment(self, name: str, value: str, logical: LogicalLine) -> None:
        line, col, end_line, end_col = self._locate(logical, f"{name}=", name)
        literal = None if ("$" in value or "`" in value) else value
        own = logical.comment if line == logical.last_line else None
        comments = comments_around(self.lines, line - 1, own)
        self.nodes_by_type["EnvSetting"].append(
            EnvSetting(name, literal, line, col, end_line, end_col, comments)
        )

    def _locate(
        self, logical: LogicalLine, needle: str, shown: str | None = None
    ) -> tuple[int, int, int, int]:
        """Position of `needle` inside the logical line, in the file's coordinates. Words are
        located in order, each searched from where the previous one was found (from the start,
        every word of a long line rescanned it: quadratic)."""
        at = logical.text.find(needle, logical.cursor)
        if at < 0:
            at = 0
            width = 1
        else:
            width = len(shown or needle)
            logical.cursor = at + len(needle)
        # Offsets in the logical text map to the file: continuations were removed as "\\\n".
        if logical.line == logical.last_line:
            offset = logical.start_offset + at  # one physical line: the same offsets
        else:
            offset = _file_offset(self.source.text, logical.start_offset, logical.text, at)
        line, col = self.source.position(offset)
        return line, col, line, col + width


def _file_offset(text: str, start: int, logical_text: str, at: int) -> int:
    """Map an index in a logical line (continuations removed) back to a file offset."""
    i = start
    seen = 0
    while seen < at and i < len(text):
        if text.startswith("\\\r\n", i):
            i += 3
            continue
        if text.startswith("\\\n", i):
            i += 2
            continue
        i += 1
        seen += 1
    return i


def split_comment(line: str) -> tuple[str, str | None]:
    """(code, comment) of one physical line: `#` starts a comment at the start of a word,
    outside quotes (the shell's rule)."""
    quote = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch == "\\":
            i += 2
            continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t;&|("):
            return line[:i], line[i:].rstrip()
        i += 1
    return line, None


def logical_lines(source: SourceText) -> Iterable[LogicalLine]:
    count = source.line_count
    number = 1
    heredoc: str | None = None
    while number <= count:
        raw = source.line_text(number)
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            number += 1
            continue
        start = source.line_starts[number - 1]
        first = number
        code, comment = split_comment(raw)
        text = code
        # Join continuations (backslash at the end of the code) and open quotes.
        joined = 0
        while number < count and joined < _MAX_JOIN:
            if text.endswith("\\") and comment is None:
                number += 1
                code, comment = split_comment(source.line_text(number))
                text = text[:-1] + code
                joined += 1
                continue
            if _unbalanced(text) and comment is None:
                number += 1
                code, comment = split_comment(source.line_text(number))
                text = text + "\n" + code
                joined += 1
                continue
            break
        heredoc = _heredoc_delimiter(text)
        yield LogicalLine(text, comment, first, number, start)
        number += 1


def _unbalanced(text: str) -> bool:
    if "'" not in text and '"' not in text:
        return False  # nothing to leave open (a trailing backslash is joined before this)
    try:
        shlex.split(text, comments=False)
    except ValueError:
        return True
    return False


def _heredoc_delimiter(text: str) -> str | None:
    if "<<" not in text:
        return None
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = list(lexer)
    except ValueError:
        return None
    for i, token in enumerate(tokens):
        if token in ("<<", "<<-") and i + 1 < len(tokens):
            word = tokens[i + 1].lstrip("-")
            return word or None
        if (
            token.startswith("<<")
            and token not in ("<<<",)
            and len(token) > 2
            and set(token) != {"<"}
        ):
            return token[2:].lstrip("-") or None
    return None


class ShellFrontend:
    language = "shell"
    extensions = (".sh", ".bash")

    def parse(self, display_path: str, data: bytes, settings: Settings) -> ShellFile:
        return ShellFile(display_path, decode(data))

    def run(self, parsed: ShellFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return run_rules(parsed, rules, lambda kind: parsed.nodes_by_type.get(kind, ()))

    def noqa_lines(self, parsed: ShellFile) -> dict[int, frozenset[str]]:
        return noqa_by_line(parsed.source)

    def noqa_comments(self, parsed: ShellFile) -> list[NoqaComment]:
        return noqa_comments_by_line(parsed.source, "#")


FRONTEND = ShellFrontend()
