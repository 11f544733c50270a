"""Reporters turn findings into text, JSON, SARIF 2.1.0 or GitHub workflow annotations."""

from __future__ import annotations

from gpulint.reporters import github, json_report, sarif, text

REPORTERS = {
    "text": text.render,
    "json": json_report.render,
    "sarif": sarif.render,
    "github": github.render,
}
