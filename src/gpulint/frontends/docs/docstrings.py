"""Claims in Python docstrings, read as a document is: masked as reStructuredText
(indented examples blanked too), cut into units and analysed, with their spans in the file."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.claims import DOCSTRING_WORDS, Claim, EvidenceContext, analyse
from gpulint.frontends import MemoKey
from gpulint.frontends.docs.masking import Masker, mask_rst
from gpulint.frontends.docs.scope import evidence_context
from gpulint.frontends.docs.units import units_from
from gpulint.settings import Settings

if TYPE_CHECKING:
    import ast

    from gpulint.frontends.python.file import PythonFile


Span = tuple[int, int, int, int]


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
