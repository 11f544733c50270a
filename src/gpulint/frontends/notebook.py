"""The Jupyter notebook front-end (`.ipynb`, nbformat 4), as ruff reads notebooks.

A notebook is JSON; its code cells are Python. The code cells are joined, in order, into one
Python source (each cell ending in a newline), which the Python front-end analyses exactly as it
would a `.py` file: the same rules, facts, `noqa` comments (per cell line) and per-file-ignores.
Findings are then placed back in their cell: `Finding.cell` is the cell's 1-based position among
all the notebook's cells (markdown and raw cells count, as ruff counts them), and line and column
are within that cell's source. A fix's edits are character offsets into that cell's source.

IPython syntax is not Python: a line magic (`%time f()`, `x = %env`), a shell escape (`!pip
install`, `files = !ls`) and a help request (`obj?`, `??obj`) are masked out line by line
(replaced by `pass` at their indentation, so every other line keeps its number and columns);
a cell magic first line (`%%time`) is masked when the magic runs the cell as Python, and a cell
that starts with any other cell magic (`%%bash`, `%%html`, `%%writefile`) is skipped, as are
markdown and raw cells and every cell of a notebook whose kernel is not Python. A line inside a
multi-line string or bracket is never taken for a magic.

A file that is not a notebook (invalid JSON, the wrong shape, another nbformat) is one GPU000
for that file; the run goes on. A fix is written into the cell sources only: the notebook's
bytes outside the rewritten `source` values (outputs, metadata, execution counts, indentation,
newlines, key order) stay as they were (see `Notebook.with_sources`). A fix that would span
two cells or touch a masked line is not offered.
"""

from __future__ import annotations

import functools
import io
import json
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpulint.diagnostics import ENGINE_CODES, Edit, Finding, Fix
from gpulint.frontends import ParseError
from gpulint.frontends.python import FRONTEND as PYTHON
from gpulint.frontends.python import parse_python
from gpulint.frontends.python.file import PythonFile
from gpulint.settings import Settings
from gpulint.source import SourceText

_NEWLINE = re.compile(r"\r\n|\r|\n")  # as SourceText and Python's tokenizer count lines
# Cell magics whose body IPython runs as Python (ruff's list): only the first line is masked.
PYTHON_CELL_MAGICS = frozenset(
    {"time", "timeit", "capture", "debug", "prun", "pypy", "python", "python3"}
)
# `x = %magic` / `a, b = !cmd`: an assignment from a line magic or a shell escape.
_ASSIGNED_MAGIC = re.compile(r"^\s*[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!]")
MAX_CELLS = 100_000  # a notebook with more cells is not one anybody wrote: reported, not parsed


@dataclass(frozen=True)
class Cell:
    number: int  # 1-based position among all cells
    kind: str  # "code", "markdown", "raw"
    source: str  # the cell's source, joined
    span: tuple[int, int]  # where the `source` value lies in the notebook's text
    as_list: bool  # the value is a list of lines (nbformat's usual form), not one string
    masked: frozenset[int]  # 1-based lines replaced by `pass` (magics)
    analysed: str | None  # the masked source the analysis sees; None: cell not analysed
    first_line: int = 0  # its first line in the joined source (0: not analysed)
    start: int = 0  # character offset of its first line in the joined source
    lines: int = 0  # how many lines of the joined source it holds


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in _NEWLINE.finditer(text))]


def _lines(text: str) -> list[str]:
    starts = _line_starts(text)
    ends = [*starts[1:], len(text)]
    return [text[a:b] for a, b in zip(starts, ends, strict=True)]


def _magic_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    if stripped[0] in "%!?":
        return True
    if stripped.endswith("?") and "#" not in stripped:  # `obj?`, `obj??`
        return True
    return bool(_ASSIGNED_MAGIC.match(line))


