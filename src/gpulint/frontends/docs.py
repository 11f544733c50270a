"""The documentation front-end: Markdown (`.md`, `.markdown`) and reStructuredText (`.rst`).

A document is read block by block and everything that is not the author's own prose is blanked
out (replaced by spaces, newlines kept, so every offset still points into the file): front
matter, fenced and indented code blocks, RST literal blocks and code directives, block quotes,
HTML and RST comments, inline code, link targets, HTML tags, and text in quotation marks. What
remains is cut into prose units (paragraphs, list items, table rows, headings) for
gpulint.claims. Evidence references (`gpulint-evidence:` tags in comments, links to bench
records) are collected before they are blanked. Rules see `DocUnit` nodes.

Python docstrings go through the same masking (`docstring_units`) so GPU910-912 judge a
docstring exactly as they judge a README.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from gpulint.claims import (
    ABSOLUTE,
    DOCSTRING_WORDS,
    EVIDENCE_TAG,
    Claim,
    EvidenceContext,
    Unit,
    analyse,
)
from gpulint.diagnostics import Finding
from gpulint.frontends import Memo, MemoKey, decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.settings import Settings
from gpulint.source import VENDORED_DIRS, SourceText
from gpulint.suppression import NoqaComment

if TYPE_CHECKING:
    import ast

    from gpulint.frontends.python.file import PythonFile

Span = tuple[int, int, int, int]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TABLE_ROW = re.compile(r"^\s*\|")
# Every pattern here runs over a stranger's text and must stay linear in it: a repeated
# character class stops at the character that could start the next attempt (`[^<>]` in a tag,
# `[^[\]]` in link text), a match starts only where a run starts (lookbehind), or quantifiers are
# possessive; code spans are paired by a scan, not a backreference (tests/test_hostile.py feeds
# each 100 KB lines of backticks, digits, tags, quotes, brackets and colons).
_TABLE_RULE = re.compile(r"^\s*+\|?\s*+:?-{2,}+:?\s*+(?:\|\s*+:?-{2,}+:?\s*+)*+\|?\s*+$")
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


_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
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
_EVIDENCE_URL = re.compile(r"gpulint/evidence/[^)\s>]*\.json$|\.json$", re.IGNORECASE)
_CITATION_URL = re.compile(
    r"arxiv\.org|openreview\.net|aclanthology|proceedings|paperswithcode|/blog|blog\.|medium\.com"
    r"|benchmark|\.pdf\b|/releases?/|developer\.nvidia\.com/blog|pytorch\.org/blog"
    r"|\.(?:txt|log|csv|json|ipynb)$|#(?:benchmark|performance|result)",
    re.IGNORECASE,
)
_CHANGELOG = re.compile(
    r"^(changelog|changes|history|news|release[-_ ]?notes?|releases?)(?![a-z])", re.IGNORECASE
)

# Which documents claims are judged in by default: the project's own result documents. Other
# documents (blog posts, news, changelogs, vendored copies of other projects) are opted in with
# `[tool.gpulint.claims] include = [globs]`; docstrings with `docstrings = true`.
_OWN_DIRS = {
    "docs",
    "doc",
    "documentation",
    "benchmark",
    "benchmarks",
    "bench",
    "results",
    "perf",
    "performance",
}
_OWN_NAME = re.compile(r"^readme|results?|benchmark|perf|leaderboard", re.IGNORECASE)
_OTHER_DIRS = {
    "blog",
    "blogs",
    "news",
    "posts",
    "_posts",
    "changelog",
    "changelogs",
    "releases",
    "release-notes",
    "release_notes",
    "history",
    *VENDORED_DIRS,
}
_OTHER_NAME = re.compile(r"^(blog|news|posts?)(?![a-z])", re.IGNORECASE)
# Markdown images, HTML images and videos, RST image/figure directives: a figure.
_FIGURE = re.compile(
    r"!\[[^\]\n]*\]\(|<(?:img|video|picture|figure)\b|^\s*\.\.\s+(?:image|figure)::",
    re.IGNORECASE | re.MULTILINE,
)
_NEWS_HEADING = re.compile(
    r"\b(?:news|updates?|announcements?|change\s?log|changes|release\s?notes?|releases"
    r"|what'?s\s+new|history|timeline)\b",
    re.IGNORECASE,
)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{2,4}"
_DATED = re.compile(
    rf"^\s*(?:[-*+]\s+)?(?:[*_]{{1,2}})?(?:\\?\[\s*(?:\d{{4}}[/.-]\d{{1,2}}(?:[/.-]\d{{1,2}})?|{_MONTH})\s*\\?\]"
    rf"|(?:\d{{4}}[/.-]\d{{1,2}}(?:[/.-]\d{{1,2}})?|{_MONTH})\s*(?:[*_]{{1,2}})?\s*[:–—-]\s)",
    re.IGNORECASE,
)


def claims_scope(display_path: str, settings: Settings | None) -> bool:
    """Whether claims in this document are judged (the project's own result documents), or only
    its evidence references are checked."""
    rel = _relative(display_path, settings)
    include = settings.option("claims", "include", []) if settings is not None else []
    if any(fnmatch.fnmatch(rel, g) or PurePosixPath(rel).match(g) for g in include):
        return True
    parts = rel.lower().split("/")
    name, folders = parts[-1], parts[:-1]
    if _CHANGELOG.match(name) or _OTHER_NAME.match(name) or any(p in _OTHER_DIRS for p in folders):
        return False
    return bool(_OWN_NAME.match(name) or _OWN_NAME.search(name.rsplit(".", 1)[0])) or any(
        p in _OWN_DIRS for p in folders
    )


def _relative(display_path: str, settings: Settings | None) -> str:
    path = display_path.replace("\\", "/")
    root = settings.option("config", "root") if settings is not None else None
    if root:
        try:
            return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
        except (ValueError, OSError):
            pass
    return path.lstrip("./") if path.startswith("./") else path


@dataclass(frozen=True)
class DocUnit:
    """A prose unit of a document (see gpulint.claims.Unit), as rules see it."""

    unit: Unit
    line: int
    col: int

    @property
    def span(self) -> tuple[int, int, int, int]:
        return self.line, self.col, self.line, self.col + 1


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
        if _LIST_ITEM.match(line):
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
        if _RST_UNDERLINE.match(line) or stripped.startswith(("+--", "+==")):
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


def units_from(
    masked: str, raw: str, source: SourceText, m: Masker, base: int = 0, rst: bool = False
) -> list[Unit]:
    """Cut masked text into prose units; attach evidence tags and links found in each."""
    units: list[Unit] = []
    lines = masked.split("\n")
    raw_lines = raw.split("\n")  # the same lines: masking keeps every newline
    offset = 0
    current: list[tuple[int, str]] = []  # (offset, line)

    def flush(kind: str = "paragraph") -> None:
        if not current:
            return
        start = current[0][0]
        end = current[-1][0] + len(current[-1][1])
        text = masked[start:end]
        if text.strip():
            units.append(Unit(text=text, raw=raw[start:end], start=base + start, kind=kind))
        current.clear()

    kind = "paragraph"
    for i, line in enumerate(lines):
        raw_line = raw[offset : offset + len(line)]
        stripped = line.strip()
        if not stripped:
            flush(kind)
            kind = "paragraph"
        elif _TABLE_ROW.match(raw_line):
            flush(kind)
            if not _TABLE_RULE.match(raw_line):
                current.append((offset, line))
                flush("table-row")
            kind = "paragraph"
        elif _HEADING.match(raw_line) and not rst:
            flush(kind)
            current.append((offset, line))
            flush("heading")
            kind = "paragraph"
        elif _LIST_ITEM.match(line):
            flush(kind)
            current.append((offset, line))
            kind = "list-item"
        elif rst and i + 1 < len(lines) and _RST_UNDERLINE.match(raw_lines[i + 1] or "x"):
            flush(kind)
            current.append((offset, line))
            flush("heading")
            kind = "paragraph"
        else:
            current.append((offset, line))
        offset += len(line) + 1
    flush(kind)
    _attach(units, m, base)
    _sections(units)
    _neighbourhood(units, raw, base, rst)
    if _document_measures(units, raw, m):
        for unit in units:
            unit.document_measures = True
    return units


# A figure or link that shows measurements: a benchmark plot, a results page.
_MEASURE_WORDS = re.compile(
    r"bench|perf|speed|throughput|latency|results?\b|tflops|tok(?:en)?s?[/_-]s|comparison|roofline",
    re.IGNORECASE,
)
_FIGURE_SOURCE = re.compile(
    r"!\[(?P<alt>[^\]\n]*)\]\((?P<src>[^)\s]*)|<img\b[^>\n]*?src=[\"'](?P<img>[^\"']*)"
    r"|^\s*\.\.\s+(?:image|figure)::\s*(?P<rst>\S+)",
    re.IGNORECASE | re.MULTILINE,
)


_PIPE_TABLE = re.compile(
    r"^(?P<header>[^\n|]*\|[^\n]*)\n[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*\|[^\n]*\n(?P<row>[^\n|]*\|[^\n]*)",
    re.MULTILINE,
)


def _document_measures(units: list[Unit], raw: str, m: Masker) -> bool:
    """The document shows its measurements somewhere: a results table (a row with two figures
    and units), a benchmark figure, or a link to a benchmark or results page. Its claims then
    summarise results a reader can find in it; GPU910 asks for evidence only where a document
    has none."""
    for unit in units:
        if unit.kind == "table-row" and len(ABSOLUTE.findall(unit.text)) >= 2:
            return True
    # A pipe table (with or without outer pipes) whose header names what it measures.
    for table in _PIPE_TABLE.finditer(raw):
        if _MEASURE_WORDS.search(table.group("header")) and _DECIMAL.search(table.group("row")):
            return True
    for fig in _FIGURE_SOURCE.finditer(raw):
        if _MEASURE_WORDS.search(" ".join(g for g in fig.groups() if g)):
            return True
    return any(
        _MEASURE_WORDS.search(url) or _MEASURE_WORDS.search(text)
        for _, text, url in m.links
        if not _EVIDENCE_URL.search(url)
    )


def _neighbourhood(units: list[Unit], raw: str, base: int, rst: bool) -> None:
    """What sits around each unit. A figure, a results table or a block of measured output
    within two units of it (the text is its caption or its summary); a neighbour or parent list
    item that links the benchmark or source; the hardware its parent item or the paragraph
    before names; and whether it is news (a dated item, a News / Updates section)."""
    figures = [base + m.start() for m in _FIGURE.finditer(raw)]
    headings: list[tuple[int, bool]] = []  # (level, news) of the headings above
    n = len(units)
    for i, unit in enumerate(units):
        lo, hi = max(i - _NEAR, 0), min(i + _NEAR, n - 1)
        low = units[lo - 1].start + len(units[lo - 1].text) if lo else base
        high = units[hi + 1].start if hi + 1 < n else base + len(raw)
        unit.beside_figure = any(low <= at < high for at in figures)
        unit.beside_table = unit.kind != "table-row" and (
            any(units[j].kind == "table-row" and _digits(units[j].text) for j in range(lo, hi + 1))
            or _measured_block(_gaps(units, lo, hi, raw, base))
        )
        parent = _parent_item(units, i)
        nearby = [units[j] for j in (i - 1, i + 1) if 0 <= j < n and units[j].kind != "heading"]
        if parent is not None:
            nearby.append(parent)
        unit.external_link = unit.external_link or any(u.external_link for u in nearby)
        unit.lead = "\n".join(u.text for u in nearby if u.start < unit.start)
        if unit.kind == "heading":
            level = 1 if rst else len(unit.raw.lstrip()) - len(unit.raw.lstrip().lstrip("#"))
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, bool(_NEWS_HEADING.search(unit.text))))
        unit.news = bool(_DATED.match(unit.raw)) or any(news for _, news in headings)


_NEAR = 2  # units either side where a figure or table still belongs to the text
# Grid tables and table directives of reStructuredText (blanked before units are cut).
_RST_TABLE = re.compile(
    r"^\s*\|.*\d.*\|\s*$|^\s*\.\.\s+(?:(?:list-|csv-)?table|literalinclude|program-output"
    r"|command-output)::",
    re.MULTILINE,
)
_DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")


def _measured_block(gap: str) -> bool:
    """Raw text between units (code blocks, RST tables) holding measured output: a table, or
    at least four decimal figures (a benchmark log)."""
    return bool(_RST_TABLE.search(gap)) or len(_DECIMAL.findall(gap)) >= 4


def _gaps(units: list[Unit], lo: int, hi: int, raw: str, base: int) -> str:
    """The raw text between units lo-1..hi+1 that is no unit's (code blocks, tables, figures)."""
    edges = [base] + [e for u in units[lo : hi + 1] for e in (u.start, u.start + len(u.text))]
    edges.append(units[hi + 1].start if hi + 1 < len(units) else base + len(raw))
    if lo:
        edges[0] = units[lo - 1].start + len(units[lo - 1].text)
    return "\n".join(
        raw[edges[k] - base : edges[k + 1] - base] for k in range(0, len(edges) - 1, 2)
    )


def _digits(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def _parent_item(units: list[Unit], i: int) -> Unit | None:
    if units[i].kind != "list-item":
        return None
    for earlier in reversed(units[:i]):
        if earlier.kind != "list-item":
            return earlier if earlier.kind == "paragraph" else None
        if _indent(earlier) < _indent(units[i]):
            return earlier
    return None


def _table_with_figures(units: list[Unit], j: int, step: int) -> bool:
    """The table starting at units[j] (walking by `step`) has a row with a figure in it."""
    while 0 <= j < len(units) and units[j].kind == "table-row":
        if any(ch.isdigit() for ch in units[j].text):
            return True
        j += step
    return False


def _attach(units: list[Unit], m: Masker, base: int) -> None:
    """Evidence tags belong to the unit they sit in, or the unit right above them."""
    starts = [unit.start for unit in units]  # in order: each place found by bisection
    for offset, path in m.evidence_tags:
        k = bisect.bisect_right(starts, base + offset)
        if k:
            units[k - 1].references.append(path)
    for offset, text, url in m.links:
        at = base + offset
        k = bisect.bisect_right(starts, at)
        for unit in units[k - 1 : k] if k else ():
            if unit.start <= at < unit.start + len(unit.text):
                if _EVIDENCE_URL.search(url) and (
                    "gpulint/evidence" in url or "evidence" in text.lower()
                ):
                    unit.references.append(url)
                elif _CITATION_URL.search(url) or _CITATION_TEXT.search(text):
                    unit.external_link = True
                local = at - unit.start
                unit.link_texts.append((local, local + len(text)))
                break


def _indent(unit: Unit) -> int:
    first = unit.raw.split("\n", 1)[0]
    return len(first) - len(first.lstrip())


_SIBLINGS = 4  # earlier items of a list a list item pairs its figure with


def _sections(units: list[Unit]) -> None:
    """A heading's evidence is in the section under it, a list item's in the items nested
    under it: give each that text (and its references)."""
    # List items since the last other unit, each shallower than the one above it: the item a
    # list item pairs with is the nearest earlier one at its indent with none shallower between.
    open_items: list[tuple[int, Unit, list[str]]] = []
    for i, unit in enumerate(units):
        if unit.kind != "list-item":
            open_items.clear()
        if unit.kind not in ("heading", "list-item"):
            continue
        body = []
        for later in units[i + 1 : i + 40]:
            if later.kind == "heading":
                break
            if unit.kind == "list-item" and _indent(later) <= _indent(unit):
                break
            body.append(later.text)
            unit.section_references.extend(later.references)
            unit.external_link = unit.external_link or later.external_link
        unit.section = "\n".join(body)
        if unit.kind == "list-item":
            indent = _indent(unit)
            while open_items and open_items[-1][0] > indent:
                open_items.pop()
            recent: list[str] = []
            if open_items and open_items[-1][0] == indent:
                recent = open_items.pop()[2]
                # The items above it in the same list (the last few): a figure two items up
                # still pairs with it (`- ~1d7h on 32 GPUs` ... `- ~1d11h on 16 (2x faster)`).
                unit.previous_item = "\n".join(recent)
            open_items.append((indent, unit, [*recent, unit.text][-_SIBLINGS:]))


_CITATION_TEXT = re.compile(
    r"paper|blog|benchmark|results?|report|model card|details|performance|logs?\b|data\b"
    r"|numbers|measurements?|table|chart|plot|figure|docs\b|documentation|here\b|more\b|section",
    re.IGNORECASE,
)


_SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh", "shell-session", "sh-session"}
_PROMPT = re.compile(r"^\s*(?:\$|#|>|\(\S+\)\s*\$)\s+(?=\S)")


@functools.lru_cache(maxsize=1)
def _markdown_parser() -> Any:
    """CommonMark block structure only (markdown-it-py): the code blocks are what is asked for,
    so inline parsing (emphasis, links) is never run."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    md.disable(["inline", "text_join"], ignoreInvalid=True)
    return md


def code_blocks(source: SourceText) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """Every code block of a Markdown document, wherever CommonMark puts one (at the top, in a
    block quote, in a list item, fenced or indented): (language, 1-based line of its first
    content line, [(content line, column shift)]). A content line is the source line less
    the containers' markers and indentation; its shift is how many characters those took,
    so a position in the content is a position in the file."""
    out = []
    tokens = _markdown_parser().parse(source.text)
    for token in tokens:
        if token.type not in ("fence", "code_block") or token.map is None:
            continue
        begin, end = token.map
        first = begin + 2 if token.type == "fence" else begin + 1  # 1-based
        info = token.info.strip().split()[0].lower() if token.info.strip() else ""
        lines = token.content.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        body = []
        for i, line in enumerate(lines):
            number = first + i
            if number > source.line_count:
                break
            raw = source.line_text(number)
            shift = len(raw) - len(line) if raw.endswith(line) else 0
            body.append((line, shift))
        out.append((info, first, body))
    return out


def shell_blocks(source: SourceText) -> list[Any]:
    """Commands in a guide's shell code blocks (```bash, ```console, no language, or an
    indented block), wherever the document holds them (top level, block quotes, list items),
    placed where they are in the file, so rules about launch commands read a guide as they
    read a script. `$ ` prompts are dropped; comment-only lines stay comments."""
    from dataclasses import replace

    from gpulint.frontends.shell import ShellFile

    out = []
    for language, first, block in code_blocks(source):
        if language not in _SHELL_LANGUAGES:
            continue  # a block of another language (python, yaml, text)
        body, shifts = [], []
        for line, base in block:
            p = _PROMPT.match(line)
            shift = p.end() if p and not line.lstrip().startswith("# ") else 0
            shifts.append(base + shift)
            body.append(line[shift:])
        shell = ShellFile("", "\n".join(body))
        for node in shell.nodes_by_type["ShellCommand"]:
            shift = shifts[node.line - 1] if node.line - 1 < len(shifts) else 0
            end_shift = shifts[node.end_line - 1] if node.end_line - 1 < len(shifts) else 0
            out.append(
                replace(
                    node,
                    line=node.line + first - 1,
                    col=node.col + shift,
                    end_line=node.end_line + first - 1,
                    end_col=node.end_col + end_shift,
                )
            )
    return out


class _Nodes(Mapping[str, list[Any]]):
    """A document's nodes by kind. The commands of its code blocks are found (a CommonMark
    parse) only when a rule asks for them: most documents pass no shell rule's text gate."""

    def __init__(self, units: list[Any], commands: Callable[[], list[Any]]):
        self._found: dict[str, list[Any]] = {"DocUnit": units}
        self._commands: Callable[[], list[Any]] | None = commands

    def __getitem__(self, kind: str) -> list[Any]:
        if kind == "ShellCommand" and self._commands is not None:
            self._found[kind], self._commands = self._commands(), None
        return self._found[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(("DocUnit", "ShellCommand"))

    def __len__(self) -> int:
        return 2


class DocFile:
    language = "markdown"

    def __init__(self, display_path: str, text: str, settings: Settings):
        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        self.settings = settings
        self.memo = Memo()  # what rules compute once per document (none yet)
        name = display_path.replace("\\", "/").rsplit("/", 1)[-1]
        self.rst = name.lower().endswith((".rst", ".rest"))
        self.changelog = bool(_CHANGELOG.match(name))
        masker = Masker(text)
        (mask_rst if self.rst else mask_markdown)(masker)
        units = units_from(masker.text, text, self.source, masker, rst=self.rst)
        self.nodes_by_type = _Nodes(
            [DocUnit(u, *self.source.position(u.start)) for u in units],
            (lambda: []) if self.rst else functools.partial(shell_blocks, self.source),
        )

    def span(self, node: Any) -> tuple[int, int, int, int]:
        if isinstance(node, Claim):
            line, col = self.source.position(node.start)
            end_line, end_col = self.source.position(node.end)
            return line, col, end_line, end_col
        span: tuple[int, int, int, int] = node.span
        return span

    @functools.cached_property
    def claims(self) -> list[Claim]:
        evidence = evidence_context(self.display_path, self.settings)
        scope = claims_scope(self.display_path, self.settings)
        return [
            c
            for node in self.nodes_by_type["DocUnit"]
            for c in analyse(node.unit, evidence, scope=scope)
        ]


def evidence_context(display_path: str, settings: Settings | None) -> EvidenceContext:
    root = settings.option("config", "root") if settings is not None else None
    doc_dir = Path(display_path).parent
    return EvidenceContext(doc_dir=doc_dir, root=Path(root) if root else None)


# -- Python docstrings ---------------------------------------------------------------------------
_DOCSTRING_CLAIMS: MemoKey[list[tuple[Claim, Span]]] = MemoKey("docs.docstring_claims")


def docstring_claims(file: PythonFile, settings: Settings | None) -> list[tuple[Claim, Span]]:
    """Claims in a Python file's module/class/function docstrings, with their spans. Kept in
    the file's memo so the three claim rules share one analysis."""
    return file.memo.get(_DOCSTRING_CLAIMS, lambda: _docstring_claims(file, settings))


def _docstring_claims(file: PythonFile, settings: Settings | None) -> list[tuple[Claim, Span]]:
    import ast

    out: list[tuple[Claim, Span]] = []
    evidence = evidence_context(file.display_path, settings)
    # Docstrings describe code, not results: their claims are judged only when opted in
    # (`[tool.gpulint.claims] docstrings = true`); a dangling evidence reference always is.
    scope = bool(settings.option("claims", "docstrings", False)) if settings is not None else False
    for node in file.nodes(ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef):
        body = getattr(node, "body", None)
        if not body or not isinstance(body[0], ast.Expr):
            continue
        literal = body[0].value
        if not (isinstance(literal, ast.Constant) and isinstance(literal.value, str)):
            continue
        out.extend(_docstring(file, literal, literal.value, evidence, scope))
    return out


def _docstring(
    file: PythonFile,
    literal: ast.Constant,
    value: str,
    evidence: EvidenceContext,
    scope: bool = True,
) -> list[tuple[Claim, Span]]:
    if not any(ch.isdigit() for ch in value):
        return []
    lowered = value.lower()
    if not any(word in lowered for word in DOCSTRING_WORDS):
        return []  # no claim pattern can match: most docstrings end here, unmasked
    # Where the value's characters start in the file, when they map one to one.
    segment = file.segment(literal) or ""
    prefix = re.match(r"^[rRbBuUfF]*(\"\"\"|'''|\"|')", segment)
    base = None
    if prefix:
        inner = segment[prefix.end() : len(segment) - len(prefix.group(1))]
        if inner == value:
            base = file.source.offset(literal.lineno, literal.col_offset + 1) + prefix.end()
    masker = Masker(value)
    mask_rst(masker)
    _mask_indented_blocks(masker)
    units = units_from(masker.text, value, masker.source, masker, rst=True)
    out: list[tuple[Claim, Span]] = []
    for unit in units:
        unit.kind = "docstring" if unit.kind == "paragraph" else unit.kind
        for claim in analyse(unit, evidence, scope=scope):
            if base is not None:
                line, col = file.source.position(base + claim.start)
                end_line, end_col = file.source.position(base + claim.end)
            else:
                line, col, end_line, end_col = (
                    literal.lineno,
                    literal.col_offset + 1,
                    literal.lineno,
                    literal.col_offset + 2,
                )
            out.append((claim, (line, col, end_line, end_col)))
    return out


def _mask_indented_blocks(m: Masker) -> None:
    """In a docstring, lines indented deeper than its body (after the first line) are examples,
    expected output or argument lists, not the author's prose claims."""
    src = m.source
    indents = [
        len(src.line_text(n)) - len(src.line_text(n).lstrip())
        for n in range(2, src.line_count + 1)
        if src.line_text(n).strip()
    ]
    if not indents:
        return
    base = min(indents)
    for n in range(2, src.line_count + 1):
        line = src.line_text(n)
        if line.strip() and len(line) - len(line.lstrip()) > base:
            m.blank_line(n)


class DocsFrontend:
    language = "markdown"
    extensions = (".md", ".markdown", ".rst")

    def parse(self, display_path: str, data: bytes, settings: Settings) -> DocFile:
        return DocFile(display_path, decode(data), settings)

    def run(self, parsed: DocFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return run_rules(parsed, rules, lambda kind: parsed.nodes_by_type.get(kind, ()))

    def noqa_lines(self, parsed: DocFile) -> dict[int, frozenset[str]]:
        if not parsed.rst:
            return noqa_by_line(parsed.source)
        return noqa_by_line(parsed.source, lambda line: re.sub(r"^\s*\.\.\s+noqa", "# noqa", line))

    def noqa_comments(self, parsed: DocFile) -> list[NoqaComment]:
        # Markdown's `<!-- noqa -->` only: a `# noqa` in a code block is part of the example
        # shown, and reStructuredText's `.. noqa` directive is left as written.
        return [] if parsed.rst else noqa_comments_by_line(parsed.source, "<!--")


FRONTEND = DocsFrontend()
