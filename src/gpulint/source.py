"""Decoded source text with the line and column arithmetic every front-end needs."""

from __future__ import annotations

import bisect
import functools
import re
from pathlib import PurePath

_NEWLINE = re.compile(r"\r\n|\r|\n")
_TEST_DIRS = {"test", "tests", "testing", "unittests", "unit_tests"}


def is_test_path(display_path: str) -> bool:
    """Test code, by the names pytest, gtest and common layouts use: `test_*`, `*_test`,
    `test.py`/`tests.cu`, `conftest.py`, or anything under a `tests/`-like directory."""
    path = PurePath(display_path)
    stem = path.stem.lower()
    return (
        stem.startswith("test_")
        or stem.endswith("_test")
        or stem in ("test", "tests", "conftest")
        or any(part.lower() in _TEST_DIRS for part in path.parts[:-1])
    )


# Folders of someone else's code copied into a project: its maintainers do not patch it. Excluded
# from checking by default (`config.DEFAULT_EXCLUDE`); the claims of documents in them are not
# the project's own (`frontends/docs.py`).
VENDORED_DIRS = (
    "third_party",
    "third-party",
    "thirdparty",
    "3rdparty",
    "vendor",
    "vendored",
    "external",
    "extern",
    "deps",
    "dependencies",
)

_DRIVER_DIRS = {
    "bench",
    "benches",
    "benchmark",
    "benchmarks",
    "demo",
    "demos",
    "example",
    "examples",
    "sample",
    "samples",
}
_DRIVER_STEM = re.compile(r"^(?:bench|benchmark|demo)(?:_|$)|_(?:bench|benchmark|demo)$")


def is_driver_path(display_path: str) -> bool:
    """Code that drives other code rather than being called by it: tests (`is_test_path`),
    benchmarks, demos and examples, by directory (`benchmarks/`, `examples/`, ...) or file name
    (`bench_gemm.cu`, `gemm_benchmark.cu`). Rules about failures a user would miss use it; a
    failure in a driver shows when the driver runs."""
    if is_test_path(display_path):
        return True
    path = PurePath(display_path)
    return bool(_DRIVER_STEM.search(path.stem.lower())) or any(
        part.lower() in _DRIVER_DIRS for part in path.parts[:-1]
    )


class SourceText:
    """A decoded file. Converts between (line, column) positions and character offsets.

    Lines end at \\n, \\r\\n or a lone \\r, as Python's tokenizer counts them. Columns handed out
    are 1-based code points; parsers that count UTF-8 bytes go through `col_from_utf8`.
    """

    def __init__(self, text: str):
        self.text = text

    @functools.cached_property
    def line_starts(self) -> list[int]:
        starts = [0]
        starts.extend(m.end() for m in _NEWLINE.finditer(self.text))
        return starts

    @property
    def line_count(self) -> int:
        return len(self.line_starts)

    def line_text(self, line: int) -> str:
        """Text of 1-based `line` without its line ending."""
        starts = self.line_starts
        if line < 1 or line > len(starts):
            return ""
        start = starts[line - 1]
        end = starts[line] if line < len(starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, line: int, col: int) -> int:
        """Character offset of 1-based (line, col)."""
        return self.line_starts[line - 1] + col - 1

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, col) of a character offset."""
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def col_from_utf8(self, line: int, byte_col: int) -> int:
        """1-based code-point column from a 0-based UTF-8 byte column on 1-based `line`."""
        text = self.line_text(line)
        if text.isascii():
            return byte_col + 1
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")) + 1

    def utf8_from_col(self, line: int, col: int) -> int:
        text = self.line_text(line)
        return len(text[: col - 1].encode("utf-8"))
