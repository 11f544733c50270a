"""A static index of the rules and front-ends, generated from them: what a run needs to know
before it parses anything (which rules a configuration enables, their codes for the cache key,
their textual gates; which front-end claims an extension, and whether it salts cache keys or
indexes a project), so that a cache hit or a file no rule wants imports no rule module and no
front-end. The rule and front-end modules stay the one place each rule is written: this file is
derived from them (`python -m gpulint.docsgen` regenerates it with the docs;
tests/test_docs_fresh.py fails when it is stale).

At run time it is used only while it matches the sources it was made from (a hash of the rule
and front-end modules' bytes, about a millisecond to check): an edited rule in a development
install, with the index not regenerated, falls back to importing everything, as before.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulint.frontends import Frontend
    from gpulint.rule import Rule

FORMAT = 2
HERE = os.path.dirname(os.path.abspath(__file__))
INDEX = os.path.join(HERE, "data", "registry.json")


def _rules_dir() -> str:
    import gpulint.rules

    return os.path.dirname(os.path.abspath(gpulint.rules.__file__))


def _frontends_dir() -> str:
    return os.path.join(HERE, "frontends")


def _source_files() -> list[tuple[str, str]]:
    """(name, path) of what the index is derived from: every module of the rules package, and
    the module of each front-end (a package's __init__)."""
    out = []
    rules = _rules_dir()
    for name in sorted(os.listdir(rules)):
        if name.endswith(".py"):
            out.append((f"rules/{name}", os.path.join(rules, name)))
    frontends = _frontends_dir()
    for name in sorted(os.listdir(frontends)):
        path = os.path.join(frontends, name)
        if name.endswith(".py") and name != "__init__.py":
            out.append((f"frontends/{name}", path))
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            out.append((f"frontends/{name}/__init__.py", os.path.join(path, "__init__.py")))
    return out


def source_digest() -> str:
    digest = hashlib.sha256()
    for name, path in _source_files():
        with open(path, "rb") as f:
            data = f.read()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


# -- generating ---------------------------------------------------------------------------------
def _overrides(cls: type, name: str) -> bool:
    from gpulint.rule import Rule

    return getattr(cls, name).__func__ is not getattr(Rule, name).__func__


class _Reads:
    """Settings that note what a rule's `gates` read of them: the option tables asked through
    `option()`, or anything else (then the gates are asked at run time, never assumed)."""

    def __init__(self, targets: tuple = ()) -> None:
        from gpulint.settings import Settings

        self.tables: set[str] = set()
        self.other = False
        reads = self

        class Options(dict):
            """No table is set; a table looked up is noted (`settings.options.get(name)`)."""

            def get(self, table: str, default: Any = None) -> Any:
                reads.tables.add(table)
                return default

            def __contains__(self, table: object) -> bool:
                reads.tables.add(str(table))
                return False

            def __getitem__(self, table: str) -> Any:
                reads.tables.add(table)
                raise KeyError(table)

            def __iter__(self):  # the whole mapping: more than named tables
                reads.other = True
                return super().__iter__()

        class Recording(Settings):
            def option(self, table: str, key: str, default: Any = None) -> Any:
                reads.tables.add(table)
                return default  # no table is set here

            def __getattribute__(self, name: str) -> Any:
                if name == "options":
                    return Options()
                if name in ("targets", "evidence", "projects"):
                    reads.other = True
                return super().__getattribute__(name)

        self.settings = Recording(targets=targets)


def _gates(rule: type[Rule]) -> tuple[dict[str, list[list[str]]], list[str] | None]:
    """A rule's gates per language under default settings, and the option tables they read
    (None: they read more than option tables). At run time the recorded gates stand in for
    the rule's own answer wherever none of those tables is configured: the same inputs."""
    reads = _Reads()
    gates = {}
    for language in rule.languages():
        triggers, requires = rule.gates(language, reads.settings)
        gates[language] = [
            [t.decode("utf-8", "surrogateescape") for t in triggers],
            [t.decode("utf-8", "surrogateescape") for t in requires],
        ]
    return gates, (None if reads.other else sorted(reads.tables))


def render() -> str:
    """The index as it should be, from the rule classes and front-end objects themselves."""
    from gpulint.frontends import frontends
    from gpulint.hardware import table
    from gpulint.rule import all_rules
    from gpulint.settings import Settings

    none, some = Settings(), Settings(targets=(table().target("sm_90"),))
    rules = []
    for rule in all_rules():
        # A rule whose gates depend on the settings (a data-driven trigger list, a rule that
        # needs hardware targets) is imported to ask it; the others' gates are answered here.
        static_triggers = not any(_overrides(rule, m) for m in ("trigger_bytes", "requires_bytes"))
        static_applicable = not _overrides(rule, "applicable")
        gates, reads = _gates(rule)
        entry: dict[str, Any] = {
            "code": rule.code,
            "name": rule.name,
            "module": rule.__module__,
            "class": rule.__qualname__,
            "languages": list(rule.languages()),
            "tier": rule.tier,
            "static_triggers": static_triggers,
            "static_applicable": static_applicable,
            # Skipped for want of hardware targets (the note `gpulint check` prints once).
            "needs_targets": not rule.applicable(none) and rule.applicable(some),
            "torch_since": list(rule.torch_since) if rule.torch_since else None,
            "gates": gates,
            "gate_reads": reads,
        }
        if static_triggers:
            entry["triggers"] = list(rule.triggers)
            entry["requires"] = list(rule.requires)
        elif entry["needs_targets"]:
            # For the note on rules skipped for want of targets: the triggers it would have
            # with a target, and the option tables they read (the note imports the rule only
            # where one of those is configured).
            recorded = _Reads(some.targets)
            triggers = rule.trigger_bytes(recorded.settings)
            if not recorded.other:
                entry["target_triggers"] = [t.decode("utf-8", "surrogateescape") for t in triggers]
                entry["target_trigger_reads"] = sorted(recorded.tables)
        rules.append(entry)
    fronts = []
    for frontend in frontends():
        fronts.append(
            {
                "module": type(frontend).__module__,
                "language": frontend.language,
                "extensions": list(frontend.extensions),
                "cache_salt": getattr(frontend, "cache_salt", None) is not None,
                "index": hasattr(frontend, "index"),
                "strict_encoding": bool(getattr(frontend, "strict_encoding", False)),
                "embeds": hasattr(frontend, "gate_bytes"),
            }
        )
    payload = {"format": FORMAT, "source": source_digest(), "rules": rules, "frontends": fronts}
    return json.dumps(payload, indent=1, ensure_ascii=False) + "\n"


def stale() -> bool:
    try:
        with open(INDEX, encoding="utf-8") as f:
            return f.read() != render()
    except OSError:
        return True


def write() -> bool:
    """Write the index; True if it changed."""
    text = render()
    try:
        with open(INDEX, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    with open(INDEX, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return True


# -- reading ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RuleRef:
    """A rule known by its index entry; `load()` imports its module for the class."""

    code: str
    name: str
    module: str
    qualname: str
    languages: tuple[str, ...]
    tier: str  # "default", "pedantic" or "preview" (gpulint.rule.TIERS)
    static_triggers: bool  # trigger_bytes/requires_bytes are Rule's: the triggers below
    static_applicable: bool  # applicable is Rule's (always True)
    needs_targets: bool
    torch_since: tuple[int, ...] | None  # Rule.torch_since
    triggers: tuple[bytes, ...] | None  # None: not static (ask the class)
    requires: tuple[bytes, ...] | None
    # (language, triggers, requires) under default settings, and the option tables they read
    # (None: more than option tables)
    gates: tuple[tuple[str, tuple[bytes, ...], tuple[bytes, ...]], ...]
    gate_reads: tuple[str, ...] | None
    # needs_targets without static triggers: `trigger_bytes` with a target, and the option
    # tables it reads (None: not known, ask the rule)
    target_triggers: tuple[bytes, ...] | None = None
    target_trigger_reads: tuple[str, ...] = ()

    def triggers_with_targets(self, options: dict) -> tuple[bytes, ...] | None:
        """`trigger_bytes` under settings with these options and a target, when the index
        knows it; None: ask the rule."""
        if self.target_triggers is None:
            return None
        if any(table in options for table in self.target_trigger_reads):
            return None
        return self.target_triggers

    def gates_for(self, language: str, options: dict) -> tuple[tuple, tuple] | None:
        """`rule.gates(language, settings)` for settings with these options, when the index
        knows it (the gates read no table that is set); None: ask the rule."""
        if not self.static_applicable or self.gate_reads is None:
            return None
        if any(table in options for table in self.gate_reads):
            return None
        for lang, triggers, requires in self.gates:
            if lang == language:
                return triggers, requires
        return None

    def load(self) -> type:
        cls: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            cls = getattr(cls, part)
        return cls


@dataclass(frozen=True)
class FrontendRef:
    module: str
    language: str
    extensions: tuple[str, ...]
    cache_salt: bool
    index: bool
    strict_encoding: bool  # undecodable bytes are reported even where no rule looks
    # The file holds another language's source (a notebook's code cells): the front-end's
    # `gate_bytes(data)` is what the rules' gates are tested on.
    embeds: bool = False

    def load(self) -> Any:
        return importlib.import_module(self.module).FRONTEND


@dataclass(frozen=True)
class Registry:
    rules: tuple[RuleRef, ...]
    frontends: tuple[FrontendRef, ...]

    @functools.cached_property
    def by_extension(self) -> dict[str, FrontendRef]:
        return {ext: f for f in self.frontends for ext in f.extensions}

    @functools.cached_property
    def _by_last_suffix(self) -> dict[str, tuple[tuple[str, FrontendRef], ...]]:
        """Extensions grouped by their last dot-suffix, longest first: a name can end with an
        extension only if it ends with that extension's last suffix, so one dict lookup
        finds the few candidates (every extension holds a dot)."""
        table = self.by_extension
        groups: dict[str, list[tuple[str, FrontendRef]]] = {}
        for ext in sorted(table, key=len, reverse=True):
            groups.setdefault(ext[ext.rfind(".") :], []).append((ext, table[ext]))
        return {suffix: tuple(group) for suffix, group in groups.items()}

    def frontend_for(self, filename: str) -> FrontendRef | None:
        """As `gpulint.registry.frontend_for`: the longest extension the name ends with."""
        name = filename.lower()
        dot = name.rfind(".")
        if dot < 0:
            return None
        for ext, ref in self._by_last_suffix.get(name[dot:], ()):
            if name.endswith(ext):
                return ref
        return None


def _from_classes() -> Registry:
    """The registry read off the imported classes (no index, or a stale one)."""
    data = json.loads(render())
    return _parse(data)


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _parse(data: dict) -> Registry:
    def gate(entry: dict, key: str) -> tuple[bytes, ...] | None:
        if not entry["static_triggers"]:
            return None
        return tuple(t.encode() for t in entry[key])

    rules = tuple(
        RuleRef(
            e["code"],
            e["name"],
            e["module"],
            e["class"],
            tuple(e["languages"]),
            e["tier"],
            e["static_triggers"],
            e["static_applicable"],
            e["needs_targets"],
            tuple(e["torch_since"]) if e.get("torch_since") else None,
            gate(e, "triggers"),
            gate(e, "requires"),
            tuple(
                (lang, tuple(_b(t) for t in tr), tuple(_b(t) for t in rq))
                for lang, (tr, rq) in e["gates"].items()
            ),
            None if e["gate_reads"] is None else tuple(e["gate_reads"]),
            tuple(_b(t) for t in e["target_triggers"]) if "target_triggers" in e else None,
            tuple(e.get("target_trigger_reads", ())),
        )
        for e in data["rules"]
    )
    fronts = tuple(
        FrontendRef(
            f["module"],
            f["language"],
            tuple(f["extensions"]),
            f["cache_salt"],
            f["index"],
            f["strict_encoding"],
            bool(f.get("embeds", False)),
        )
        for f in data["frontends"]
    )
    return Registry(rules, fronts)


@functools.cache
def registry() -> Registry:
    """The index when it matches the sources, else the same read off the imported classes."""
    try:
        with open(INDEX, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") == FORMAT and data.get("source") == source_digest():
            return _parse(data)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return _from_classes()


def frontend_for(filename: str) -> Frontend | None:
    """The front-end claiming `filename` (the longest extension it ends with, so
    ".env.local"-style names can be claimed precisely). Only that front-end is imported: the
    index knows which module claims which extension."""
    ref = registry().frontend_for(filename)
    return ref.load() if ref is not None else None


def main(argv: list[str] | None = None) -> int:
    changed = write()
    print(f"{INDEX}: {'written' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