def _continuations(text: str) -> set[int]:
    """1-based lines that continue a statement (inside a multi-line string or brackets, or
    after a backslash): there a `%` or `!` at the start is Python, never a magic."""
    out: set[int] = set()
    depth = 0
    last_line = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.start[0] > last_line and depth > 0:
                out.update(range(last_line + 1, tok.start[0] + 1))
            if tok.end[0] > tok.start[0]:  # a token over several lines: a string
                out.update(range(tok.start[0] + 1, tok.end[0] + 1))
            if tok.type == tokenize.OP:
                if tok.string in "([{":
                    depth += 1
                elif tok.string in ")]}":
                    depth = max(depth - 1, 0)
            last_line = max(last_line, tok.end[0])
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    for number, line in enumerate(_lines(text), 1):
        if line.rstrip("\r\n").endswith("\\"):
            out.add(number + 1)
    return out


def mask(source: str) -> tuple[str | None, frozenset[int]]:
    """The cell's source as the analysis sees it, and the lines masked; None: not Python."""
    lines = _lines(source)
    if not lines:
        return source, frozenset()
    first = lines[0].strip()
    masked: set[int] = set()
    if first.startswith("%%"):
        name = first[2:].split(None, 1)[0] if first[2:].strip() else ""
        if name not in PYTHON_CELL_MAGICS:
            return None, frozenset()
        masked.add(1)
    candidates = {n for n, line in enumerate(lines, 1) if n not in masked and _magic_line(line)}
    if not candidates and not masked:
        return source, frozenset()
    masked |= candidates

    def render(which: set[int]) -> str:
        out = []
        for n, line in enumerate(lines, 1):
            if n in which:
                body = line.rstrip("\r\n")
                indent = body[: len(body) - len(body.lstrip())]
                out.append(f"{indent}pass{line[len(body) :]}")
            else:
                out.append(line)
        return "".join(out)

    if candidates:  # a candidate inside a string or brackets is Python after all
        inside = _continuations(render(masked)) & candidates
        masked -= inside
    return render(masked), frozenset(masked)


class Notebook:
    """A notebook's cells and the Python source its code cells make."""

    def __init__(self, text: str, data: dict[str, Any], cells: list[Cell], python: bool):
        self.text = text
        self.data = data
        self.python = python  # the kernel runs Python (or says nothing else)
        self.cells: list[Cell] = []
        parts: list[str] = []
        line, offset = 1, 0
        for cell in cells:
            if cell.analysed is not None and cell.analysed and python:
                body = cell.analysed
                if not body.endswith(("\n", "\r")):
                    body += "\n"
                count = len(_line_starts(body)) - 1
                cell = replace(cell, first_line=line, start=offset, lines=count)
                parts.append(body)
                line += count
                offset += len(body)
            self.cells.append(cell)
        self.source = "".join(parts)
        self._analysed = [c for c in self.cells if c.first_line]
        self._firsts = [c.first_line for c in self._analysed]

    @classmethod
    def from_text(cls, text: str) -> Notebook:
        return _read(text)

    def cell(self, number: int) -> Cell:
        return self.cells[number - 1]

    def locate(self, line: int) -> tuple[Cell, int] | None:
        """The cell holding line `line` of the joined source, and the line within it."""
        import bisect

        i = bisect.bisect_right(self._firsts, line) - 1
        if i < 0:
            return None
        cell = self._analysed[i]
        if line >= cell.first_line + cell.lines:
            return None  # past the end of the joined source
        return cell, line - cell.first_line + 1

    # -- edits between the joined source and the cells ----------------------------------------
    def cell_offset(self, cell: Cell, offset: int) -> tuple[int, int] | None:
        """A joined-source offset inside `cell` as (offset in the cell's own source, line);
        None where it is outside the cell."""
        assert cell.analysed is not None
        local = offset - cell.start
        if local < 0 or local > len(cell.analysed):
            return None
        masked = SourceText(cell.analysed)
        line, col = masked.position(local)
        starts = _line_starts(cell.source)
        if line > len(starts):
            return None
        return starts[line - 1] + col - 1, line

    def joined_offset(self, cell: Cell, offset: int) -> int:
        """An offset into the cell's own source as an offset into the joined source (on a line
        that is not masked: masked lines may differ in length)."""
        assert cell.analysed is not None
        line, col = SourceText(cell.source).position(offset)
        return cell.start + _line_starts(cell.analysed)[line - 1] + col - 1

    # -- writing back -------------------------------------------------------------------------
    def with_sources(self, sources: dict[int, str]) -> str:
        """The notebook's text with the `source` of the cells numbered in `sources` replaced,
        each written the way it was (a list of lines or one string, the list laid out as the
        file lays out its lists); every other character of the text is kept."""
        text = self.text
        ascii_only = text.isascii()
        style = _list_style(self)
        for number in sorted(sources, reverse=True):
            cell = self.cell(number)
            new = sources[number]
            if cell.source == new:
                continue
            a, b = cell.span
            if cell.as_list:
                value = _write_list(new, text[a:b], style, ascii_only)
            else:
                value = json.dumps(new, ensure_ascii=ascii_only)
            text = text[:a] + value + text[b:]
        return text


