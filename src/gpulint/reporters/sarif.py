"""SARIF 2.1.0 as GitHub code scanning reads it: rules with their documentation, results with
repo-relative URIs, 1-based regions, stable fingerprints and fixes, within GitHub's limits.

GitHub's upload action computes `primaryLocationLineHash` itself (codeql-action's
`fingerprints.ts`) and warns about every result that already carries a different one, so ours
lives under its own key, `gpulintLineHash/v1`."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from gpulint import __version__
from gpulint.diagnostics import (
    INTERNAL_ERROR,
    UNANALYSABLE,
    VENDORED,
    Finding,
    Severity,
    note_level,
    rule_url,
)
from gpulint.rule import all_rules
from gpulint.ruledocs import rule_markdown, rule_text, short_summary
from gpulint.source import SourceText

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFO_URI = "https://github.com/gpulint/gpulint"
# GitHub code scanning's limits: results per run (more is rejected), characters of a rule's
# fullDescription (longer is cut off with a warning).
MAX_RESULTS = 25_000
MAX_DESCRIPTION = 1_000
FINGERPRINT_KEY = "gpulintLineHash/v1"
_SEVERITY_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _clip(text: str, limit: int = MAX_DESCRIPTION) -> str:
    """At most `limit` characters, cut at a word boundary with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut + "…"


def _rule_descriptors() -> list[dict]:
    rules = [
        {
            "id": UNANALYSABLE,
            "name": "unanalysable-file",
            "shortDescription": {"text": "A file that could not be analysed."},
            "fullDescription": {
                "text": "The file could not be read, decoded or parsed, or analysis failed on it."
            },
            "help": {
                "text": "Fix the file (or exclude it); gpulint reports it so nothing is skipped silently.",
                "markdown": "Fix the file (or exclude it); gpulint reports it so nothing is skipped silently.",
            },
            "helpUri": INFO_URI + "/blob/main/docs/integrations.md",
            "defaultConfiguration": {"level": "error"},
            "properties": {
                "tags": ["gpulint"],
                "precision": "very-high",
                "problem.severity": "error",
            },
        }
    ]
    rules.append(
        {
            "id": VENDORED,
            "name": "vendored-file-skipped",
            "shortDescription": {"text": "A copy of another project's code, not checked."},
            "fullDescription": {
                "text": "A file or folder recognised as vendored (a foreign licence header, a "
                "copied package, a submodule) and left alone; --no-skip-vendored checks it."
            },
            "help": {
                "text": "Run with --no-skip-vendored (or skip-vendored = false) to check it.",
                "markdown": "Run with `--no-skip-vendored` (or `skip-vendored = false`) to check it.",
            },
            "helpUri": INFO_URI + "/blob/main/README.md",
            "defaultConfiguration": {"level": "note"},
            "properties": {
                "tags": ["gpulint"],
                "precision": "high",
                "problem.severity": "recommendation",
            },
        }
    )
    for rule in all_rules():
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": _clip(short_summary(rule))},
                # GitHub cuts a fullDescription over 1,000 characters (with a warning); the whole
                # page is in help.
                "fullDescription": {"text": _clip(rule.summary())},
                "help": {"text": rule_text(rule), "markdown": rule_markdown(rule)},
                "helpUri": rule_url(rule.code),
                # Off by default outside the default tier: pedantic and preview rules run
                # only when selected (the results say what this run selected).
                "defaultConfiguration": {
                    "level": rule.severity.sarif_level,
                    "enabled": rule.tier == "default",
                },
                "properties": {
                    "tags": ["gpulint", "performance", *rule.tags],
                    "precision": rule.precision,
                    "tier": rule.tier,
                    "problem.severity": rule.severity.value
                    if rule.severity.value != "info"
                    else "recommendation",
                },
            }
        )
    return rules


