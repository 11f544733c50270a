"""What a rule reports: findings, their positions and their fixes."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

RULE_PAGE = "https://github.com/gpulint/gpulint/blob/main/docs/rules/{code}.md"


def rule_url(code: str) -> str:
    """The rule's documentation page (SARIF's helpUri, LSP's codeDescription, rdjson)."""
    return RULE_PAGE.format(code=code)


class Severity(enum.Enum):
    ERROR = "error"  # wrong or broken code
    WARNING = "warning"  # costs real speed
    INFO = "info"  # worth a look

    @property
    def sarif_level(self) -> str:
        return {"error": "error", "warning": "warning", "info": "note"}[self.value]


@dataclass(frozen=True, order=True)
class Edit:
    """Replace text[start:end] (character offsets into the decoded file) with `text`."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]


@dataclass(frozen=True)
class Related:
    """Another place that explains a finding: a call on the way down to it, the line in a
    callee that syncs. 1-based line and code-point column, end exclusive, as a finding's."""

    path: str
    line: int
    col: int
    message: str
    end_line: int | None = None
    end_col: int | None = None
    cell: int | None = None  # a notebook's cell (as Finding.cell)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "message": self.message,
        }
        if self.end_line:
            out["end_line"] = self.end_line
            out["end_col"] = self.end_col
        if self.cell is not None:
            out["cell"] = self.cell
        return out

    @property
    def where(self) -> str:
        return where(self.line, self.col, self.cell)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Related:
        return cls(
            str(d["path"]),
            int(d["line"]),
            int(d["col"]),
            str(d["message"]),
            d.get("end_line"),
            d.get("end_col"),
            d.get("cell"),
        )


@dataclass(frozen=True)
class Finding:
    """One finding. Lines and columns are 1-based; columns count code points; end is exclusive.

    In a notebook (`.ipynb`), `cell` is the cell's 1-based position among all its cells, line
    and column are within that cell's source, and the fix's edits are offsets into it."""

    path: str
    line: int
    col: int
    code: str
    message: str
    severity: Severity
    end_line: int | None = None
    end_col: int | None = None
    fix: Fix | None = field(default=None, compare=False)
    related: tuple[Related, ...] = field(default=(), compare=False)
    # what a `gpulint trace` of this line found: "confirmed" or "not observed" (None: no trace)
    trace: str | None = field(default=None, compare=False)
    cell: int | None = None  # a notebook's cell, 1-based among all its cells (None: a file)

    def sort_key(self) -> tuple[str, int, int, int, str, str]:
        return (self.path, self.cell or 0, self.line, self.col, self.code, self.message)

    @property
    def where(self) -> str:
        """`line:col`, or `cell N:line:col` in a notebook (ruff's form)."""
        return where(self.line, self.col, self.cell)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "fix": None,
        }
        if self.fix is not None:
            out["fix"] = {
                "description": self.fix.description,
                "edits": [{"start": e.start, "end": e.end, "text": e.text} for e in self.fix.edits],
            }
        if self.cell is not None:
            out["cell"] = self.cell
        if self.trace:
            out["trace"] = self.trace
        if self.related:
            out["related"] = [r.to_dict() for r in self.related]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        fix = None
        if d.get("fix"):
            fix = Fix(
                d["fix"]["description"],
                tuple(Edit(e["start"], e["end"], e["text"]) for e in d["fix"]["edits"]),
            )
        return cls(
            path=d["path"],
            line=d["line"],
            col=d["col"],
            code=d["code"],
            message=d["message"],
            severity=Severity(d["severity"]),
            trace=d.get("trace"),
            cell=d.get("cell"),
            end_line=d.get("end_line"),
            end_col=d.get("end_col"),
            fix=fix,
            related=tuple(Related.from_dict(r) for r in d.get("related") or ()),
        )


# GPU000 is the engine's own code: a file that could not be analysed (unreadable, not text,
# does not parse, over the time or memory budget). It is never suppressed, so nothing is
# silently skipped.
UNANALYSABLE = "GPU000"

