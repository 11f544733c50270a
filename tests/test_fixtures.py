"""Walk fixtures/: each file states its expected findings inline (`# expect: GPU101`).

A fixture may set hardware targets on one of its first lines: `# fixture: targets=sm_121`.
Every fixture is linted with every rule on; the findings must be exactly the expected ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulint.registry import frontend_for
from gpulint.testing import expected_findings, fixture_options, fixture_targets, lint_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _fixture_files():
    for path in sorted(FIXTURES.rglob("*")):
        # Notebooks place findings by cell (`# expect:` lines count in the JSON): they have
        # their own tests (tests/test_notebooks.py).
        if path.is_file() and frontend_for(path.name) is not None and path.suffix != ".ipynb":
            yield pytest.param(path, id=path.relative_to(FIXTURES).as_posix())


@pytest.mark.parametrize("path", list(_fixture_files()))
def test_fixture(path: Path):
    text = path.read_text(encoding="utf-8")
    # Linted under its path inside fixtures/, so "tests/" fixtures are seen as test code.
    shown = path.relative_to(FIXTURES).as_posix()
    findings = lint_text(text, shown, fixture_targets(text), fixture_options(text))
    got = {(f.line, f.code) for f in findings}
    want = expected_findings(text)
    missing = sorted(want - got)
    extra = sorted((f.line, f.code, f.message) for f in findings if (f.line, f.code) not in want)
    assert not missing and not extra, f"missing={missing}\nunexpected={extra}"


def test_every_rule_has_fixtures_both_ways():
    """Each rule appears in an `expect:` somewhere, and in a fixture where it stays silent."""
    from gpulint.rule import all_rules

    fired: set[str] = set()
    silent_files: dict[str, int] = {}
    for param in _fixture_files():
        path = param.values[0]
        text = path.read_text(encoding="utf-8")
        fired |= {code for _, code in expected_findings(text)}
        # A "silent" fixture for a rule: it names the rule in its file name and expects none of it.
        for rule in all_rules():
            if rule.code.lower() in path.name.lower() and rule.code not in {
                c for _, c in expected_findings(text)
            }:
                silent_files[rule.code] = silent_files.get(rule.code, 0) + 1
    for rule in all_rules():
        assert rule.code in fired, f"no fixture fires {rule.code}"
        assert silent_files.get(rule.code), (
            f"no silent fixture for {rule.code} (name it *{rule.code.lower()}*silent*)"
        )
