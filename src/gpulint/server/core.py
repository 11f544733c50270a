"""What the language server does, without the protocol: find the configuration of a document,
lint its in-memory text, and build fix and noqa edits. Plain data in and out, so it is tested
without a client; gpulint.server.lsp turns it into LSP messages.
"""

from __future__ import annotations

import functools
import io
import json
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpulint.config import Config, ConfigError, load_config
from gpulint.diagnostics import ENGINE_CODES, UNUSED_NOQA, Edit, Finding
from gpulint.engine import Linter, evidence_notes
from gpulint.fixes import apply_edits, still_parses
from gpulint.hardware import UnknownTargetError
from gpulint.noqa import NoqaPlanner
from gpulint.registry import frontend_for
from gpulint.ruledocs import noqa_comment
from gpulint.source import SourceText
from gpulint.supervisor import lint_bytes_budgeted

# An editor's languageId -> a file extension gpulint's front-ends know, for documents whose own
# name does not say (unsaved buffers, files without an extension).
LANGUAGE_EXTENSIONS = {
    "python": ".py",
    "cuda": ".cu",
    "cuda-cpp": ".cu",
    "cpp": ".cpp",
    "c": ".h",
    "markdown": ".md",
    "shellscript": ".sh",
    "sh": ".sh",
    "bash": ".sh",
    "yaml": ".yaml",
    "dotenv": ".env",
}
CONFIG_FILE = "pyproject.toml"


@dataclass
class LintResult:
    shown: str  # the name the engine linted the text as (front-end choice, per-file-ignores)
    text: str  # the text positions refer to (the document's text without a BOM)
    findings: list[Finding] = field(default_factory=list)
    language: str | None = None  # front-end language, None when no front-end claims the file
    bom: bool = False  # the document starts with U+FEFF, which the engine does not count
    # Filled by `prepare` (off the event loop, after the diagnostics are out): the fixes that
    # passed verification (by id) and every fix of the file as one edit. None: not yet.
    verified_fixes: set[int] | None = None
    fix_all: Edit | None = None
    # the folder `shown` and the findings' related paths are relative to (the config's root)
    root: Path | None = None
    # A notebook cell's result: every cell of its notebook as (cell document URI, text), in
    # order (Finding.cell and Related.cell index it from 1); None for a text document.
    cells: list[tuple[str, str]] | None = None

    @functools.cached_property
    def source(self) -> SourceText:
        # Once per result: every position conversion of every request reads its line table.
        return SourceText(self.text)

    @functools.cached_property
    def noqa(self) -> NoqaPlanner:
        return NoqaPlanner(self.text, self.language)

    def prepare(self) -> None:
        """Check the fixes once per document version, so code actions only look results up:
        all of them applied together must leave a file that parses (Python: `ast`; the CLI's
        `--fix` adds libcst and a re-lint, seconds on a long file, too slow for typing); if not,
        each on its own. Also builds the noqa line map."""
        self.noqa.target_line(1)
        fixable = [fix for f in self.findings if (fix := f.fix) and fix.edits]
        if not fixable:
            self.verified_fixes, self.fix_all = set(), None
            return
        new_text, _ = apply_edits(self.text, [e for fix in fixable for e in fix.edits])
        if _parses(new_text, self.shown):
            self.fix_all = minimal_edit(self.text, new_text) if new_text != self.text else None
            self.verified_fixes = {id(fix) for fix in fixable}
            return
        verified = set()
        for fix in fixable:
            alone, count = apply_edits(self.text, list(fix.edits))
            if count == len(set(fix.edits)) and _parses(alone, self.shown):
                verified.add(id(fix))
        self.verified_fixes, self.fix_all = verified, None


def _parses(text: str, shown: str) -> bool:
    if not shown.endswith((".py", ".pyi")):
        return True
    from gpulint.frontends import ParseError
    from gpulint.frontends.python import parse_python

    try:
        parse_python(text, shown)
    except ParseError:
        return False
    return True


