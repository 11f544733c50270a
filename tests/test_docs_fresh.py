"""docs/rules/ is generated from the rule classes; this fails when it is stale.

Fix a failure with `python -m gpulint.docsgen` and commit docs/rules/.
"""

from __future__ import annotations

from pathlib import Path

from gpulint.docsgen import REGENERATE, expected_files, main, stale_files
from gpulint.rule import all_rules

DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules"


def test_docs_rules_are_fresh():
    stale = stale_files(DOCS)
    assert not stale, f"docs/rules is stale ({', '.join(stale)}); run `{REGENERATE}` and commit"


def test_rule_registry_is_fresh():
    """gpulint/data/registry.json (codes, names, languages, static gates, front-end extensions:
    what a run knows before importing any rule) says what the rule classes say."""
    from gpulint import registry

    assert not registry.stale(), f"{registry.INDEX} is stale; run `{REGENERATE}` and commit"


def test_every_rule_has_a_page_and_an_index_entry():
    files = expected_files()
    index = files["index.md"]
    for rule in all_rules():
        assert f"{rule.code}.md" in files
        assert f"[{rule.code}]({rule.code}.md)" in index


def test_check_mode_reports_stale_and_missing_files(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--out", str(tmp_path), "--check"]) == 0
    first = sorted(tmp_path.glob("GPU*.md"))[0]
    first.write_text(first.read_text() + "hand edit\n")
    (tmp_path / "GPU999.md").write_text("a rule that no longer exists\n")
    (tmp_path / "index.md").unlink()
    assert main(["--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert first.name in err and "GPU999.md" in err and "index.md" in err
    assert main(["--out", str(tmp_path)]) == 0  # regenerating repairs all three
    assert not (tmp_path / "GPU999.md").exists()
    assert stale_files(tmp_path) == []
