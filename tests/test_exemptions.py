"""Exemptions: the cases a rule leaves alone on purpose, declared on the rule and named in its code.

Every name a rule passes to `self.exempt(...)` is declared in its `EXEMPTIONS`, every declared
one is used, and each has a silent example (a snippet or a fixture) that the rule stays silent
on, by taking that exemption (recorded while the example is linted).
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

from gpulint.engine import Linter
from gpulint.rule import Exemption, Rule, Valid, all_rules, recording_exemptions
from gpulint.ruledocs import rule_markdown, rule_text
from gpulint.testing import (
    assert_no_internal_error,
    example_config,
    example_filename,
    expected_findings,
    fixture_options,
    fixture_targets,
    lint_text,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _modules(rule: type[Rule]) -> list[str]:
    """The modules of the rule's classes (a subclass runs its parent's code too)."""
    return [
        klass.__module__
        for klass in rule.__mro__
        if isinstance(klass, type) and issubclass(klass, Rule) and klass is not Rule
    ]


def _used(rule: type[Rule]) -> dict[str, list[int]]:
    """Exemption name -> the lines of its module that take it (`<x>.exempt("name", ...)`)."""
    used: dict[str, list[int]] = {}
    for module in _modules(rule):
        tree = ast.parse(inspect.getsource(sys.modules[module]))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "exempt"
            ):
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                    f"{module}:{node.lineno}: name the exemption with a string literal"
                )
                used.setdefault(first.value, []).append(node.lineno)
    return used


def _exempting_rules() -> list[type[Rule]]:
    return [r for r in all_rules() if r.EXEMPTIONS or _used(r)]


@pytest.mark.parametrize("rule", _exempting_rules(), ids=lambda r: r.code)
def test_used_exemptions_are_declared_and_declared_ones_used(rule):
    declared = {e.name for e in rule.EXEMPTIONS}
    used = _used(rule)
    undeclared = sorted(set(used) - declared)
    unused = sorted(declared - set(used))
    assert not undeclared, f"{rule.code} takes exemptions it does not declare: {undeclared}"
    assert not unused, f"{rule.code} declares exemptions its code never takes: {unused}"


def _cases():
    for rule in all_rules():
        # (a subclass may add its own to its parent's: those it must take itself)
        inherited = {e.name for k in rule.__mro__[1:] for e in getattr(k, "EXEMPTIONS", ())}
        own = {e.name for e in rule.__dict__.get("EXEMPTIONS", ())} - inherited
        for exemption in rule.EXEMPTIONS:
            yield pytest.param(
                rule, exemption, exemption.name in own, id=f"{rule.code}-{exemption.name}"
            )


def _lint_example(rule: type[Rule], exemption: Exemption, root: Path):
    """The findings of linting the exemption's example, and the exemptions taken meanwhile."""
    with recording_exemptions() as taken:
        if exemption.files:
            for name, text in exemption.files:
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text, encoding="utf-8")
            # As `Linter.run` does, but every file linted in this process (run's workers are
            # forked: what they take would not be recorded here).
            linter = Linter(example_config(root=root))
            linter.roots.append(root)
            paths, _ = linter.find_files([root])
            linter.index_projects(paths, None)
            linter.prepare_project([root], paths)
            findings = assert_no_internal_error(
                [f for path in paths for f in linter.lint_path(path).findings]
            )
        elif exemption.fixture is not None:
            path = FIXTURES / exemption.fixture
            text = path.read_text(encoding="utf-8")
            assert rule.code not in {c for _, c in expected_findings(text)}, (
                f"{exemption.fixture} expects {rule.code}: not a silent fixture"
            )
            findings = lint_text(
                text, exemption.fixture, fixture_targets(text), fixture_options(text)
            )
        else:
            example = exemption.example
            quiet = example if isinstance(example, Valid) else Valid(str(example))
            shown = exemption.filename or example_filename(rule)
            findings = lint_text(quiet.code, shown, quiet.targets)
    return findings, set(taken)


