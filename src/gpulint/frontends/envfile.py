"""The `.env` front-end: dotenv files (`.env`, `prod.env`, `.env` suffix by file name).

Each line is `KEY=value`, optionally `export KEY=value`, with `#` comments; values follow the
shell's quoting, so a line is tokenised with `shlex` exactly as the shell front-end does (a quoted
value may span lines). Rules see `EnvSetting` nodes (gpulint.envvars).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gpulint.diagnostics import Finding
from gpulint.envvars import EnvSetting, comments_around
from gpulint.frontends import decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.frontends.shell import logical_lines
from gpulint.settings import Settings
from gpulint.source import SourceText
from gpulint.suppression import NoqaComment


class EnvFile:
    language = "env"

    def __init__(self, display_path: str, text: str):
        import shlex

        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        lines = [self.source.line_text(n) for n in range(1, self.source.line_count + 1)]
        self.nodes_by_type: dict[str, list[Any]] = {"EnvSetting": []}
        for logical in logical_lines(self.source):
            try:
                words = shlex.split(logical.text, comments=False)
            except ValueError:
                continue
            if words[:1] == ["export"]:
                words = words[1:]
            if len(words) != 1:
                continue  # not a KEY=value line
            name, eq, value = words[0].partition("=")
            if not eq or not name.isidentifier():
                continue
            col = logical.text.find(name) + 1
            line = logical.line
            literal = None if ("$" in value or "`" in value) else value
            own = logical.comment if logical.line == logical.last_line else None
            self.nodes_by_type["EnvSetting"].append(
                EnvSetting(
                    name,
                    literal,
                    line,
                    col,
                    line,
                    col + len(name),
                    comments_around(lines, line - 1, own),
                )
            )

    def span(self, node: Any) -> tuple[int, int, int, int]:
        span: tuple[int, int, int, int] = node.span
        return span


class EnvFrontend:
    language = "env"
    extensions = (".env",)

    def parse(self, display_path: str, data: bytes, settings: Settings) -> EnvFile:
        return EnvFile(display_path, decode(data))

    def run(self, parsed: EnvFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return run_rules(parsed, rules, lambda kind: parsed.nodes_by_type.get(kind, ()))

    def noqa_lines(self, parsed: EnvFile) -> dict[int, frozenset[str]]:
        return noqa_by_line(parsed.source)

    def noqa_comments(self, parsed: EnvFile) -> list[NoqaComment]:
        return noqa_comments_by_line(parsed.source, "#")


FRONTEND = EnvFrontend()
