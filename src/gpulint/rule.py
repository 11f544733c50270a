"""The rule base class and rule discovery.

A rule is one module in ``src/gpulint/rules/`` holding one ``Rule`` subclass.
Everything about the rule lives on that class: code, name, severity, language, the textual
triggers without which it cannot fire, the bench that backs it, its message, its documentation
(the class docstring, with ruff's headings) and its VALID/INVALID examples, which the test suite
runs. The CLI, the docs, SARIF, flake8 and the language server all read the same object; nothing
is registered by hand.
"""

from __future__ import annotations

import contextlib
import functools
import re
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    Protocol,
    TypeAlias,
    TypeGuard,
    TypeVar,
)

from gpulint.diagnostics import Finding, Fix, Related, Severity

if TYPE_CHECKING:
    from gpulint.settings import Settings
    from gpulint.suppression import NoqaUse

# Where a finding is: (line, col, end_line, end_col), 1-based, columns in code points, the end
# exclusive (None: unknown).
Span: TypeAlias = tuple[int, int, int | None, int | None]


class Located(Protocol):
    """What `Rule.report` needs of a parsed file (every front-end's file is one): the path it
    is shown as, and where one of its nodes is."""

    @property
    def display_path(self) -> str: ...

    def span(self, node: Any, /) -> Span: ...


FileT = TypeVar("FileT", bound=Located)


def is_span(at: object) -> TypeGuard[Span]:
    """`at` is a span already (a rule reporting a place no node covers), not a node."""
    return (
        isinstance(at, tuple)
        and len(at) == 4
        and isinstance(at[0], int)
        and isinstance(at[1], int)
        and all(v is None or isinstance(v, int) for v in at[2:])
    )


# Any rule, whatever file type it is written for (what discovery and the engine hold).
AnyRule: TypeAlias = "Rule[Any]"

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "References")

# A rule's tier, as clippy's lint groups and ruff's preview: "default" rules run unless
# ignored; "pedantic" ones only when selected by code, by family prefix or by the `pedantic`
# selector; "preview" ones only when selected by code, or in preview mode (`preview = true`,
# `--preview`) by any pattern that covers them. `config.Config.is_enabled` decides.
Tier = Literal["default", "pedantic", "preview"]
TIERS: tuple[Tier, ...] = ("default", "pedantic", "preview")


@dataclass(frozen=True)
class Invalid:
    """An example that must fire. `fixed` is the code after autofix, when the rule has one."""

    code: str
    fixed: str | None = None
    expect: tuple[str, ...] = ()  # optional: the rule codes expected, when not just this rule
    targets: tuple[str, ...] = ()  # hardware targets to lint the example with


@dataclass(frozen=True)
class Valid:
    """An example that must stay silent (plain strings in VALID mean the same, with no targets)."""

    code: str
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exemption:
    """A case a rule leaves alone on purpose, as ruff's and clang-tidy's docs list theirs.

    `name` (kebab-case) is what the rule's code passes to `Rule.exempt` where it stays silent,
    so every deliberate silence is named; `why` is one line for the rule's page ("Left alone"):
    the case, then why no finding is right. `example` (a snippet, linted as the rule's VALID
    examples are) or `fixture` (a file under fixtures/, linted as tests/test_fixtures.py does)
    must stay silent and take this exemption: tests/test_exemptions.py runs it. `filename`: the
    path the example is linted as, where the case depends on it (test code), instead of the
    rule's example file name. `files`: for a case only a project shows (an extension and the
    scripts that load it), its files as (path, text) pairs, linted together as one tree."""

    name: str
    why: str
    example: str | Valid | None = None
    fixture: str | None = None
    filename: str | None = None
    files: tuple[tuple[str, str], ...] = ()


# Set by `recording_exemptions()`: the (rule code, exemption name) pairs taken while it is on.
_TAKEN: set[tuple[str, str]] | None = None


@contextlib.contextmanager
def recording_exemptions() -> Iterator[set[tuple[str, str]]]:
    """Record the exemptions rules take (tests: an exemption's example must take it). While on,
    `Rule.exempt` also refuses a name its rule does not declare."""
    global _TAKEN
    before, _TAKEN = _TAKEN, set()
    try:
        yield _TAKEN
    finally:
        _TAKEN = before