def source_root(root: Path) -> Path:
    """The repository's top directory (the one holding `.git`) at or above `root`, else `root`.

    GitHub reads a result's `uri` relative to the repository, while the configuration root may be
    a subdirectory of it (a monorepo's `pyproject.toml`)."""
    root = root.resolve()
    for directory in (root, *root.parents):
        if (directory / ".git").exists():
            return directory
    return root


def _artifact(path: str, base: Path) -> dict:
    """A repo-relative, percent-encoded `uri` with `%SRCROOT%`, or a file URI outside it."""
    absolute = Path(os.path.abspath(path))
    # The path as the user has it first (a symbolic link inside the repository stays inside it),
    # then with links resolved (a checkout reached through a linked directory).
    for candidate in (absolute, Path(os.path.realpath(absolute))):  # never raises on a loop
        try:
            rel = candidate.relative_to(base)
        except ValueError:
            continue
        # The name's own bytes, percent-encoded (a file name need not be UTF-8).
        return {"uri": quote(os.fsencode(rel.as_posix())), "uriBaseId": "%SRCROOT%"}
    return {"uri": absolute.as_uri()}


def _line_hash(finding: Finding, line_text: str, occurrence: int) -> str:
    # Stable when unrelated lines move: the line's own content, not its number.
    basis = f"{finding.code}:{' '.join(line_text.split())}"
    return f"{hashlib.sha256(basis.encode()).hexdigest()[:16]}:{occurrence}"


def cap(findings: list[Finding], limit: int = MAX_RESULTS) -> tuple[list[Finding], Counter]:
    """At most `limit` findings, the most severe kept (in their original order), and a count of
    what was dropped per (code, severity)."""
    if len(findings) <= limit:
        return findings, Counter()
    ranked = sorted(range(len(findings)), key=lambda i: _SEVERITY_RANK[findings[i].severity])
    keep = set(ranked[:limit])
    dropped = Counter((f.code, f.severity.value) for i, f in enumerate(findings) if i not in keep)
    return [f for i, f in enumerate(findings) if i in keep], dropped


