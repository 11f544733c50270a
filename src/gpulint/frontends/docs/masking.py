"""What of a Markdown or reStructuredText document is the author's own prose: everything
else (code blocks and spans, RST literal blocks and code directives, comments, link targets,
HTML tags, quoted text) is blanked with spaces, newlines kept, so every offset still points
into the file."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpulint.claims import EVIDENCE_TAG
from gpulint.source import SourceText

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
TABLE_ROW = re.compile(r"^\s*\|")
# Every pattern here runs over a stranger's text and must stay linear in it: a repeated
# character class stops at the character that could start the next attempt (`[^<>]` in a tag,
# `[^[\]]` in link text), a match starts only where a run starts (lookbehind), or quantifiers are
# possessive; code spans are paired by a scan, not a backreference (tests/test_hostile.py feeds
# each 100 KB lines of backticks, digits, tags, quotes, brackets and colons).
TABLE_RULE = re.compile(r"^\s*+\|?\s*+:?-{2,}+:?\s*+(?:\|\s*+:?-{2,}+:?\s*+)*+\|?\s*+$")
_BACKTICKS = re.compile(r"`+")
_MD_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>[^\[\]\n]*)\]\((?P<url>[^)\s\[]+)(?:\s+\"[^\"\n]*\")?\)"
)
_RST_LINK = re.compile(r"`(?P<text>[^`<\n]*)<(?P<url>[^<>`\n]+)>`__?")
_AUTOLINK = re.compile(r"<(?:https?|ftp)://[^<>\s]+>|(?<![\w(])https?://\S+")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>\n]*>")
_QUOTED = re.compile(r"\"[^\"\n]{1,300}\"|“[^”\n]{1,300}”|«[^»\n]{1,300}»")
_RST_ROLE = re.compile(r"(?<![a-zA-Z:+-]):[a-zA-Z:+-]+:`[^`\n]*`")
_RST_REF = re.compile(r":(?:ref|doc):`(?P<text>[^`<\n]*)(?:<(?P<url>[^<>`\n]*)>)?`")
_HTML_A = re.compile(r"<a\s[^<>]*>", re.IGNORECASE)
_HREF = re.compile(r"href=\"(?P<url>[^\"]*)\"", re.IGNORECASE)
_HTML_A_TEXT = re.compile(r"(?P<text>[^<]*)</a>", re.IGNORECASE)


def code_spans(segment: str) -> Iterable[tuple[int, int]]:
    """Inline code spans of one line, as CommonMark pairs them: a run of N backticks opens,
    the next run of exactly N closes (a run with no partner is literal). Linear: each run's
    partner is found by one right-to-left pass."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(segment)]
    partner: list[int | None] = [None] * len(runs)
    last: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        width = runs[i][1] - runs[i][0]
        partner[i] = last.get(width)
        last[width] = i
    i = 0
    while i < len(runs):
        j = partner[i]
        if j is None:
            i += 1
            continue
        yield runs[i][0], runs[j][1]
        i = j + 1


def html_links(segment: str) -> Iterable[tuple[int, str, str]]:
    """(offset of the text, text, href) of each `<a href="...">text</a>` in one line."""
    for tag in _HTML_A.finditer(segment):
        href = _HREF.search(tag.group())
        body = _HTML_A_TEXT.match(segment, tag.end())
        if href and body:
            yield body.start("text"), body.group("text"), href.group("url")


RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
_RST_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\.\s+(?P<name>[\w:-]+)::")
_RST_COMMENT = re.compile(r"^(?P<indent>\s*)\.\.(\s|$)")
_CODE_DIRECTIVES = {
    "code",
    "code-block",
    "sourcecode",
    "literalinclude",
    "highlight",
    "ipython",
    "math",
    "raw",
    "testcode",
    "testoutput",
    "doctest",
    "jupyter-execute",
    "image",
    "figure",
    "include",
    "autoclass",
    "automodule",
    "autofunction",
    "program-output",
    "command-output",
    "graphviz",
}


