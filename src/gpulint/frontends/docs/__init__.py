"""The documentation front-end: Markdown (`.md`, `.markdown`) and reStructuredText (`.rst`).

A document is read block by block and everything that is not the author's own prose is blanked
out (replaced by spaces, newlines kept, so every offset still points into the file): front
matter, fenced and indented code blocks, RST literal blocks and code directives, block quotes,
HTML and RST comments, inline code, link targets, HTML tags, and text in quotation marks. What
remains is cut into prose units (paragraphs, list items, table rows, headings) for
gpulint.claims. Evidence references (`gpulint-evidence:` tags in comments, links to bench
records) are collected before they are blanked. Rules see `DocUnit` nodes.

Python docstrings go through the same masking (`docs.docstrings`) so GPU910-912 judge a
docstring exactly as they judge a README.

The package, one module per fact: `masking` (what of a Markdown or RST document is the
author's prose), `units` (that prose cut into units, with their neighbourhood and evidence),
`scope` (whose claims a document makes), `commands` (the shell commands in its code blocks) and
`docstrings` (the same reading of Python docstrings); this module is the front-end itself.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from gpulint.claims import Claim, analyse
from gpulint.diagnostics import Finding
from gpulint.frontends import Memo, decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.frontends.docs.commands import shell_blocks
from gpulint.frontends.docs.masking import Masker, mask_markdown, mask_rst
from gpulint.frontends.docs.scope import CHANGELOG, claims_scope, evidence_context
from gpulint.frontends.docs.units import DocUnit, units_from
from gpulint.settings import Settings
from gpulint.source import SourceText
from gpulint.suppression import NoqaComment


class _Nodes(Mapping[str, list[Any]]):
    """A document's nodes by kind. The commands of its code blocks are found (a CommonMark
    parse) only when a rule asks for them: most documents pass no shell rule's text gate."""

    def __init__(self, units: list[Any], commands: Callable[[], list[Any]]):
        self._found: dict[str, list[Any]] = {"DocUnit": units}
        self._commands: Callable[[], list[Any]] | None = commands

    def __getitem__(self, kind: str) -> list[Any]:
        if kind == "ShellCommand" and self._commands is not None:
            self._found[kind], self._commands = self._commands(), None
        return self._found[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(("DocUnit", "ShellCommand"))

    def __len__(self) -> int:
        return 2


class DocFile:
    language = "markdown"

    def __init__(self, display_path: str, text: str, settings: Settings):
        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        self.settings = settings
        self.memo = Memo()  # what rules compute once per document (none yet)
        name = display_path.replace("\\", "/").rsplit("/", 1)[-1]
        self.rst = name.lower().endswith((".rst", ".rest"))
        self.changelog = bool(CHANGELOG.match(name))
        masker = Masker(text)
        (mask_rst if self.rst else mask_markdown)(masker)
        units = units_from(masker.text, text, self.source, masker, rst=self.rst)
        self.nodes_by_type = _Nodes(
            [DocUnit(u, *self.source.position(u.start)) for u in units],
            (lambda: []) if self.rst else functools.partial(shell_blocks, self.source),
        )

    def span(self, node: Any) -> tuple[int, int, int, int]:
        if isinstance(node, Claim):
            line, col = self.source.position(node.start)
            end_line, end_col = self.source.position(node.end)
            return line, col, end_line, end_col
        span: tuple[int, int, int, int] = node.span
        return span

    @functools.cached_property
    def claims(self) -> list[Claim]:
        evidence = evidence_context(self.display_path, self.settings)
        scope = claims_scope(self.display_path, self.settings)
        return [
            c
            for node in self.nodes_by_type["DocUnit"]
            for c in analyse(node.unit, evidence, scope=scope)
        ]


class DocsFrontend:
    language = "markdown"
    extensions = (".md", ".markdown", ".rst")

    def parse(self, display_path: str, data: bytes, settings: Settings) -> DocFile:
        return DocFile(display_path, decode(data), settings)

    def run(self, parsed: DocFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return run_rules(parsed, rules, lambda kind: parsed.nodes_by_type.get(kind, ()))

    def noqa_lines(self, parsed: DocFile) -> dict[int, frozenset[str]]:
        if not parsed.rst:
            return noqa_by_line(parsed.source)
        return noqa_by_line(parsed.source, lambda line: re.sub(r"^\s*\.\.\s+noqa", "# noqa", line))

    def noqa_comments(self, parsed: DocFile) -> list[NoqaComment]:
        # Markdown's `<!-- noqa -->` only: a `# noqa` in a code block is part of the example
        # shown, and reStructuredText's `.. noqa` directive is left as written.
        return [] if parsed.rst else noqa_comments_by_line(parsed.source, "<!--")


FRONTEND = DocsFrontend()
