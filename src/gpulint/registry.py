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
from typing import Any

FORMAT = 1
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
        static_triggers = not any(
            _overrides(rule, m) for m in ("gates", "trigger_bytes", "requires_bytes")
        )
        static_applicable = not _overrides(rule, "applicable")
        entry: dict[str, Any] = {
            "code": rule.code,
            "name": rule.name,
            "module": rule.__module__,
            "class": rule.__qualname__,
            "languages": list(rule.languages()),
            "default_enabled": rule.default_enabled,
            "static_triggers": static_triggers,
            "static_applicable": static_applicable,
            # Skipped for want of hardware targets (the note `gpulint check` prints once).
            "needs_targets": not rule.applicable(none) and rule.applicable(some),
        }
        if static_triggers:
            entry["triggers"] = list(rule.triggers)
            entry["requires"] = list(rule.requires)
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
    default_enabled: bool
    static_triggers: bool  # trigger_bytes/requires_bytes are Rule's: the triggers below
    static_applicable: bool  # applicable is Rule's (always True)
    needs_targets: bool
    triggers: tuple[bytes, ...] | None  # None: not static (ask the class)
    requires: tuple[bytes, ...] | None

    @property
    def static_gates(self) -> bool:
        """Its gates are known without importing it, whatever the settings."""
        return self.static_triggers and self.static_applicable

    def load(self) -> type:
        module = importlib.import_module(self.module)
        cls = module
        for part in self.qualname.split("."):
            cls = getattr(cls, part)
        return cls  # type: ignore[return-value]


@dataclass(frozen=True)
class FrontendRef:
    module: str
    language: str
    extensions: tuple[str, ...]
    cache_salt: bool
    index: bool

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
    def _longest_first(self) -> tuple[tuple[str, FrontendRef], ...]:
        table = self.by_extension
        return tuple((ext, table[ext]) for ext in sorted(table, key=len, reverse=True))

    def frontend_for(self, filename: str) -> FrontendRef | None:
        """As `gpulint.frontends.frontend_for`: the longest extension the name ends with."""
        name = filename.lower()
        for ext, ref in self._longest_first:
            if name.endswith(ext):
                return ref
        return None


def _from_classes() -> Registry:
    """The registry read off the imported classes (no index, or a stale one)."""
    data = json.loads(render())
    return _parse(data)


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
            e["default_enabled"],
            e["static_triggers"],
            e["static_applicable"],
            e["needs_targets"],
            gate(e, "triggers"),
            gate(e, "requires"),
        )
        for e in data["rules"]
    )
    fronts = tuple(
        FrontendRef(f["module"], f["language"], tuple(f["extensions"]), f["cache_salt"], f["index"])
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


def main(argv: list[str] | None = None) -> int:
    changed = write()
    print(f"{INDEX}: {'written' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