@pytest.mark.parametrize(("rule", "exemption", "own"), list(_cases()))
def test_exemption_example_is_silent_and_takes_it(rule, exemption, own, tmp_path, monkeypatch):
    given = [exemption.example is not None, exemption.fixture is not None, bool(exemption.files)]
    assert sum(given) == 1, (
        f"{rule.code} {exemption.name}: give one silent example: a snippet, a fixture or files"
    )
    assert exemption.why.strip() and "\n" not in exemption.why.strip(), (
        f"{rule.code} {exemption.name}: `why` is one line"
    )
    assert exemption.name == exemption.name.lower() and " " not in exemption.name
    monkeypatch.chdir(tmp_path)
    findings, taken = _lint_example(rule, exemption, tmp_path)
    mine = [f for f in findings if f.code == rule.code]
    assert mine == [], f"{rule.code} fired on the example of {exemption.name!r}: {mine}"
    if own:  # (an inherited exemption: the parent's example shows it; here it stays silent)
        assert (rule.code, exemption.name) in taken, (
            f"{rule.code} stayed silent on the example of {exemption.name!r} without taking it "
            f"(took {sorted(n for c, n in taken if c == rule.code)})"
        )


def test_exempt_refuses_an_undeclared_name_while_recording():
    rule = next(r for r in all_rules() if r.EXEMPTIONS)
    instance = rule.__new__(rule)  # (exempt needs no settings)
    with recording_exemptions() as taken:
        assert instance.exempt(rule.EXEMPTIONS[0].name, True) is True
        assert instance.exempt(rule.EXEMPTIONS[0].name, 0) is False
        with pytest.raises(ValueError, match="not in its EXEMPTIONS"):
            instance.exempt("no-such-exemption", True)
    assert taken == {(rule.code, rule.EXEMPTIONS[0].name)}
    # Outside the tests it is a plain truth test.
    assert instance.exempt("no-such-exemption", ["x"]) is True


def test_rule_declares_an_exemption_once():
    with pytest.raises(TypeError, match="declared twice"):

        class _Twice(Rule):  # noqa: F841 (defined only to be refused)
            code = "GPU999"
            name = "twice"
            EXEMPTIONS = (Exemption("a", "one.", "x"), Exemption("a", "two.", "y"))


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.EXEMPTIONS], ids=lambda r: r.code)
def test_page_lists_left_alone_then_known_problems(rule):
    page = rule_markdown(rule)
    assert page.count("## Left alone") == 1
    left = page.index("## Left alone")
    for exemption in rule.EXEMPTIONS:
        heading = f"### `{exemption.name}`"
        assert heading in page[left:], f"{rule.code}: {exemption.name} not on its page"
        assert exemption.why in page
    if "## Known problems" in page:
        assert page.count("## Known problems") == 1
        assert page.index("## Known problems") > left
    # `gpulint rule CODE` and SARIF's help.text carry the same list.
    text = rule_text(rule)
    assert "Left alone" in text
    assert all(e.why.replace("**", "") in text for e in rule.EXEMPTIONS)


@pytest.mark.parametrize(
    "rule", [r for r in all_rules() if r.__dict__.get("EXEMPTIONS")], ids=lambda r: r.code
)
def test_what_it_does_leaves_exemptions_to_the_list(rule):
    """A rule that declares its exemptions keeps their prose out of "What it does"."""
    what = rule.doc_sections().get("What it does", "").lower()
    assert "left alone" not in what, (
        f"{rule.code}: 'What it does' still lists cases left alone; declare them in EXEMPTIONS"
    )


def _example_key(example) -> tuple[str, tuple]:
    quiet = example if isinstance(example, Valid) else Valid(str(example))
    return quiet.code.strip(), tuple(quiet.targets or ())


@pytest.mark.parametrize("rule", [r for r in all_rules() if r.EXEMPTIONS], ids=lambda r: r.code)
def test_silent_examples_do_not_repeat_an_exemption_example(rule):
    """An exemption's example is on the page under "Left alone" and linted as silent here; the
    same snippet again among VALID would show twice and say nothing more."""
    taken = {_example_key(e.example) for e in rule.EXEMPTIONS if e.example is not None}
    repeated = [i for i, v in enumerate(rule.VALID) if _example_key(v) in taken]
    assert not repeated, f"{rule.code}: VALID entries {repeated} repeat an exemption's example"
