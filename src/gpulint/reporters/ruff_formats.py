"""ruff's other output formats, for tools that read them: `json-lines` (one finding per line,
each the object the `json` format lists), `rdjson` (reviewdog's Diagnostic Format, with fixes
as suggestions) and `pylint` (`path:line: [CODE] message`, what pylint-aware tools parse)."""

from __future__ import annotations

import json
from collections.abc import Callable

from gpulint.diagnostics import Finding, Severity, rule_url
from gpulint.safeio import escape
from gpulint.source import SourceText


def render_json_lines(findings: list[Finding], **_: object) -> str:
    return "".join(json.dumps(f.to_dict()) + "\n" for f in findings)


def render_pylint(findings: list[Finding], **_: object) -> str:
    # ruff's pylint format: `path:row: [CODE] message`, no column.
    # In a notebook, `path:cell N:row:` (as the other text formats name the cell).
    return "".join(
        f"{escape(f.path)}:{'' if f.cell is None else f'cell {f.cell}:'}{f.line}: "
        f"[{f.code}] {escape(f.message)}\n"
        for f in findings
    )


_RD_SEVERITY = {Severity.ERROR: "ERROR", Severity.WARNING: "WARNING", Severity.INFO: "INFO"}


def render_rdjson(
    findings: list[Finding], *, read_text: Callable[[str], str | None] | None = None, **_: object
) -> str:
    """reviewdog's rdjson. Its columns are 1-based UTF-8 byte counts; gpulint's count code
    points, so each is converted on the line's text (where the file can be read again)."""
    from gpulint.reporters import finding_source

    sources: dict = {}

    def source(path: str, cell: int | None = None) -> SourceText | None:
        return finding_source(read_text, path, cell, sources)

    def position(path: str, line: int, col: int, cell: int | None = None) -> dict:
        src = source(path, cell)
        column = src.utf8_from_col(line, col) + 1 if src is not None else col
        return {"line": line, "column": column}

    diagnostics = []
    for f in findings:
        start = position(f.path, f.line, f.col, f.cell)
        end = position(f.path, f.end_line or f.line, f.end_col or f.col, f.cell)
        # A notebook's lines count within the cell: the message names it.
        cell = "" if f.cell is None else f"cell {f.cell}: "
        item: dict = {
            "message": cell + f.message,
            "location": {"path": f.path, "range": {"start": start, "end": end}},
            "severity": _RD_SEVERITY[f.severity],
            "code": {"value": f.code, "url": rule_url(f.code)},
        }
        if f.related:
            item["related_locations"] = [
                {
                    "message": r.message,
                    "location": {
                        "path": r.path,
                        "range": {
                            "start": position(r.path, r.line, r.col, r.cell),
                            "end": position(
                                r.path, r.end_line or r.line, r.end_col or r.col, r.cell
                            ),
                        },
                    },
                }
                for r in f.related
            ]
        src = source(f.path, f.cell) if f.fix is not None else None
        if f.fix is not None and src is not None:
            item["suggestions"] = [
                {
                    "range": {
                        "start": position(f.path, *src.position(edit.start), f.cell),
                        "end": position(f.path, *src.position(edit.end), f.cell),
                    },
                    "text": edit.text,
                }
                for edit in f.fix.edits
            ]
        diagnostics.append(item)
    payload = {
        "source": {"name": "gpulint", "url": "https://github.com/gpulint/gpulint"},
        "severity": "WARNING",
        "diagnostics": diagnostics,
    }
    return json.dumps(payload, indent=2) + "\n"