class Masker:
    """Blanks non-prose spans of `text` in place; records references and link kinds."""

    def __init__(self, text: str):
        self.raw = text
        self.chars = list(text)
        self.source = SourceText(text)
        self.evidence_tags: list[tuple[int, str]] = []  # (offset, path)
        self.links: list[tuple[int, str, str]] = []  # (offset, text, url)

    def blank(self, start: int, end: int) -> None:
        for i in range(start, min(end, len(self.chars))):
            if self.chars[i] not in "\r\n":
                self.chars[i] = " "

    def blank_line(self, number: int) -> None:
        start = self.source.line_starts[number - 1]
        self.blank(start, start + len(self.source.line_text(number)))

    def line_offset(self, number: int) -> int:
        return self.source.line_starts[number - 1]

    @property
    def text(self) -> str:
        return "".join(self.chars)

    def tags(self, start: int, end: int) -> None:
        for m in EVIDENCE_TAG.finditer(self.raw, start, end):
            self.evidence_tags.append((m.start(), m.group("path").rstrip("-").strip()))

    def inline(self, start: int, end: int, rst: bool) -> None:
        """Blank inline code, link targets, tags and quotations inside [start, end)."""
        segment = "".join(self.chars[start:end])
        # Cross-references and HTML anchors point at where the figures live: record them as links.
        if rst:
            for m in _RST_REF.finditer(segment):
                text = m.group("text").rstrip()
                self.links.append((start + m.start("text"), text, m.group("url") or ""))
        else:
            for at, text, url in html_links(segment):
                self.links.append((start + at, text, url))
        if rst:
            # `text <url>`_ is a link, not code: record it before backtick spans are blanked.
            for m in _RST_LINK.finditer(segment):
                self.links.append((start + m.start("text"), m.group("text"), m.group("url")))
                self.blank(start + m.start("url") - 1, start + m.end())
        for a, b in code_spans(segment):
            self.blank(start + a, start + b)
        if rst:
            for m in _RST_ROLE.finditer(segment):
                self.blank(start + m.start(), start + m.end())
        segment = "".join(self.chars[start:end])
        for m in () if rst else _MD_LINK.finditer(segment):
            url = m.group("url")
            self.links.append((start + m.start("text"), m.group("text"), url))
            if m.group("bang"):
                self.blank(start + m.start(), start + m.end())  # an image is not prose
            else:
                self.blank(start + m.start("url") - 1, start + m.end())
        segment = "".join(self.chars[start:end])
        for m in _AUTOLINK.finditer(segment):
            self.links.append((start + m.start(), "", m.group(0).strip("<>")))
            self.blank(start + m.start(), start + m.end())
        segment = "".join(self.chars[start:end])
        for pattern in (_HTML_TAG, _QUOTED):
            for m in pattern.finditer(segment):
                self.blank(start + m.start(), start + m.end())
            segment = "".join(self.chars[start:end])


def mask_markdown(m: Masker) -> None:
    src = m.source
    count = src.line_count
    n = 1
    # Front matter
    if src.line_text(1).strip() == "---":
        for k in range(2, min(count, 200) + 1):
            if src.line_text(k).strip() in ("---", "..."):
                for j in range(1, k + 1):
                    m.blank_line(j)
                n = k + 1
                break
    fence: str | None = None
    previous_blank = True
    in_list = False
    in_comment = False
    while n <= count:
        line = src.line_text(n)
        stripped = line.strip()
        start = m.line_offset(n)
        if in_comment:
            m.tags(start, start + len(line))
            m.blank_line(n)
            if "-->" in line:
                in_comment = False
            n += 1
            continue
        if fence is not None:
            m.blank_line(n)
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = None
            n += 1
            previous_blank = False
            continue
        f = _FENCE.match(line)
        if f:
            fence = f.group(1)
            m.blank_line(n)
            n += 1
            continue
        if not stripped:
            previous_blank = True
            n += 1
            continue
        indented = len(line) - len(line.lstrip(" \t")) >= 4 or line.startswith("\t")
        if indented and previous_blank and not in_list:
            m.blank_line(n)  # indented code block
            n += 1
            continue
        if LIST_ITEM.match(line):
            in_list = True
        elif previous_blank and not indented:
            in_list = False
        previous_blank = False
        if re.match(r"^ {0,3}>", line):
            m.blank_line(n)  # block quote: someone else's words
            n += 1
            continue
        # HTML comments (possibly spanning lines), evidence tags kept first.
        pos = 0
        while True:
            open_at = line.find("<!--", pos)
            if open_at < 0:
                break
            close_at = line.find("-->", open_at + 4)
            if close_at < 0:
                m.tags(start + open_at, start + len(line))
                m.blank(start + open_at, start + len(line))
                in_comment = True
                break
            m.tags(start + open_at, start + close_at + 3)
            m.blank(start + open_at, start + close_at + 3)
            pos = close_at + 3
        m.inline(start, start + len(line), rst=False)
        n += 1


def mask_rst(m: Masker) -> None:
    src = m.source
    count = src.line_count
    n = 1
    block_indent: int | None = None  # inside a blanked block indented deeper than this
    literal_indent: int | None = None  # the previous paragraph ended with "::"
    while n <= count:
        line = src.line_text(n)
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        start = m.line_offset(n)
        if block_indent is not None:
            if not stripped or indent > block_indent:
                m.tags(start, start + len(line))
                m.blank_line(n)
                n += 1
                continue
            block_indent = None
        if not stripped:
            n += 1
            continue
        if literal_indent is not None:
            expected, literal_indent = literal_indent, None
            if indent > expected:
                block_indent = expected  # the literal block: blank it (this line included)
                continue
        d = _RST_DIRECTIVE.match(line)
        if d:
            m.tags(start, start + len(line))
            m.blank_line(n)
            name = d.group("name").split(":")[-1].lower()
            if name in _CODE_DIRECTIVES or name.startswith("auto"):
                block_indent = len(d.group("indent"))
                n += 1
                continue
            # An admonition's body is prose; its options (`:class:`) are not.
            n += 1
            while n <= count and src.line_text(n).strip().startswith(":"):
                m.blank_line(n)
                n += 1
            continue
        c = _RST_COMMENT.match(line)
        if c:
            block_indent = len(c.group("indent"))
            m.tags(start, start + len(line))
            m.blank_line(n)
            n += 1
            continue
        if RST_UNDERLINE.match(line) or stripped.startswith(("+--", "+==")):
            m.blank_line(n)
            n += 1
            continue
        if stripped.startswith((">>>", "... ")):
            m.blank_line(n)
            n += 1
            continue
        m.inline(start, start + len(line), rst=True)
        if stripped.endswith("::"):
            literal_indent = indent
            m.blank(start + line.rstrip().rfind("::"), start + len(line.rstrip()))
        n += 1
