"""Shared plumbing of the claim rules GPU910-912 (not a rule: modules starting with `_` are not
discovered). Each rule reports the claims gpulint.claims found of its own kind, in documents
(DocFile, analysed once per file) and in Python docstrings (analysed once per file)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import ClassVar, TypeAlias

from gpulint.claims import Claim
from gpulint.diagnostics import Finding, Severity
from gpulint.frontends.docs import DocFile
from gpulint.frontends.docs.docstrings import Span, docstring_claims
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Rule
from gpulint.settings import Settings

# The files the claim rules read: documents, and Python files' docstrings.
ClaimFile: TypeAlias = DocFile | PythonFile

# Without `[tool.gpulint.claims] docstrings = true`, a Python file's docstrings are analysed
# only for a dangling evidence reference, and only where the file says one of these.
CITES_EVIDENCE = ("gpulint-evidence", "gpulint bench")


def claim_gates(
    rule: type[Rule], language: str, settings: Settings
) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The prefilter's gates (Rule.gates) of a claim rule: on Python without the opt-in, the
    file must cite evidence as well as say the rule's words, or it is not parsed for it."""
    triggers, requires = rule.trigger_bytes(settings), rule.requires_bytes()
    if language == "python" and not settings.option("claims", "docstrings", False):
        # the rare words first: most files fail on them, after two searches instead of dozens
        return tuple(w.encode() for w in CITES_EVIDENCE), triggers + requires
    return triggers, requires


def claim_findings(rule: ClaimRule, file: ClaimFile) -> Iterator[Finding]:
    for claim, at in file_claims(rule, file):
        if claim.kind == rule.claim_kind:
            yield rule.report(file, at, claim.message, severity=_severity(claim))


def file_claims(rule: ClaimRule, file: ClaimFile) -> Iterator[tuple[Claim, Claim | Span]]:
    """Every claim the analysis found in the file (of any kind, spared ones too), with where
    to report it: the claim itself in a document, its span in a docstring."""
    if isinstance(file, DocFile):  # a Markdown / RST document
        for claim in file.claims:
            yield claim, claim
        return
    if not isinstance(getattr(file, "tree", None), ast.Module):
        return
    # Docstring claims are opt-in; without it only an evidence reference can be a finding.
    if not rule.settings.option("claims", "docstrings", False) and not _cites_evidence(file):
        return
    # (a docstring's claim is located by its span in the file, not by an ast node)
    yield from docstring_claims(file, rule.settings)


class ClaimRule(Rule):
    """A claim rule: gated by `claim_gates`, reporting the claims of its own kind (the
    analysis, gpulint.claims, says what is wrong with a claim; the rule, which code that is).
    Not discovered as a rule itself (it is defined outside the rule's module)."""

    claim_kind: ClassVar[str]  # claims.UNSUPPORTED, BARE_RATIO or DENOMINATOR

    @classmethod
    def gates(
        cls, language: str, settings: Settings
    ) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        return claim_gates(cls, language, settings)

    def finish(self, file: ClaimFile) -> Iterator[Finding]:
        return claim_findings(self, file)


def _severity(claim: Claim) -> Severity | None:
    return Severity(claim.severity) if claim.severity else None


def _cites_evidence(file: PythonFile) -> bool:
    text = getattr(getattr(file, "source", None), "text", None) or getattr(file, "text", "") or ""
    return any(word in text for word in CITES_EVIDENCE)