def _warn_dropped(total: int, dropped: Counter, warn) -> None:
    parts = ", ".join(
        f"{code} ({severity}) x{count:,}"
        for (code, severity), count in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    warn(
        f"gpulint: warning: SARIF run capped at {MAX_RESULTS:,} results (GitHub rejects more); "
        f"dropped the {sum(dropped.values()):,} least severe of {total:,}: {parts}"
    )


def render(
    findings: list[Finding],
    *,
    root: Path,
    read_text=None,
    warn=None,
    notes: Sequence[Finding] = (),
    **_: object,
) -> str:
    """`read_text(path) -> str | None` gives a file's text, for fingerprints and fixes;
    `warn(message)` hears about results dropped to keep within GitHub's limit (default: stderr).
    `notes` (GPU800: lines not analysed) are notes on the run, not results: they go to
    `invocations[0].toolExecutionNotifications`, level note, with the file's location. An
    internal error (GPU001) goes there too, level error, and `executionSuccessful` is false."""
    total = len(findings)
    findings, dropped = cap(findings)
    if dropped:
        _warn_dropped(total, dropped, warn or (lambda m: print(m, file=sys.stderr)))
    from gpulint.reporters import finding_source

    texts: dict = {}

    def source(path: str, cell: int | None = None) -> SourceText | None:
        return finding_source(read_text, path, cell, texts)

    base = source_root(root)
    descriptors = _rule_descriptors()
    index = {r["id"]: i for i, r in enumerate(descriptors)}
    seen: Counter = Counter()
    results = []
    for f in findings:
        artifact = _artifact(f.path, base)
        uri = artifact["uri"]
        src = source(f.path, f.cell)
        line_text = src.line_text(f.line) if src else ""
        key = (uri, f.cell, f.code, " ".join(line_text.split()))
        seen[key] += 1
        region = _region(f.line, f.col, f.end_line, f.end_col)
        result: dict = {
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, 0),
            "level": f.severity.sarif_level,
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": artifact,
                        "region": region,
                    }
                }
            ],
            "partialFingerprints": {FINGERPRINT_KEY: _line_hash(f, line_text, seen[key])},
        }
        properties: dict = {}
        if f.cell is not None:
            # A notebook: the region counts lines within the cell (as the text and JSON output
            # do), and the cell is named here and in the location's logical location.
            properties["cell"] = f.cell
            result["locations"][0]["logicalLocations"] = [
                {"name": f"cell {f.cell}", "kind": "module"}
            ]
        if f.related:
            # GitHub's convention: the result's message links each related location by its id
            # (`[text](id)`), literal brackets in the text escaped.
            result["message"] = {"text": _linked_message(f)}
            result["relatedLocations"] = [
                {
                    "id": i,
                    "physicalLocation": {
                        "artifactLocation": _artifact(r.path, base),
                        "region": _region(r.line, r.col, r.end_line, r.end_col),
                    },
                    "message": {"text": r.message},
                    **({"properties": {"cell": r.cell}} if r.cell is not None else {}),
                }
                for i, r in enumerate(f.related, 1)
            ]
        if f.fix is not None and src is not None:
            result["fixes"] = [_sarif_fix(f, artifact, src)]
        if f.trace:
            # what `gpulint trace` measured at this line: "confirmed" or "not observed"
            properties["traceStatus"] = f.trace
        if properties:
            result["properties"] = properties
        results.append(result)
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpulint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFO_URI,
                        "rules": descriptors,
                    }
                },
                "automationDetails": {"id": "gpulint/"},
                "originalUriBaseIds": {"%SRCROOT%": {"uri": base.as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "invocations": [
                    {
                        "executionSuccessful": not any(n.code == INTERNAL_ERROR for n in notes),
                        "toolExecutionNotifications": [
                            _notification(n, base, index) for n in notes
                        ],
                    }
                ],
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _region(line: int, col: int, end_line: int | None, end_col: int | None) -> dict:
    region = {"startLine": line, "startColumn": col}
    if end_line:
        region["endLine"] = end_line
        if end_col:
            region["endColumn"] = end_col
    return region


def _linked_message(f: Finding) -> str:
    """The message, then a link to each related location (SARIF 3.11.6: embedded links; literal
    brackets of the text escaped with a backslash)."""
    text = _escaped(f.message)
    links = ", ".join(
        f"[{_place(r.path)}:{'' if r.cell is None else f'cell {r.cell}:'}{r.line}]({i})"
        for i, r in enumerate(f.related, 1)
    )
    return f"{text} (see {links})"


def _place(path: str) -> str:
    return _escaped(path.rsplit("/", 1)[-1])


def _escaped(text: str) -> str:
    return text.replace("[", "\\[").replace("]", "\\]")


def _notification(note: Finding, base: Path, index: dict[str, int]) -> dict:
    if note.code == INTERNAL_ERROR:
        # gpulint failed (GPU001): a notification of its own kind, not tied to a rule's results.
        head: dict = {"descriptor": {"id": note.code}, "level": note_level(note)}
    else:
        head = {
            "associatedRule": {"id": note.code, "index": index.get(note.code, 0)},
            "level": note_level(note),
        }
    return {
        **head,
        "message": {"text": note.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact(note.path, base),
                    "region": {"startLine": note.line, "startColumn": note.col},
                }
            }
        ],
        **({"properties": {"cell": note.cell}} if note.cell is not None else {}),
    }


def _sarif_fix(finding: Finding, artifact: dict, source: SourceText) -> dict:
    fix = finding.fix
    assert fix is not None  # only called for findings with a fix
    replacements = []
    for edit in fix.edits:
        sl, sc = source.position(edit.start)
        el, ec = source.position(edit.end)
        replacements.append(
            {
                "deletedRegion": {
                    "startLine": sl,
                    "startColumn": sc,
                    "endLine": el,
                    "endColumn": ec,
                },
                "insertedContent": {"text": edit.text},
            }
        )
    return {
        "description": {"text": fix.description},
        "artifactChanges": [{"artifactLocation": artifact, "replacements": replacements}],
    }
