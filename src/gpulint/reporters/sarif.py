"""SARIF 2.1.0 as GitHub code scanning reads it: rules with their documentation, results with
repo-relative URIs, 1-based regions, stable fingerprints and fixes."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from gpulint import __version__
from gpulint.diagnostics import UNANALYSABLE, Finding
from gpulint.rule import all_rules
from gpulint.ruledocs import rule_markdown, rule_text
from gpulint.source import SourceText

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFO_URI = "https://github.com/gpulint/gpulint"


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
            "defaultConfiguration": {"level": "error"},
            "properties": {
                "tags": ["gpulint"],
                "precision": "very-high",
                "problem.severity": "error",
            },
        }
    ]
    for rule in all_rules():
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary()},
                "fullDescription": {"text": rule_text(rule, brief=True)},
                "help": {"text": rule_text(rule), "markdown": rule_markdown(rule)},
                "defaultConfiguration": {"level": rule.severity.sarif_level},
                "properties": {
                    "tags": ["gpulint", "performance", *rule.tags],
                    "precision": rule.precision,
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
    for candidate in (absolute, absolute.resolve()):
        try:
            rel = candidate.relative_to(base)
        except ValueError:
            continue
        return {"uri": quote(rel.as_posix()), "uriBaseId": "%SRCROOT%"}
    return {"uri": absolute.as_uri()}


def _line_hash(finding: Finding, line_text: str, occurrence: int) -> str:
    # Stable when unrelated lines move: the line's own content, not its number.
    basis = f"{finding.code}:{' '.join(line_text.split())}"
    return f"{hashlib.sha256(basis.encode()).hexdigest()[:16]}:{occurrence}"


def render(findings: list[Finding], *, root: Path, read_text=None, **_: object) -> str:
    """`read_text(path) -> str | None` gives a file's text, for fingerprints and fixes."""
    texts: dict[str, SourceText | None] = {}

    def source(path: str) -> SourceText | None:
        if path not in texts:
            text = read_text(path) if read_text else None
            texts[path] = SourceText(text) if text is not None else None
        return texts[path]

    base = source_root(root)
    descriptors = _rule_descriptors()
    index = {r["id"]: i for i, r in enumerate(descriptors)}
    seen: Counter = Counter()
    results = []
    for f in findings:
        artifact = _artifact(f.path, base)
        uri = artifact["uri"]
        src = source(f.path)
        line_text = src.line_text(f.line) if src else ""
        key = (uri, f.code, " ".join(line_text.split()))
        seen[key] += 1
        region = {"startLine": f.line, "startColumn": f.col}
        if f.end_line:
            region["endLine"] = f.end_line
            if f.end_col:
                region["endColumn"] = f.end_col
        result = {
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
            "partialFingerprints": {"primaryLocationLineHash": _line_hash(f, line_text, seen[key])},
        }
        if f.fix is not None and src is not None:
            result["fixes"] = [_sarif_fix(f, artifact, src)]
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
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _sarif_fix(finding: Finding, artifact: dict, source: SourceText) -> dict:
    replacements = []
    for edit in finding.fix.edits:
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
        "description": {"text": finding.fix.description},
        "artifactChanges": [{"artifactLocation": artifact, "replacements": replacements}],
    }
