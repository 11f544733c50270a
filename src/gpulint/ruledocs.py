"""One documentation text per rule, from the rule class: for `gpulint rule`, docs/rules/ and SARIF."""

from __future__ import annotations

import re

from gpulint.rule import Rule


def _facts(rule: type[Rule]) -> list[tuple[str, str]]:
    facts = [
        ("Code", rule.code),
        ("Name", rule.name),
        ("Severity", rule.severity.value),
        ("Language", ", ".join(rule.languages())),
        ("Autofix", "yes (`gpulint check --fix`)" if rule.fixable else "no"),
        ("Enabled by default", "yes" if rule.default_enabled else "no (select it)"),
    ]
    if rule.bench:
        facts.append(("Evidence", f"`gpulint bench {rule.bench}`"))
    return facts


def _suppression(rule: type[Rule]) -> str:
    comment = {"cuda": "// noqa", "markdown": "<!-- noqa", "python": "# noqa"}.get(rule.languages()[0], "# noqa")
    end = " -->" if comment.startswith("<!--") else ""
    return (
        f"Add `{comment}: {rule.code}{end}` to the line, or `ignore = [\"{rule.code}\"]` / "
        f"`per-file-ignores` under `[tool.gpulint]` in pyproject.toml."
    )


def rule_markdown(rule: type[Rule]) -> str:
    lines = [f"# {rule.code} `{rule.name}`", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(rule)]
    lines.append("")
    doc = rule.doc()
    if doc:
        lines += [doc, ""]
    lines += ["## Suppressing it", "", _suppression(rule), ""]
    return "\n".join(lines)


def rule_text(rule: type[Rule], brief: bool = False) -> str:
    """Plain text: headings as lines, code fences kept (terminals and SARIF `text`)."""
    if brief:
        sections = rule.doc_sections()
        what = sections.get("What it does", rule.summary())
        why = sections.get("Why is this bad?", "")
        return " ".join(f"{what}\n\n{why}".split()) if why else " ".join(what.split())
    md = rule_markdown(rule)
    md = re.sub(r"^#+\s*", "", md, flags=re.MULTILINE)
    md = md.replace("**", "")
    return md
