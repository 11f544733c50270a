"""Write docs/rules/: one page per rule and an index grouped by family, all generated.

    python -m gpulint.docsgen            # (re)write docs/rules/
    python -m gpulint.docsgen --check    # exit 1, listing the stale files, if any is out of date

Each page is exactly `gpulint.ruledocs.rule_markdown(rule)`, the text `gpulint rule CODE` prints
and SARIF carries as `help.markdown`; nothing in docs/rules/ is written by hand. Pages of rules
that no longer exist are removed (or reported stale with --check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpulint.rule import Rule, all_rules
from gpulint.ruledocs import FAMILIES, family, rule_markdown

REGENERATE = "python -m gpulint.docsgen"


def default_out() -> Path:
    """docs/rules of the checkout gpulint runs from (src layout), else of the working directory."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (
        checkout / "src" / "gpulint" / "rules"
    ).is_dir():
        return checkout / "docs" / "rules"
    return Path("docs/rules")


def index_markdown(rules: tuple[type[Rule], ...]) -> str:
    lines = [
        "# gpulint rules",
        "",
        f"> Generated from each rule's own source (its class in `src/gpulint/rules/`: metadata, documentation, "
        f"examples) and the measured bench figures; do not edit by hand. Regenerate with "
        f"`{REGENERATE}`; `{REGENERATE} --check` (run in CI by tests/test_docs_fresh.py) fails "
        f"when a page is stale.",
        "",
        f"{len(rules)} rules. Each page is the text `gpulint rule CODE` prints: what the rule "
        "finds, why it costs, the bench that backs it with the measured H200 figure, examples, "
        "its autofix and how to suppress it.",
        "",
        "Severity: `error` = wrong or broken code; `warning` = costs real speed; "
        "`info` = worth a look. Autofix: `gpulint check --fix`. Tier: `default` rules run "
        "unless ignored; `pedantic` ones only when selected by code, by family prefix or with "
        '`extend-select = ["pedantic"]`; `preview` ones only when selected by code, or in '
        "preview mode (`preview = true`, `--preview`) wherever the selection covers them.",
        "",
    ]
    groups: dict[str, list[type[Rule]]] = {}
    for rule in rules:
        groups.setdefault(rule.code[:4], []).append(rule)
    for prefix in sorted(groups):
        lines += [f"## {prefix}xx {family(prefix + '00')}", ""]
        lines += [
            "| code | name | severity | tier | fix | summary |",
            "|---|---|---|---|---|---|",
        ]
        for rule in groups[prefix]:
            flags = "yes" if rule.fixable else ""
            summary = rule.summary().replace("|", "\\|")
            lines.append(
                f"| [{rule.code}]({rule.code}.md) | `{rule.name}` | {rule.severity.value} | "
                f"{rule.tier} | {flags} | {summary} |"
            )
        lines.append("")
    missing = [p for p in FAMILIES if p not in groups]
    if missing:
        lines += ["Families with no rule yet: " + ", ".join(f"{p}xx" for p in missing) + ".", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def expected_files(rules: tuple[type[Rule], ...] | None = None) -> dict[str, str]:
    """file name under docs/rules/ -> its generated text."""
    rules = all_rules() if rules is None else rules
    files = {f"{rule.code}.md": rule_markdown(rule) for rule in rules}
    files["index.md"] = index_markdown(rules)
    return files


def stale_files(out: Path, expected: dict[str, str] | None = None) -> list[str]:
    """Names under `out` that differ from what would be generated, are missing, or are extra."""
    expected = expected_files() if expected is None else expected
    stale = []
    for name, text in sorted(expected.items()):
        path = out / name
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != text:
            stale.append(name)
    if out.is_dir():
        stale += sorted(p.name for p in out.glob("*.md") if p.name not in expected)
    return stale


def write(out: Path) -> list[str]:
    expected = expected_files()
    changed = stale_files(out, expected)
    out.mkdir(parents=True, exist_ok=True)
    for name in changed:
        if name in expected:
            (out / name).write_text(expected[name], encoding="utf-8", newline="\n")
        else:
            (out / name).unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpulint.docsgen", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=None, help="default: docs/rules")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    args.out = args.out or default_out()
    from gpulint import registry

    if args.check:
        stale = stale_files(args.out)
        if registry.stale():
            # The rule/front-end index (gpulint/data/registry.json) is derived from the same
            # classes; regenerated together, so one command keeps both.
            print(f"{registry.INDEX}: stale", file=sys.stderr)
            print(f"Regenerate with `{REGENERATE}` and commit the result.", file=sys.stderr)
            return 1
        if stale:
            print(f"{args.out}: {len(stale)} generated file(s) are stale:", file=sys.stderr)
            for name in stale:
                print(f"  {args.out / name}", file=sys.stderr)
            print(f"Regenerate with `{REGENERATE}` and commit the result.", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date ({len(expected_files())} files)")
        return 0
    changed = write(args.out)
    if registry.write():
        changed.append(registry.INDEX)
    print(
        f"{args.out}: {len(changed)} file(s) written or removed"
        + (f": {', '.join(changed)}" if changed else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
