"""Every rule's own VALID/INVALID examples, run as tests (as Fixit does)."""

from __future__ import annotations

import pytest

from gpulint.fixes import apply_edits, still_parses
from gpulint.rule import Invalid, Valid, all_rules
from gpulint.testing import example_filename, lint_text


def _filename(rule) -> str:
    return example_filename(rule)


def _cases(kind: str):
    for rule in all_rules():
        examples = rule.VALID if kind == "valid" else rule.INVALID
        for i, example in enumerate(examples):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}-{i}")


def test_every_rule_has_examples_both_ways():
    for rule in all_rules():
        assert rule.VALID, f"{rule.code} has no VALID examples"
        assert rule.INVALID, f"{rule.code} has no INVALID examples"


@pytest.mark.parametrize(("rule", "example"), list(_cases("valid")))
def test_valid_examples_stay_silent(rule, example):
    code, targets = (example.code, example.targets) if isinstance(example, Valid) else (example, ())
    findings = [f for f in lint_text(code, _filename(rule), targets) if f.code == rule.code]
    assert findings == [], f"{rule.code} fired on a VALID example: {findings}"


@pytest.mark.parametrize(("rule", "example"), list(_cases("invalid")))
def test_invalid_examples_fire(rule, example):
    case = example if isinstance(example, Invalid) else Invalid(example)
    findings = lint_text(case.code, _filename(rule), case.targets)
    mine = [f for f in findings if f.code == rule.code]
    assert mine, f"{rule.code} did not fire on an INVALID example; got {findings}"
    assert all(f.code != "GPU000" for f in findings), findings
    if case.fixed is not None:
        edits = [e for f in mine if f.fix for e in f.fix.edits]
        assert edits, f"{rule.code} has `fixed` but offered no fix"
        fixed, _ = apply_edits(case.code, edits)
        assert fixed == case.fixed
        assert still_parses(fixed, _filename(rule)) is None
        # Fixing twice equals fixing once: the fixed code no longer fires.
        again = [f for f in lint_text(fixed, _filename(rule), case.targets) if f.code == rule.code]
        assert again == []


def test_fixable_rules_declare_fix_examples():
    for rule in all_rules():
        has_fixed = any(isinstance(e, Invalid) and e.fixed is not None for e in rule.INVALID)
        assert has_fixed == rule.fixable, (
            f"{rule.code}: fixable={rule.fixable} but fix examples={has_fixed}"
        )


def test_every_rule_is_documented_with_the_five_headings():
    from gpulint.rule import DOC_SECTIONS

    for rule in all_rules():
        sections = rule.doc_sections()
        missing = [s for s in DOC_SECTIONS if not sections.get(s)]
        assert not missing, f"{rule.code} documentation lacks {missing}"
        assert "https://" in sections["References"], f"{rule.code} cites no reference"