class ConfigStore:
    """One Linter per configuration, reloaded when a pyproject.toml on the way up changes.

    The cache key of a directory is the modification stamp of every pyproject.toml from it up to
    the root, so an edited, created or deleted configuration is picked up on the next lint
    without relying on the client's file watching (which the server uses too, to re-lint).
    """

    def __init__(self, fallback_root: Path | None = None):
        self.fallback_root = (fallback_root or Path.cwd()).resolve()
        self._cache: dict[Path, tuple[tuple, Linter, str | None]] = {}

    def invalidate(self) -> None:
        self._cache.clear()

    @staticmethod
    def _stamp(directory: Path) -> tuple:
        stamp = []
        for d in [directory, *directory.parents]:
            candidate = d / CONFIG_FILE
            try:
                st = candidate.stat()
            except OSError:
                continue
            stamp.append((str(candidate), st.st_mtime_ns, st.st_size))
        return tuple(stamp)

    def linter_for(self, path: Path | None) -> tuple[Linter, str | None]:
        """The linter for a document at `path` (None: unsaved), and a configuration error."""
        directory = path.parent if path is not None else self.fallback_root
        stamp = self._stamp(directory)
        cached = self._cache.get(directory)
        if cached and cached[0] == stamp:
            return cached[1], cached[2]
        error = None
        try:
            config = load_config(directory)
            if config.source is None:
                config.root = self._root_without_config(directory)
            linter = Linter(config, _evidence(config))
        except (ConfigError, UnknownTargetError) as e:
            error = f"gpulint: configuration error: {e}; linting with the defaults"
            linter = Linter(Config(root=self._root_without_config(directory)))
        self._cache[directory] = (stamp, linter, error)
        return linter, error

    def _root_without_config(self, directory: Path) -> Path:
        directory = directory.resolve()
        if directory == self.fallback_root or self.fallback_root in directory.parents:
            return self.fallback_root
        return directory


def _evidence(config: Config) -> dict[str, str]:
    """The bench records `gpulint check` would quote in messages, so both say the same."""
    try:
        return evidence_notes(config)
    except Exception:  # unreadable records must not stop the editor's linting
        return {}


def document_name(path: Path | None, uri: str, language_id: str | None) -> str:
    """A file name whose extension picks the right front-end."""
    if path is not None:
        name = path.name
    else:  # untitled:Untitled-1, or another scheme's last path segment
        name = re.split(r"[/:]", uri.rstrip("/"))[-1] or "untitled"
    if frontend_for(name) is None and language_id in LANGUAGE_EXTENSIONS:
        name += LANGUAGE_EXTENSIONS[language_id]
    return name


def encode_like_disk(text: str) -> bytes:
    """The bytes a file with this text would hold: UTF-8 unless it declares another encoding
    (PEP 263 cookie), because the engine decodes bytes the way the file says."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return data
    if encoding in ("utf-8", "utf-8-sig"):
        return data
    try:
        return text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return data


def lint_text(
    linter: Linter, path: Path | None, uri: str, text: str, language_id: str | None
) -> LintResult:
    """Lint a document's in-memory text (not the file on disk)."""
    name = document_name(path, uri, language_id)
    if path is not None:
        shown = linter.relpath(path.with_name(name))
    else:
        shown = name
    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    frontend = frontend_for(shown)
    result = LintResult(
        shown,
        body,
        bom=bom,
        language=frontend.language if frontend else None,
        root=Path(linter.config.root) if path is not None else None,
    )
    if frontend is None or getattr(frontend, "by_cell", False):
        # A notebook's positions are per cell, which a text document (the .ipynb's JSON) has
        # not: a notebook is linted when the editor opens it as a notebook (LSP notebook
        # sync, `lint_notebook`), never with its findings on the JSON's lines.
        return result
    # In a supervised worker: a document that would take the analysis past the budget costs
    # its own GPU000 instead of blocking every request the editor sends.
    result.findings = lint_bytes_budgeted(linter, shown, encode_like_disk(body), shown)
    return result


# -- edits -----------------------------------------------------------------------------------
def fix_edits(result: LintResult, finding: Finding) -> list[Edit] | None:
    """The finding's own fix, if it applies cleanly and the file still parses afterwards."""
    if finding.fix is None or not finding.fix.edits:
        return None
    edits = sorted(set(finding.fix.edits))
    new_text, count = apply_edits(result.text, edits)
    if count != len(edits) or still_parses(new_text, result.shown) is not None:
        return None
    return edits


def fix_all_edit(result: LintResult) -> Edit | None:
    """Every fix of the file as one edit (what `gpulint check --fix` would write)."""
    edits = [e for f in result.findings if f.fix for e in f.fix.edits]
    if not edits:
        return None
    new_text, _ = apply_edits(result.text, edits)
    if new_text == result.text or still_parses(new_text, result.shown) is not None:
        return None
    return minimal_edit(result.text, new_text)


