"""Positions between gpulint and an LSP client.

gpulint counts 1-based lines and 1-based code-point columns (end exclusive) and its fix edits are
code-point offsets into the decoded text. LSP counts 0-based lines and 0-based columns in the
encoding the client and server agreed on: UTF-16 code units unless the client offered another
(`general.positionEncodings`). An emoji is one code point, two UTF-16 units and four UTF-8 bytes.
"""

from __future__ import annotations

UTF16, UTF8, UTF32 = "utf-16", "utf-8", "utf-32"


def units(text: str, encoding: str = UTF16) -> int:
    """Length of `text` in the position encoding's units."""
    if encoding == UTF32:
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def character(line_text: str, col: int, encoding: str = UTF16) -> int:
    """The LSP `character` of 1-based code-point column `col` on a line."""
    return units(line_text[: max(col - 1, 0)], encoding)


def column(line_text: str, char: int, encoding: str = UTF16) -> int:
    """The 1-based code-point column of LSP `character` `char` on a line (clamped to its end)."""
    if encoding == UTF32 or line_text.isascii():
        return min(char, len(line_text)) + 1
    count = 0
    for i, c in enumerate(line_text):
        if count >= char:
            return i + 1
        count += units(c, encoding)
    return len(line_text) + 1
