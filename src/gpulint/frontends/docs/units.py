"""A masked document cut into prose units (paragraphs, list items, table rows, headings)
for gpulint.claims, each with its section, its neighbourhood (a measured table or figure
nearby, a dated news item) and the evidence references attached to it."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from gpulint.claims import ABSOLUTE, Unit
from gpulint.frontends.docs.masking import (
    HEADING,
    LIST_ITEM,
    RST_UNDERLINE,
    TABLE_ROW,
    TABLE_RULE,
    Masker,
)
from gpulint.source import SourceText

_EVIDENCE_URL = re.compile(r"gpulint/evidence/[^)\s>]*\.json$|\.json$", re.IGNORECASE)
_CITATION_URL = re.compile(
    r"arxiv\.org|openreview\.net|aclanthology|proceedings|paperswithcode|/blog|blog\.|medium\.com"
    r"|benchmark|\.pdf\b|/releases?/|developer\.nvidia\.com/blog|pytorch\.org/blog"
    r"|\.(?:txt|log|csv|json|ipynb)$|#(?:benchmark|performance|result)",
    re.IGNORECASE,
)
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


@dataclass(frozen=True)
class DocUnit:
    """A prose unit of a document (see gpulint.claims.Unit), as rules see it."""

    unit: Unit
    line: int
    col: int

    @property
    def span(self) -> tuple[int, int, int, int]:
        return self.line, self.col, self.line, self.col + 1


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
        elif TABLE_ROW.match(raw_line):
            flush(kind)
            if not TABLE_RULE.match(raw_line):
                current.append((offset, line))
                flush("table-row")
            kind = "paragraph"
        elif HEADING.match(raw_line) and not rst:
            flush(kind)
            current.append((offset, line))
            flush("heading")
            kind = "paragraph"
        elif LIST_ITEM.match(line):
            flush(kind)
            current.append((offset, line))
            kind = "list-item"
        elif rst and i + 1 < len(lines) and RST_UNDERLINE.match(raw_lines[i + 1] or "x"):
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