def minimal_edit(old: str, new: str) -> Edit:
    """One edit turning `old` into `new`, spanning only what differs."""
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return Edit(start, end_old, new[start:end_new])


_NOQA_CODES = re.compile(r"noqa:\s?[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*", re.IGNORECASE)


def noqa_edit(result: LintResult, finding: Finding) -> Edit | None:
    """Suppress `finding` with a noqa comment on its line (extending one already there)."""
    if finding.code in ENGINE_CODES or finding.code == UNUSED_NOQA or result.language is None:
        return None  # GPU000 and GPU001 are never suppressed; GPU003 is fixed by deleting
    source = result.source
    line = source.line_text(finding.line)
    line_end = source.offset(finding.line, len(line) + 1)
    existing = _NOQA_CODES.search(line)
    if existing:
        at = source.offset(finding.line, existing.end() + 1)
        return Edit(at, at, f", {finding.code}")
    comment = noqa_comment(result.language, finding.code)
    padding = "  " if comment.startswith("#") else " "
    if not line.strip():
        padding = ""
    return Edit(line_end, line_end, f"{padding}{comment}")


def _is_comment_on(text: str, line: int, code: str) -> bool:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    return any(
        t.type == tokenize.COMMENT and t.start[0] == line and code in t.string for t in tokens
    )


def suppresses(linter: Linter, result: LintResult, finding: Finding, edit: Edit) -> bool:
    """Whether `edit` makes `finding` go away without breaking the file (a comment inside a
    multi-line string or after a line continuation would not)."""
    new_text, _ = apply_edits(result.text, [edit])
    if still_parses(new_text, result.shown) is not None:
        return False
    if result.language == "python" and not _is_comment_on(new_text, finding.line, finding.code):
        return False  # the line ends inside a string: the text would change the string
    after, _ = linter.lint_bytes(result.shown, encode_like_disk(new_text), result.shown)
    if any(f.code in ENGINE_CODES for f in after):
        return False
    return not any(f.code == finding.code and f.line == finding.line for f in after)


# -- notebooks (LSP 3.17 notebook document sync) ---------------------------------------------
# A cell as the editor holds it: (cell document URI, kind, text). Kind: "code" (a Python cell),
# "markdown", or "raw" (a code cell in another language: counted, never analysed).
NotebookCell = tuple[str, str, str]


def notebook_json(cells: Sequence[NotebookCell], metadata: object = None) -> str:
    """The nbformat 4 text of the editor's cells, for the notebook front-end `gpulint check`
    reads .ipynb files with: the same masking, cell numbering, noqa and cross-cell facts."""
    out = []
    for _, kind, text in cells:
        cell: dict = {"cell_type": kind, "metadata": {}, "source": text}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        out.append(cell)
    meta = metadata if isinstance(metadata, dict) else {}
    return json.dumps({"cells": out, "metadata": meta, "nbformat": 4, "nbformat_minor": 5})


def lint_notebook(
    linter: Linter, path: Path | None, uri: str, cells: Sequence[NotebookCell], metadata=None
) -> dict[str, LintResult]:
    """Lint a notebook's in-memory cells as one notebook; the result of each cell, by its
    URI, with the findings placed in that cell (positions within the cell's text)."""
    name = path.name if path is not None else re.split(r"[/:]", uri.rstrip("/"))[-1]
    if not name.endswith(".ipynb"):
        name = (name or "untitled") + ".ipynb"
    shown = linter.relpath(path.with_name(name)) if path is not None else name
    data = notebook_json(cells, metadata).encode("utf-8")
    findings = lint_bytes_budgeted(linter, shown, data, shown)
    root = Path(linter.config.root) if path is not None else None
    texts = [(cell_uri, text) for cell_uri, _, text in cells]
    results = {
        cell_uri: LintResult(shown, text, language="python", root=root, cells=texts)
        for cell_uri, _, text in cells
    }
    first = cells[0][0] if cells else None
    for f in findings:
        # A finding of the whole notebook (GPU000 of a notebook that cannot be read) has no
        # cell: it goes on the first cell.
        at = cells[f.cell - 1][0] if f.cell and 0 < f.cell <= len(cells) else first
        if at is not None:
            results[at].findings.append(f)
    return results
