"""The shell commands a Markdown document's code blocks hold (a CommonMark parse): the
blocks of a shell language, or with a prompt, split into commands with their positions."""

from __future__ import annotations

import functools
import re
from typing import Any

from gpulint.source import SourceText

_SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh", "shell-session", "sh-session"}
_PROMPT = re.compile(r"^\s*(?:\$|#|>|\(\S+\)\s*\$)\s+(?=\S)")


@functools.lru_cache(maxsize=1)
def _markdown_parser() -> Any:
    """CommonMark block structure only (markdown-it-py): the code blocks are what is asked for,
    so inline parsing (emphasis, links) is never run."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    md.disable(["inline", "text_join"], ignoreInvalid=True)
    return md


def code_blocks(source: SourceText) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """Every code block of a Markdown document, wherever CommonMark puts one (at the top, in a
    block quote, in a list item, fenced or indented): (language, 1-based line of its first
    content line, [(content line, column shift)]). A content line is the source line less
    the containers' markers and indentation; its shift is how many characters those took,
    so a position in the content is a position in the file."""
    out = []
    tokens = _markdown_parser().parse(source.text)
    for token in tokens:
        if token.type not in ("fence", "code_block") or token.map is None:
            continue
        begin, end = token.map
        first = begin + 2 if token.type == "fence" else begin + 1  # 1-based
        info = token.info.strip().split()[0].lower() if token.info.strip() else ""
        lines = token.content.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        body = []
        for i, line in enumerate(lines):
            number = first + i
            if number > source.line_count:
                break
            raw = source.line_text(number)
            shift = len(raw) - len(line) if raw.endswith(line) else 0
            body.append((line, shift))
        out.append((info, first, body))
    return out


def shell_blocks(source: SourceText) -> list[Any]:
    """Commands in a guide's shell code blocks (```bash, ```console, no language, or an
    indented block), wherever the document holds them (top level, block quotes, list items),
    placed where they are in the file, so rules about launch commands read a guide as they
    read a script. `$ ` prompts are dropped; comment-only lines stay comments."""
    from dataclasses import replace

    from gpulint.frontends.shell import ShellFile

    out = []
    for language, first, block in code_blocks(source):
        if language not in _SHELL_LANGUAGES:
            continue  # a block of another language (python, yaml, text)
        body, shifts = [], []
        for line, base in block:
            p = _PROMPT.match(line)
            shift = p.end() if p and not line.lstrip().startswith("# ") else 0
            shifts.append(base + shift)
            body.append(line[shift:])
        shell = ShellFile("", "\n".join(body))
        for node in shell.nodes_by_type["ShellCommand"]:
            shift = shifts[node.line - 1] if node.line - 1 < len(shifts) else 0
            end_shift = shifts[node.end_line - 1] if node.end_line - 1 < len(shifts) else 0
            out.append(
                replace(
                    node,
                    line=node.line + first - 1,
                    col=node.col + shift,
                    end_line=node.end_line + first - 1,
                    end_col=node.end_col + end_shift,
                )
            )
    return out
