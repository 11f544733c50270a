"""The lever-registry front-end: `levers.toml` and the `[[tool.gpulint.levers]]` tables of
`pyproject.toml`, read with `tomllib` so GPU902 can point at a user entry that has no source.

tomllib keeps no positions; each entry is placed at its own `[[levers]]` /
`[[tool.gpulint.levers]]` header line, found by reading the file's table headers in order (the
N-th header is the N-th entry of the array, which is how TOML defines arrays of tables).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpulint.diagnostics import Finding
from gpulint.frontends import ParseError, decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.settings import Settings
from gpulint.source import SourceText
from gpulint.suppression import NoqaComment


@dataclass(frozen=True)
class LeverEntry:
    """One user registry entry as written, with the line of its table header."""

    entry: dict[str, Any]
    index: int
    line: int
    col: int
    end_col: int

    @property
    def span(self) -> tuple[int, int, int, int]:
        return self.line, self.col, self.line, self.end_col


class LeverFile:
    language = "toml"

    def __init__(self, display_path: str, text: str):
        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ParseError(f"TOML: {e}") from None
        if display_path.replace("\\", "/").rsplit("/", 1)[-1].lower() == "pyproject.toml":
            entries = data.get("tool", {}).get("gpulint", {}).get("levers", [])
            header = "tool.gpulint.levers"
        else:
            entries = data.get("levers", [])
            header = "levers"
        if not isinstance(entries, list):
            entries = []
        lines = self._headers(header)
        self.nodes_by_type: dict[str, list[LeverEntry]] = {"LeverEntry": []}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                continue
            line, col, end_col = lines[i] if i < len(lines) else (1, 1, 2)
            self.nodes_by_type["LeverEntry"].append(LeverEntry(entry, i, line, col, end_col))

    def _headers(self, header: str) -> list[tuple[int, int, int]]:
        found = []
        for number in range(1, self.source.line_count + 1):
            raw = self.source.line_text(number)
            text = raw.strip()
            if not text.startswith("[["):
                continue
            name = text[2:].split("]]", 1)[0]
            if ".".join(part.strip().strip('"') for part in name.split(".")) == header:
                col = len(raw) - len(raw.lstrip()) + 1
                found.append((number, col, col + len(text.split("]]", 1)[0]) + 2))
        return found

    def span(self, node: Any) -> tuple[int, int, int, int]:
        span: tuple[int, int, int, int] = node.span
        return span


class LeverFileFrontend:
    language = "toml"
    extensions = ("levers.toml", "pyproject.toml")

    def parse(self, display_path: str, data: bytes, settings: Settings) -> LeverFile:
        return LeverFile(display_path, decode(data))

    def run(self, parsed: LeverFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return run_rules(parsed, rules, lambda kind: parsed.nodes_by_type.get(kind, ()))

    def noqa_lines(self, parsed: LeverFile) -> dict[int, frozenset[str]]:
        return noqa_by_line(parsed.source)

    def noqa_comments(self, parsed: LeverFile) -> list[NoqaComment]:
        return noqa_comments_by_line(parsed.source, "#")


FRONTEND = LeverFileFrontend()
