"""Language front-ends. Each module here defines ``FRONTEND``: the extensions it claims, how it
turns bytes into a parsed file, and how it walks that file through the rules of its language.
The engine picks the front-end by extension; adding a language is adding a module here."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar, overload

from gpulint.diagnostics import Finding, internal_error, unanalysable
from gpulint.settings import Settings
from gpulint.source import SourceText
from gpulint.suppression import (
    NoqaComment,
    find_noqa,
    noqa_codes,
    noqa_comment_at,
    opens_comment,
)

T = TypeVar("T")
F = TypeVar("F")


class BackLink(Generic[F]):
    """An attribute that refers back to the parsed file weakly: `file: BackLink[PythonFile] =
    BackLink()` in the class body, then `self.file = file` as usual. Models a file caches on
    itself (loops, semantic model, summaries, constant folding, a memo entry) hold their file
    this way, so a file and everything hung off it form no reference cycle: reference counting
    frees them the moment the engine drops the file, and Python's cyclic collector has nothing
    to walk (it once took half the CPU of a cold run). The file outlives such a model by
    construction."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_ref"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> BackLink[F]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> F: ...
    def __get__(self, obj: object, owner: type | None = None) -> BackLink[F] | F:
        if obj is None:
            return self
        value: F = obj.__dict__[self.slot]()
        return value

    def __set__(self, obj: object, value: F) -> None:
        obj.__dict__[self.slot] = weakref.ref(value)


class MemoKey(Generic[T]):
    """A typed key for `Memo`: `_INTERVALS: MemoKey[list[Interval]] = MemoKey("intervals")`."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"MemoKey({self.name!r})"


class Memo:
    """The one place for a rare per-file cache (computed once per file, asked many times): every
    front-end's parsed file has one (`file.memo`), so that no rule or helper stashes facts on
    the file object or keeps a private table keyed by it. A value that refers back to its file
    holds it through a `BackLink`."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[MemoKey[Any], object] = {}

    def get(self, key: MemoKey[T], build: Callable[[], T]) -> T:
        try:
            return self._values[key]  # type: ignore[return-value]  # the key's type says what it holds
        except KeyError:
            value = self._values[key] = build()
            return value

    def pop(self, key: MemoKey[Any]) -> None:
        """Forget `key` (a fact whose inputs changed: a file re-checked with its project)."""
        self._values.pop(key, None)


class ParseError(Exception):
    """The file cannot be analysed; becomes a GPU000 finding at (line, col)."""

    def __init__(self, message: str, line: int = 1, col: int = 1, cell: int | None = None):
        super().__init__(message)
        self.line = line
        self.col = col
        self.cell = cell  # in a notebook: the cell (line and col are within it)


class Frontend(Protocol):
    language: str
    extensions: tuple[str, ...]

    def parse(self, display_path: str, data: bytes, settings: Settings) -> Any: ...

    def run(self, parsed: Any, rules: Sequence[Any]) -> Iterable[Finding]: ...

    def noqa_lines(self, parsed: Any) -> dict[int, frozenset[str]]:
        """1-based line -> noqa codes (empty set: blanket), for lines that carry a noqa."""
        ...

    def noqa_comments(self, parsed: Any) -> list[NoqaComment]:
        """The `noqa` comments written in the file, where they are and which lines they cover:
        only real comments of the format (never a `# noqa` inside a string or a code block
        the front-end does not lint), for a check that reports the unused ones."""
        ...


@functools.cache
def frontends() -> tuple[Frontend, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        frontend = getattr(module, "FRONTEND", None)
        if frontend is not None:
            found.append(frontend)
    return tuple(found)


@functools.cache
def by_extension() -> dict[str, Frontend]:
    table: dict[str, Frontend] = {}
    for frontend in frontends():
        for ext in frontend.extensions:
            table[ext] = frontend
    return table


def decode(data: bytes) -> str:
    """Bytes to text: a BOM or PEP 263 cookie decides, else UTF-8. Raises ParseError."""
    import codecs
    import io
    import tokenize

    if b"\x00" in data[:8192] and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ParseError("binary file (NUL bytes), not source text; skipped")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as e:
            raise ParseError(f"cannot decode: {e}") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as e:
        line = data[: getattr(e, "start", 0)].count(b"\n") + 1
        raise ParseError(
            f"cannot decode as {encoding}: {e.reason if hasattr(e, 'reason') else e}", line
        ) from None
    if "\x00" in text:
        raise ParseError("binary file (NUL characters), not source text; skipped")
    return text.removeprefix("\ufeff")


def run_rules(
    parsed: Any, rules: Sequence[Any], nodes_for: Callable[[str], Iterable[Any]]
) -> Iterable[Finding]:
    """The dispatch every front-end shares: each rule's `visit_<kind>` methods over the nodes
    `nodes_for(kind)` gives, then its `finish`. A rule that fails on a file (in its own code or
    in a front-end fact it asked for) becomes one GPU001 for that file, naming the rule; what it
    reported before it failed is kept, and the other rules and files go on."""
    for rule in rules:
        try:
            for name in dir(type(rule)):
                if name.startswith("visit_"):
                    visit = getattr(rule, name)
                    for node in nodes_for(name[6:]):
                        yield from visit(node, parsed)
            yield from rule.finish(parsed)
        except RecursionError:
            yield unanalysable(parsed.display_path, f"{rule.code}: file too deeply nested")
        except Exception as e:  # a rule bug must not lose the rest of the run
            yield internal_error(parsed.display_path, f"rule {rule.code}", e)


def noqa_by_line(
    source: SourceText, rewrite: Callable[[str], str] | None = None
) -> dict[int, frozenset[str]]:
    """1-based line -> its noqa codes, for lines that carry one (`rewrite` adapts a format's
    own comment syntax first, e.g. reStructuredText's `.. noqa`)."""
    out: dict[int, frozenset[str]] = {}
    if "noqa" not in source.text.lower():
        return out
    for number in range(1, source.line_count + 1):
        line = source.line_text(number)
        codes = noqa_codes(rewrite(line) if rewrite else line)
        if codes is not None:
            out[number] = codes
    return out


def noqa_comments_by_line(source: SourceText, opening: str) -> list[NoqaComment]:
    """The `noqa` comments of a line-based format whose comments open with `opening` (`#`,
    `//`, `<!--`): each covers its own line."""
    out: list[NoqaComment] = []
    if "noqa" not in source.text.lower():
        return out
    for number in range(1, source.line_count + 1):
        line = source.line_text(number)
        match = find_noqa(line)
        if match is not None and opens_comment(line, match, opening):
            out.append(noqa_comment_at(line, number, source.line_starts[number - 1], match))
    return out
