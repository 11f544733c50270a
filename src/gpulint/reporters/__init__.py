"""Reporters turn findings into text (concise, full, grouped), JSON, SARIF 2.1.0, GitHub
workflow annotations, GitLab Code Quality JSON or JUnit XML; and ruff's json-lines, rdjson (reviewdog) and pylint."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulint.source import SourceText

# format -> (module, function); each function takes the findings (and keyword options its format
# uses) and returns the report's text. A run imports only the reporter it prints with (SARIF's
# imports every rule for its rule descriptions; a one-file check must not pay for that).
_TABLE = {
    "concise": ("text", "render"),
    "full": ("text", "render_full"),
    "grouped": ("text", "render_grouped"),
    "json": ("json_report", "render"),
    "sarif": ("sarif", "render"),
    "github": ("github", "render"),
    "gitlab": ("gitlab", "render"),
    "junit": ("junit", "render"),
    "json-lines": ("ruff_formats", "render_json_lines"),
    "rdjson": ("ruff_formats", "render_rdjson"),
    "pylint": ("ruff_formats", "render_pylint"),
}


class _Reporters(Mapping[str, Callable[..., str]]):
    def __getitem__(self, name: str) -> Callable[..., str]:
        module, function = _TABLE[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)

    def __iter__(self) -> Iterator[str]:
        return iter(_TABLE)

    def __len__(self) -> int:
        return len(_TABLE)


REPORTERS: Mapping[str, Callable[..., str]] = _Reporters()


def finding_source(
    read_text: Callable[[str], str | None] | None,
    path: str,
    cell: int | None,
    memo: dict[tuple[str, int | None], SourceText | None],
) -> SourceText | None:
    """The text a finding's line and column count in: the file's, or in a notebook the source
    of its cell (`Finding.cell`); None where it cannot be read. `memo` keeps what was read."""
    key = (path, cell)
    if key not in memo:
        from gpulint.source import SourceText

        text = read_text(path) if read_text is not None else None
        if text is not None and cell is not None:
            from gpulint.frontends.notebook import cell_source

            text = cell_source(text, cell)
        memo[key] = SourceText(text) if text is not None else None
    return memo[key]
