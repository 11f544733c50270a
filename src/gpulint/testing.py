"""Helpers the test suite uses to run rule examples and fixtures (kept importable for plugins)."""

from __future__ import annotations

import re
from pathlib import Path

from gpulint.config import Config
from gpulint.diagnostics import Finding, internal_errors
from gpulint.engine import Linter

# `# expect: GPU101`, `// expect: GPU802, GPU803`, `<!-- expect: GPU910 -->`
EXPECT = re.compile(r"(?:#|//|<!--)\s*expect:\s*(GPU\d{3}(?:\s*,\s*GPU\d{3})*)")
# First lines of a fixture may set options: `# fixture: targets=sm_121,sm_90`
FIXTURE_OPTIONS = re.compile(r"fixture:\s*(.*?)\s*(?:-->)?$")


def example_config(targets: tuple[str, ...] | list[str] = (), root: Path | None = None) -> Config:
    config = Config(root=root or Path.cwd())
    config.select = ["GPU"]
    # rules of every tier: pedantic and preview ones are on when named by code
    from gpulint.rule import all_rules

    config.extend_select = [r.code for r in all_rules() if r.tier != "default"]
    config.targets = list(targets)
    return config


def example_filename(rule) -> str:
    """The file name a rule's VALID/INVALID examples are linted as, wherever they are run (rule
    tests, the language server's tests): Markdown examples are a README, since claims are judged
    by default only in the project's own result documents."""
    if rule.example_filename:
        return rule.example_filename
    return {"python": "example.py", "cuda": "example.cu", "markdown": "README.md"}.get(
        rule.languages()[0], "example.txt"
    )


def assert_no_internal_error(findings: list[Finding], context: object = "") -> list[Finding]:
    """Fail when gpulint itself failed (GPU001: a rule or a front-end raised). Every test that
    feeds gpulint arbitrary input goes through this, so a crashing rule fails the suite rather
    than passing as one more diagnostic."""
    errors = internal_errors(findings)
    if errors:
        where = f" ({context})" if context else ""
        raise AssertionError(f"internal error{where}: " + "; ".join(e.message for e in errors))
    return findings


def lint_text(text: str, filename: str, targets=(), options: dict | None = None) -> list[Finding]:
    """Findings for `text` linted as `filename` with every rule on; an internal error fails."""
    config = example_config(targets)
    config.options.update(options or {})
    findings, _ = Linter(config).lint_bytes(filename, text.encode("utf-8"))
    return assert_no_internal_error(findings, filename)


def expected_findings(text: str) -> set[tuple[int, str]]:
    out: set[tuple[int, str]] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        m = EXPECT.search(line)
        if m:
            out.update((number, c.strip()) for c in m.group(1).split(","))
    return out


def fixture_options(text: str) -> dict:
    """Config options a fixture sets on one of its first lines, besides targets:
    `# fixture: targets=sm_121 lever-presets=cuda-dev-routing`."""
    for line in text.splitlines()[:5]:
        m = FIXTURE_OPTIONS.search(line)
        if m:
            for part in m.group(1).split():
                key, _, value = part.partition("=")
                if key == "lever-presets":
                    return {"lever-presets": [v for v in value.split(",") if v]}
    return {}


def fixture_targets(text: str) -> list[str]:
    for line in text.splitlines()[:5]:
        m = FIXTURE_OPTIONS.search(line)
        if m:
            for part in m.group(1).split():
                key, _, value = part.partition("=")
                if key == "targets":
                    return [t for t in value.split(",") if t]
    return []
