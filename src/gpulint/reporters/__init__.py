"""Reporters turn findings into text (concise, full, grouped), JSON, SARIF 2.1.0, GitHub
workflow annotations, GitLab Code Quality JSON or JUnit XML."""

from __future__ import annotations

from collections.abc import Callable

from gpulint.reporters import github, gitlab, json_report, junit, sarif, text

# Each takes the findings (and keyword options its format uses) and returns the report's text.
REPORTERS: dict[str, Callable[..., str]] = {
    "concise": text.render,
    "full": text.render_full,
    "grouped": text.render_grouped,
    "json": json_report.render,
    "sarif": sarif.render,
    "github": github.render,
    "gitlab": gitlab.render,
    "junit": junit.render,
}