def _write_list(new: str, old: str, style: tuple[str, str, str] | None, ascii_only: bool) -> str:
    parts = [json.dumps(line, ensure_ascii=ascii_only) for line in new.splitlines(keepends=True)]
    lead, sep, trail = _own_style(old) or style or ("", " ", "")
    if not parts:
        return "[]"
    return "[" + lead + ("," + sep).join(parts) + trail + "]"


def _own_style(value: str) -> tuple[str, str, str] | None:
    """(after `[`, after each `,`, before `]`) of a list with two elements or more."""
    try:
        items = json.loads(value)
    except ValueError:
        return None
    if not isinstance(items, list) or len(items) < 2:
        return None
    decoder = json.JSONDecoder()
    i = 1
    j = _skip(value, i)
    lead = value[i:j]
    _, end = decoder.raw_decode(value, j)
    k = _skip(value, end)
    if value[k : k + 1] != ",":
        return None
    m = _skip(value, k + 1)
    sep = value[k + 1 : m]
    last_end = len(value) - 1
    trail_start = last_end
    while trail_start > 0 and value[trail_start - 1] in " \t\r\n":
        trail_start -= 1
    return lead, sep, value[trail_start:last_end]


def _list_style(nb: Notebook) -> tuple[str, str, str] | None:
    for cell in nb.cells:
        if cell.as_list:
            found = _own_style(nb.text[cell.span[0] : cell.span[1]])
            if found is not None:
                return found
    return None


_WS = re.compile(r"[ \t\n\r]*")
# (text, index after the opening quote) -> (the string, index after the closing quote)
_scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]


