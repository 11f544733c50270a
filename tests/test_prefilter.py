"""The trigger prefilter only skips work: with and without it, findings are identical."""

from __future__ import annotations

from pathlib import Path

from gpulint.engine import Linter
from gpulint.registry import frontend_for
from gpulint.testing import example_config, fixture_options, fixture_targets

ROOT = Path(__file__).resolve().parent.parent


def test_prefilter_loses_nothing_over_all_fixtures_and_examples():
    files = [
        p
        for folder in ("fixtures", "examples")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.is_file() and frontend_for(p.name)
    ]
    assert len(files) > 10
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        config = example_config(fixture_targets(text), root=ROOT)
        config.options.update(fixture_options(text))
        linter = Linter(config)
        shown = path.relative_to(ROOT).as_posix()
        data = path.read_bytes()
        with_filter, _ = linter.lint_bytes(shown, data, prefilter=True)
        without, _ = linter.lint_bytes(shown, data, prefilter=False)
        assert [f.to_dict() for f in with_filter] == [f.to_dict() for f in without], shown


def test_files_without_triggers_are_not_parsed():
    linter = Linter(example_config())
    findings, parsed = linter.lint_bytes("plain.py", b"def add(a, b):\n    return a + b\n")
    assert findings == [] and parsed is False


def test_hardware_rules_need_targets():
    no_targets = Linter(example_config())
    with_targets = Linter(example_config(["sm_121"]))
    codes = lambda linter: {r.code for r, _, _ in linter.gates["python"]}  # noqa: E731
    assert codes(no_targets) <= codes(with_targets)
