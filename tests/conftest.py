"""The suite's tests exercise behaviour (fixes, formats, caches, noqa, the LSP) through whatever
rule shows it best, most of them a pedantic-tier one such as GPU101 or GPU201: so every test
runs with pedantic rules counted as default ones, through $GPULINT_DEFAULT_TIERS, which the CLI,
the flake8 plugin, the language server and their subprocesses all read. What the default tier
alone does is tested with the variable removed (the `default_tier_only` fixture)."""

from __future__ import annotations

import os

import pytest

from gpulint.config import DEFAULT_TIERS_ENV

os.environ[DEFAULT_TIERS_ENV] = "pedantic"


@pytest.fixture
def default_tier_only(monkeypatch):
    monkeypatch.delenv(DEFAULT_TIERS_ENV, raising=False)