# GPU001: gpulint itself failed on a file (an exception inside a rule's visit or finish, inside
# a front-end fact a rule asked for, or inside the front-end's parse or walk). One per rule and
# file, naming both; the other rules and files go on. It is a diagnostic on the run, not a
# finding about the code: never suppressed, never cached, carried where the notes go (stderr in
# text output, `diagnostics` in JSON, `toolExecutionNotifications` in SARIF, level error), and
# it makes the exit status 2 (EXIT_INTERNAL_ERROR), whatever the findings and `--exit-zero`.
INTERNAL_ERROR = "GPU001"

# Codes of the engine, not of a rule: never suppressed by `noqa` or per-file-ignores.
ENGINE_CODES = frozenset({UNANALYSABLE, INTERNAL_ERROR})

# GPU003 (gpulint.rules.gpu003_unused_noqa) judges the `noqa` comments themselves: writing a
# `noqa` for it (`--add-noqa`, the language server's suppress action) would only hide the advice
# to delete one.
UNUSED_NOQA = "GPU003"


def where(line: int, col: int, cell: int | None = None) -> str:
    """A place as the text formats print it: `line:col`, or ruff's `cell N:line:col`."""
    return f"{line}:{col}" if cell is None else f"cell {cell}:{line}:{col}"


def unanalysable(
    path: str, reason: str, line: int = 1, col: int = 1, cell: int | None = None
) -> Finding:
    return Finding(path, line, col, UNANALYSABLE, reason, Severity.ERROR, cell=cell)


def internal_error(
    path: str, where: str, error: BaseException | str, on: str = "this file"
) -> Finding:
    """GPU001 for `path`: `where` failed on it ("rule GPU802", "the cuda front-end")."""
    what = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    what = " ".join(what.split()) or "no message"
    return Finding(
        path,
        1,
        1,
        INTERNAL_ERROR,
        f"internal error in {where} on {on}: {what} (a gpulint bug: please report it)",
        Severity.ERROR,
    )


def internal_errors(findings: Iterable[Finding]) -> list[Finding]:
    """The GPU001 diagnostics among `findings` (what the robustness tests assert is empty)."""
    return [f for f in findings if f.code == INTERNAL_ERROR]


# Notes on the analysis, not on the code: GPU800 (lines the CUDA parser could not read). Each is
# said once per file, so no lines vanish silently, but a note is not a finding: it is not counted,
# does not set the exit status, and goes where the tool's other notes go (stderr in text output,
# a `diagnostics` list in JSON, `toolExecutionNotifications` in SARIF). GPU001 (an internal error)
# goes the same way, as an error that does set the exit status; GPU002 (a vendored copy left alone)
# as a note.
# GPU002: a file or folder left alone as a copy of another project's code (gpulint.vendored); a
# note on what was not checked, said once per file or folder (cached with the file's result).
VENDORED = "GPU002"
NOTE_CODES = frozenset({"GPU800", INTERNAL_ERROR, VENDORED})


def vendored_note(path: str, why: str) -> Finding:
    return Finding(
        path,
        1,
        1,
        VENDORED,
        f"not checked: a vendored copy ({why}); `--no-skip-vendored` checks it",
        Severity.INFO,
    )


def split_notes(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(findings, notes) of a list that may hold both."""
    if not any(f.code in NOTE_CODES for f in findings):
        return findings, []
    return (
        [f for f in findings if f.code not in NOTE_CODES],
        [f for f in findings if f.code in NOTE_CODES],
    )


def note_level(f: Finding) -> str:
    """ "error" for an internal error (GPU001), "note" for a note on the analysis (GPU800)."""
    return "error" if f.code == INTERNAL_ERROR else "note"


def note_line(f: Finding) -> str:
    """A note as the text output prints it on stderr (`path:line:col: note: CODE message`)."""
    from gpulint.safeio import escape

    return f"{escape(f.path)}:{f.where}: {note_level(f)}: {f.code} {escape(f.message)}"
