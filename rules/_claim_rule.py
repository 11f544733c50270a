"""Shared plumbing of the claim rules GPU910-912 (not a rule: modules starting with `_` are not
discovered). Each rule reports the claims gpulint.claims found for its own code, in documents
(DocFile, analysed once per file) and in Python docstrings (analysed once per file)."""

from __future__ import annotations

import ast

from gpulint.frontends.docs import docstring_claims


class _At:
    def __init__(self, display_path: str, span):
        self.display_path = display_path
        self._span = span

    def span(self, node):
        return self._span


def claim_findings(rule, file):
    if hasattr(file, "claims"):  # a Markdown / RST document
        for claim in file.claims:
            if claim.code == rule.code:
                yield rule.report(file, claim, claim.message)
        return
    if not isinstance(getattr(file, "tree", None), ast.Module):
        return
    for claim, span in docstring_claims(file, rule.settings):
        if claim.code == rule.code:
            yield rule.report(_At(file.display_path, span), claim, claim.message)