class Rule(Generic[FileT]):
    """The base of every rule. `Rule[PythonFile]` (or `Rule[CudaFile]`, ...) types `file` in
    `report` and `finish`; a bare `Rule` is `Rule[Any]`, for rules over several formats."""

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, e.g. "host-sync-in-step-loop"
    severity: ClassVar[Severity] = Severity.WARNING
    language: ClassVar[str | tuple[str, ...]] = "python"  # or a tuple of front-end languages
    triggers: ClassVar[tuple[str, ...]] = ()  # substrings; none of them in the file -> cannot fire
    requires: ClassVar[tuple[str, ...]] = ()  # a second gate: one of these must occur too
    bench: ClassVar[str | None] = None  # the `gpulint bench` that measures the cost
    bench_claim: ClassVar[str | None] = None  # which comparison of that bench, when it has several

    @classmethod
    def evidence_key(cls) -> str | None:
        """How measured evidence is looked up: "bench" or "bench:claim"."""
        if not cls.bench:
            return None
        return f"{cls.bench}:{cls.bench_claim}" if cls.bench_claim else cls.bench

    message: ClassVar[str] = ""
    fixable: ClassVar[bool] = False
    precision: ClassVar[str] = "high"  # SARIF: very-high / high / medium / low
    tags: ClassVar[tuple[str, ...]] = ()
    tier: ClassVar[Tier] = "default"
    # The first torch release the rule's advice applies to (the API it suggests, the deprecation
    # it reports): a project whose declared torch (gpulint.torchversion) admits no release from
    # it on is not checked by the rule.
    torch_since: ClassVar[tuple[int, ...] | None] = None
    example_filename: ClassVar[str | None] = None  # file name the examples are linted as
    VALID: ClassVar[list[str | Valid]] = []
    INVALID: ClassVar[list[str | Invalid]] = []
    # The cases the rule leaves alone on purpose, each taken in its code by `self.exempt(name,
    # ...)` and shown on its page under "Left alone" (a subclass inherits its parent's).
    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if isinstance(cls.default_enabled, bool):  # the attribute `tier` replaced
            raise TypeError(f"{cls.__name__}: `default_enabled` is gone; set `tier` instead")
        if cls.tier not in TIERS:
            raise TypeError(f"{cls.__name__}: tier {cls.tier!r} is not one of {TIERS}")
        names = [e.name for e in cls.EXEMPTIONS]
        if len(set(names)) != len(names):
            raise TypeError(f"{cls.__name__}: an exemption is declared twice in {names}")

    @classmethod
    def default_enabled(cls) -> bool:
        """Whether the rule runs with no selection at all (its tier is "default")."""
        return cls.tier == "default"

    def __init__(self, settings: Settings):
        self.settings = settings

    # -- reporting ---------------------------------------------------------------------------
    def report(
        self,
        file: FileT,
        at: object,
        message: str | None = None,
        *,
        fix: Fix | None = None,
        severity: Severity | None = None,
        related: tuple[Related, ...] = (),
        **fmt: object,
    ) -> Finding:
        """A finding at `at`: a node of `file`, located by the front-end that parsed it, or a
        `Span` (line, col, end_line, end_col) for a place no node covers."""
        text = (message or self.message).format(**fmt) if fmt else (message or self.message)
        line, col, end_line, end_col = at if is_span(at) else file.span(at)
        return Finding(
            file.display_path,
            line,
            col,
            self.code,
            text,
            severity or self.severity,
            end_line,
            end_col,
            fix if self.fixable else None,
            related,
        )

    def exempt(self, name: str, taken: object) -> bool:
        """`bool(taken)`: whether the case `name` (one of `EXEMPTIONS`) holds here, so the rule
        stays silent. Written where the rule decides, `if self.exempt("test-code", file.is_test):
        return`, it names the silent path; tests/test_exemptions.py checks every name used is
        declared, every declared one is used, and its example takes it."""
        if taken and _TAKEN is not None:
            if name not in {e.name for e in self.EXEMPTIONS}:
                raise ValueError(f"{self.code}: exemption {name!r} is not in its EXEMPTIONS")
            _TAKEN.add((self.code, name))
        return bool(taken)

    @classmethod
    def exemption(cls, name: str) -> Exemption | None:
        return next((e for e in cls.EXEMPTIONS if e.name == name), None)

    def finish(self, file: FileT) -> Iterable[Finding]:
        """Called once after the walk, for rules that judge the whole file."""
        return ()

    # A rule that judges the file's `noqa` comments themselves (GPU003): it takes no part in
    # the walk; the engine calls `judge_noqa` once suppression is done, with what each comment
    # suppressed. What it reports is subject to per-file-ignores, not to `noqa` (it judges them).
    judges_noqa: ClassVar[bool] = False

    def judge_noqa(self, file: FileT, uses: Sequence[NoqaUse]) -> Iterable[Finding]:
        """Findings about the file's `noqa` comments, after suppression (`judges_noqa`)."""
        return ()

    # -- documentation -----------------------------------------------------------------------
    @classmethod
    def doc(cls) -> str:
        return textwrap.dedent(cls.__doc__ or "").strip()

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split on its ``## Heading`` lines."""
        sections: dict[str, str] = {}
        current = None
        for line in cls.doc().splitlines():
            m = re.match(r"^##\s+(.*?)\s*$", line)
            if m:
                current = m.group(1)
                sections[current] = ""
            elif current is not None:
                sections[current] += line + "\n"
        return {k: v.strip() for k, v in sections.items()}

    @classmethod
    def summary(cls) -> str:
        """One sentence: the first sentence of 'What it does'."""
        what = cls.doc_sections().get("What it does", "") or cls.name.replace("-", " ")
        what = " ".join(what.split())
        m = re.match(r"(.+?[.!?])(\s|$)", what)
        return m.group(1) if m else what

    @classmethod
    def languages(cls) -> tuple[str, ...]:
        """`language` as a tuple: a rule may cover several front-ends (e.g. python and shell)."""
        return cls.language if isinstance(cls.language, tuple) else (cls.language,)

    @classmethod
    def requires_bytes(cls) -> tuple[bytes, ...]:
        return tuple(t.encode() for t in cls.requires)

    @classmethod
    def applicable(cls, settings: Settings) -> bool:
        """False when the rule cannot fire under these settings (e.g. it needs targets)."""
        return True

    @classmethod
    def gates(
        cls, language: str, settings: Settings
    ) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        """(triggers, requires) as bytes for a file of `language`: the engine parses the file for
        this rule only when one of each (an empty tuple: no gate) occurs in its bytes. A rule
        over several formats may gate one of them tighter (the claim rules on Python)."""
        return cls.trigger_bytes(settings), cls.requires_bytes()

    @classmethod
    def trigger_bytes(cls, settings: Settings | None = None) -> tuple[bytes, ...]:
        """The triggers as bytes. A data-driven rule (the lever registry) may widen them from
        `settings`; they stay a necessary condition for the rule to fire."""
        return tuple(t.encode() for t in cls.triggers)


_CODE = re.compile(r"^GPU\d{3}$")


@functools.cache
def all_rules() -> tuple[type[AnyRule], ...]:
    """Every rule class in gpulint.rules, sorted by code. Discovered, never registered. (A run
    imports only the rules it needs, found through the index gpulint.registry derives from
    these classes.)"""
    import importlib
    import inspect
    import pkgutil

    import gpulint.rules as package

    found: dict[str, type[AnyRule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                if not _CODE.match(getattr(obj, "code", "")):
                    raise ValueError(f"{obj.__name__}: rule code must look like GPU123")
                if obj.code in found:
                    raise ValueError(f"duplicate rule code {obj.code}")
                found[obj.code] = obj
    return tuple(found[c] for c in sorted(found))


def rule_by_code(code: str) -> type[AnyRule] | None:
    return next((r for r in all_rules() if r.code == code.upper()), None)