def _skip(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return match.end() if match else i


def _members(text: str, i: int) -> Iterable[tuple[str, int, int]]:
    """(key, value start, value end) of the JSON object at `text[i]` (already validated)."""
    decoder = json.JSONDecoder()
    i = _skip(text, i + 1)
    if text[i] == "}":
        return
    while True:
        key, i = _scanstring(text, i + 1)
        i = _skip(text, i)
        i = _skip(text, i + 1)  # the colon
        start = i
        _, i = decoder.raw_decode(text, i)
        yield key, start, i
        i = _skip(text, i)
        if text[i] == "}":
            return
        i = _skip(text, i + 1)  # the comma


def _elements(text: str, i: int) -> Iterable[tuple[int, int]]:
    decoder = json.JSONDecoder()
    i = _skip(text, i + 1)
    if text[i] == "]":
        return
    while True:
        start = i
        _, i = decoder.raw_decode(text, i)
        yield start, i
        i = _skip(text, i)
        if text[i] == "]":
            return
        i = _skip(text, i + 1)


def _bad(why: str) -> ParseError:
    return ParseError(f"not a valid notebook: {why}; skipped")


def _read(text: str) -> Notebook:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(
            f"not a valid notebook: invalid JSON: {e.msg}", e.lineno, e.colno
        ) from None
    except (ValueError, RecursionError):
        raise _bad("invalid JSON") from None
    if not isinstance(data, dict):
        raise _bad("the top level is not a JSON object")
    if "worksheets" in data or data.get("nbformat", 4) != 4:
        raise _bad(f"nbformat {data.get('nbformat')!r}; only nbformat 4 is read")
    raw_cells = data.get("cells")
    if not isinstance(raw_cells, list):
        raise _bad('no "cells" list')
    if len(raw_cells) > MAX_CELLS:
        raise _bad(f"{len(raw_cells):,} cells")
    metadata = data.get("metadata")
    language = None
    if isinstance(metadata, dict):
        info = metadata.get("language_info")
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            language = info["name"].lower()
        spec = metadata.get("kernelspec")
        if language is None and isinstance(spec, dict) and isinstance(spec.get("language"), str):
            language = spec["language"].lower()
    python = language in (None, "python", "python3", "ipython", "ipython3")
    # Where each cell's `source` lies in the text (the text was validated above).
    spans: list[tuple[int, int] | None] = []
    try:
        top = _skip(text, 0)
        for key, start, _end in _members(text, top):
            if key != "cells":
                continue
            spans = []  # duplicate keys: the last one wins, as json.loads
            for c_start, _c_end in _elements(text, start):
                span = None
                if text[c_start] == "{":
                    for ck, vs, ve in _members(text, c_start):
                        if ck == "source":
                            span = (vs, ve)
                spans.append(span)
    except (ValueError, IndexError, RecursionError):
        raise _bad("cannot locate the cell sources") from None
    if len(spans) != len(raw_cells):
        raise _bad("cannot locate the cell sources")
    cells = []
    for number, (raw, span) in enumerate(zip(raw_cells, spans, strict=True), 1):
        if not isinstance(raw, dict) or not isinstance(raw.get("cell_type"), str):
            raise _bad(f"cell {number} is not a cell object")
        source = raw.get("source", "")
        as_list = isinstance(source, list)
        if as_list:
            if not all(isinstance(s, str) for s in source):
                raise _bad(f"cell {number}: source is not a list of strings")
            source = "".join(source)
        elif not isinstance(source, str):
            raise _bad(f"cell {number}: source is not a string or a list of strings")
        kind = raw["cell_type"]
        analysed: str | None = None
        masked: frozenset[int] = frozenset()
        if kind == "code" and span is not None:
            analysed, masked = mask(source)
        cells.append(Cell(number, kind, source, span or (0, 0), as_list, masked, analysed))
    return Notebook(text, data, cells, python)


@functools.lru_cache(maxsize=4)
def load(data: bytes) -> Notebook:
    """The notebook in `data` (UTF-8 JSON, a BOM allowed); ParseError when it is none."""
    if len(data) and b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ParseError("binary file (NUL bytes), not a notebook; skipped")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ParseError(f"not a valid notebook: not UTF-8 ({e.reason})", line) from None
    return _read(text.removeprefix("\ufeff"))


def cell_source(text: str, cell: int) -> str | None:
    """The source of cell `cell` of the notebook `text` (for reporters that quote a line)."""
    try:
        nb = _read(text.removeprefix("\ufeff"))
    except ParseError:
        return None
    if not 1 <= cell <= len(nb.cells):
        return None
    return nb.cell(cell).source


class NotebookFile(PythonFile):
    """The joined code cells as a Python file, with the notebook they came from."""

    def __init__(self, display_path: str, notebook: Notebook):
        self.notebook = notebook
        super().__init__(display_path, notebook.source, _parse(notebook, display_path))


def _parse(nb: Notebook, display_path: str):
    try:
        return parse_python(nb.source, display_path)
    except ParseError as e:
        where = nb.locate(e.line)
        if where is None and nb._analysed:  # at the end of the source: the last cell's end
            last = nb._analysed[-1]
            where = (last, last.lines)
        if where is None:
            raise
        cell, line = where
        message = relabel(str(e), nb, display_path)  # "... on line 12": the cell's line
        raise ParseError(message, line, e.col, cell=cell.number) from None


class NotebookFrontend:
    language = "python"  # the Python rules, on the joined code cells
    extensions = (".ipynb",)
    # Findings are placed by cell: a tool that shows a file's lines (flake8, the language
    # server's text documents) cannot show them, and leaves notebooks alone.
    by_cell = True

    def gate_bytes(self, data: bytes) -> bytes:
        """What the rules' textual gates are tested on: the joined code cells (the JSON text
        escapes quotes, backslashes and newlines)."""
        return load(data).source.encode("utf-8", "replace")

    def parse(self, display_path: str, data: bytes, settings: Settings) -> NotebookFile:
        return NotebookFile(display_path, load(data))

    def run(self, parsed: NotebookFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return PYTHON.run(parsed, rules)

    def noqa_lines(self, parsed: NotebookFile) -> dict[int, frozenset[str]]:
        return PYTHON.noqa_lines(parsed)

    def place(self, parsed: NotebookFile, findings: list[Finding]) -> list[Finding]:
        """Findings on the joined source, placed in their cells (after noqa was applied)."""
        return [place_finding(parsed, f) for f in findings]


def place_finding(parsed: NotebookFile, f: Finding) -> Finding:
    nb = parsed.notebook
    if f.code in ENGINE_CODES or f.cell is not None:
        return f
    placed = _place_span(nb, f.line, f.end_line, f.end_col)
    if placed is None:
        return f
    cell, line, end_line, end_col = placed
    related = tuple(_place_related(nb, r) if r.path == f.path else r for r in f.related)
    return replace(
        f,
        message=relabel(f.message, nb, f.path),
        cell=cell.number,
        line=line,
        end_line=end_line,
        end_col=end_col,
        fix=_place_fix(nb, cell, f.fix),
        related=related,
    )


def _place_span(nb: Notebook, line: int, end_line: int | None, end_col: int | None):
    """(cell, line, end line, end column) in the cell's terms of a span of the joined source;
    the end is dropped when it lies in another cell. None: not in a code cell."""
    where = nb.locate(line)
    if where is None:
        return None
    cell, line = where
    if end_line:
        end = nb.locate(end_line)
        end_line, end_col = (end[1], end_col) if end and end[0] is cell else (None, None)
    return cell, line, end_line, end_col


def _place_related(nb: Notebook, r):
    placed = _place_span(nb, r.line, r.end_line, r.end_col)
    if placed is None:
        return r
    cell, line, end_line, end_col = placed
    return replace(
        r,
        message=relabel(r.message, nb, r.path),
        cell=cell.number,
        line=line,
        end_line=end_line,
        end_col=end_col,
    )


# `line 12`, but not `line 12 of other.py` nor `line 12 in `fn`` (GPU510's line of another
# module, named beside it): those are lines of other files.
_LINE_WORD = re.compile(r"\bline (\d+)\b(?! of )(?! in `)")


def relabel(message: str, nb: Notebook, path: str) -> str:
    """A message's references to lines of the joined source (`the step loop at line 12`,
    `nb.ipynb:12`) in the notebook's terms: `cell 5, line 2`, `nb.ipynb:cell 5:2`."""
    if not any(ch.isdigit() for ch in message):
        return message

    def cell_line(number: str) -> tuple[int, int] | None:
        where = nb.locate(int(number))
        return (where[0].number, where[1]) if where else None

    def word(m: re.Match[str]) -> str:
        found = cell_line(m.group(1))
        return f"cell {found[0]}, line {found[1]}" if found else m.group(0)

    message = _LINE_WORD.sub(word, message)
    names = {path, path.rsplit("/", 1)[-1]}
    for name in sorted(names, key=len, reverse=True):
        pattern = re.compile(r"(?<![\w./-])" + re.escape(name) + r":(\d+)\b")

        def place(m: re.Match[str], name: str = name) -> str:
            found = cell_line(m.group(1))
            return f"{name}:cell {found[0]}:{found[1]}" if found else m.group(0)

        message = pattern.sub(place, message)
    return message


def _place_fix(nb: Notebook, cell: Cell, fix: Fix | None) -> Fix | None:
    """The fix with its edits as offsets into the cell's own source; None (no fix offered)
    when an edit lies outside the finding's cell or touches a masked line."""
    if fix is None:
        return None
    edits = []
    for e in fix.edits:
        start = nb.cell_offset(cell, e.start)
        end = nb.cell_offset(cell, e.end)
        if start is None or end is None:
            return None
        if any(n in cell.masked for n in range(start[1], end[1] + 1)):
            return None
        edits.append(Edit(start[0], end[0], e.text))
    return Fix(fix.description, tuple(edits))


FRONTEND = NotebookFrontend()
