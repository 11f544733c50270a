"""The refuted-lever registry: levers that were tried and refuted, as data.

The built-in registry (``data/levers.toml``) holds only public facts, each with its source link
and the hardware it is about. Named presets (``data/lever-presets/NAME.toml``, opted into with
``lever-presets = ["NAME"]``) carry one team's own evidence: ``cuda-dev-routing`` is the fleet
table of the cuda-dev-routing document. Users add their own in ``[[tool.gpulint.levers]]`` of
pyproject.toml or in ``[[levers]]`` of a ``levers.toml`` beside it. GPU901 reads the merged registry to find code
that re-attempts a lever refuted for a configured target; GPU902 finds user entries whose
refuting fact carries no source. One validator (`check_entry`) serves the config loader, the
``levers.toml`` loader and GPU902, so an entry means the same thing wherever it is written.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulint.hardware import UnknownTargetError, table

STATUSES = {"sourced": "SOURCED", "unsourced": "UNSOURCED", "reasoned": "reasoned"}
_LISTS = ("targets", "imports", "calls", "config", "packages", "context", "about")
_STRINGS = ("id", "name", "fact", "status", "status_text", "source", "instead", "note")
KEYS = frozenset(_LISTS + _STRINGS)
ANY_TARGET = "any"
USER_FILE = "levers.toml"
# A repository's registry entries are quoted in messages: bounded, so a crafted file cannot
# flood a report or a terminal.
MAX_TEXT = 2000
MAX_ITEMS = 200


class LeverError(ValueError):
    """An entry that does not follow the registry's schema; the message names the key."""


@dataclass(frozen=True)
class Lever:
    id: str
    name: str
    fact: str
    status: str  # SOURCED / UNSOURCED / reasoned
    targets: tuple[str, ...]
    status_text: str = ""
    source: str = ""
    instead: str = ""
    imports: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    config: tuple[str, ...] = ()  # "key" or "key=value"
    packages: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    about: tuple[str, ...] = ()  # import names of the packages the lever is about
    note: str = ""  # why the refuting fact may be out of date
    builtin: bool = False

    def packages_about(self) -> set[str]:
        """The packages the lever is about (it never fires inside them): `about`, or the
        top-level modules whose import it detects."""
        if self.about:
            return set(self.about)
        return {name.split(".")[0] for name in self.imports}

    @property
    def sourced(self) -> bool:
        return bool(self.source.strip())

    def refuted_for(self, targets) -> list:
        """The configured targets (hardware.Target) this lever is refuted for."""
        if ANY_TARGET in self.targets:
            return list(targets)
        hits = []
        for target in targets:
            names = {target.arch.name, target.spelling.lower()}
            if target.gpu is not None:
                names |= {target.gpu.name.lower(), *(a.lower() for a in target.gpu.aliases)}
            if any(t.lower() in names or _same_gpu(t, target) for t in self.targets):
                hits.append(target)
        return hits

    def config_pairs(self) -> list[tuple[str, str | None]]:
        """("key", "value") pairs; value None means "any true value"."""
        out = []
        for item in self.config:
            key, eq, value = item.partition("=")
            out.append((key.strip().lower(), value.strip().lower() if eq else None))
        return out

    def status_sentence(self) -> str:
        """How the message states the fact's standing."""
        if self.status == "SOURCED":
            where = (
                f": {self.source}" if self.source and self.source not in self.status_text else ""
            )
            return f"{self.status_text or 'SOURCED'}{where}"
        if self.status == "UNSOURCED":
            stale = f" ({self.note})" if self.note else ""
            return (
                f"{self.status_text or 'UNSOURCED'}; the refuting fact is unsourced and may be "
                f"stale{stale}: check it before relying on it"
            )
        return self.status_text or "reasoned, not measured"

    def trigger_words(self) -> set[str]:
        """Substrings at least one of which any detection needs in the file's text."""
        words: set[str] = set()
        for module in self.imports:
            words.add(module.split(".")[0])
        for call in self.calls:
            words.add(call.rsplit(".", 1)[-1])
        for key, _ in self.config_pairs():
            words.add(key)
        for package in self.packages:
            words.add(package)
        return {w for w in words if w}


def _same_gpu(name: str, target) -> bool:
    if target.gpu is None:
        return False
    try:
        return table().gpu(name) is target.gpu
    except UnknownTargetError:
        return False


def check_entry(entry: Any, where: str) -> dict[str, Any]:
    """Validate one registry entry (a TOML table); raises LeverError naming the key."""
    if not isinstance(entry, dict):
        raise LeverError(f"{where}: expected a table")
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise LeverError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(sorted(KEYS))}")
    for key in ("name", "fact"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise LeverError(f"{where}: `{key}` is required (a non-empty string)")
    for key in _STRINGS:
        if key in entry and not isinstance(entry[key], str):
            raise LeverError(f"{where}.{key}: expected a string, got {type(entry[key]).__name__}")
        if len(entry.get(key, "")) > MAX_TEXT:
            raise LeverError(f"{where}.{key}: longer than {MAX_TEXT} characters")
    for key in _LISTS:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise LeverError(f"{where}.{key}: expected a list of non-empty strings")
        if len(value) > MAX_ITEMS or any(len(v) > MAX_TEXT for v in value):
            raise LeverError(f"{where}.{key}: over {MAX_ITEMS} items or {MAX_TEXT} characters")
    status = entry.get("status", "sourced" if entry.get("source") else "unsourced")
    if status.lower() not in STATUSES:
        raise LeverError(f"{where}.status: one of SOURCED, UNSOURCED, reasoned; got {status!r}")
    if STATUSES[status.lower()] == "SOURCED" and not entry.get("source", "").strip():
        pass  # a SOURCED claim with no source is what GPU902 reports; not a config error
    targets = entry.get("targets", [ANY_TARGET])
    for name in targets:
        if name.lower() == ANY_TARGET:
            continue
        try:
            table().target(name)
        except UnknownTargetError as e:
            raise LeverError(f"{where}.targets: {e}") from None
    return entry


def lever_from(entry: dict[str, Any], builtin: bool = False) -> Lever:
    status = entry.get("status", "sourced" if entry.get("source") else "unsourced")
    return Lever(
        id=entry.get("id") or entry["name"].lower().replace(" ", "-"),
        name=entry["name"],
        fact=" ".join(entry["fact"].split()),
        status=STATUSES[status.lower()],
        targets=tuple(
            t.lower() if t.lower() == ANY_TARGET else t for t in entry.get("targets", [ANY_TARGET])
        ),
        status_text=entry.get("status_text", ""),
        source=entry.get("source", ""),
        instead=entry.get("instead", ""),
        imports=tuple(entry.get("imports", ())),
        calls=tuple(entry.get("calls", ())),
        config=tuple(entry.get("config", ())),
        packages=tuple(entry.get("packages", ())),
        context=tuple(entry.get("context", ())),
        about=tuple(entry.get("about", ())),
        note=entry.get("note", ""),
        builtin=builtin,
    )


# gpulint's own folder, where data/ is installed beside the modules (what
# importlib.resources.files("gpulint") gives for an installed package, without importing it:
# the lever registry is read by a one-file check's hardware note)
_PACKAGE = Path(__file__).resolve().parent


@functools.cache
def builtin_levers() -> tuple[Lever, ...]:
    raw = tomllib.loads(_PACKAGE.joinpath("data/levers.toml").read_text("utf-8"))
    return tuple(
        lever_from(check_entry(e, f"data/levers.toml levers[{i}]"), builtin=True)
        for i, e in enumerate(raw.get("levers", []))
    )


PRESETS_DIR = "data/lever-presets"


def preset_names() -> list[str]:
    folder = _PACKAGE.joinpath(PRESETS_DIR)
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


@functools.cache
def preset_levers(name: str) -> tuple[Lever, ...]:
    """The levers of a named preset (raises LeverError for an unknown name)."""
    if name not in preset_names():
        raise LeverError(f"unknown lever preset {name!r}; known: {', '.join(preset_names())}")
    path = f"{PRESETS_DIR}/{name}.toml"
    raw = tomllib.loads(_PACKAGE.joinpath(path).read_text("utf-8"))
    return tuple(
        lever_from(check_entry(e, f"{path} levers[{i}]")) for i, e in enumerate(raw["levers"])
    )


def load_user_file(path: Path) -> list[dict[str, Any]]:
    """The validated `[[levers]]` entries of a levers.toml (raises LeverError)."""
    from gpulint.safeio import MAX_CONFIG_BYTES, Unreadable, read_text

    try:
        raw = tomllib.loads(read_text(path, MAX_CONFIG_BYTES, [path.parent]))
    except Unreadable as e:
        raise LeverError(f"{path}: cannot read: {e}") from None
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise LeverError(f"{path}: not valid TOML: {e or 'nested too deeply'}") from None
    entries = raw.get("levers", [])
    if not isinstance(entries, list):
        raise LeverError(f"{path}: `levers` must be an array of tables ([[levers]])")
    return [check_entry(e, f"{path} levers[{i}]") for i, e in enumerate(entries)]


def registry(settings=None) -> tuple[Lever, ...]:
    """Built-in levers, then the opted-in presets (`lever-presets`), then the user's
    (`[[tool.gpulint.levers]]` and levers.toml, merged by the config loader into the `levers`
    option). A later entry with an earlier one's id replaces it."""
    user = settings.options.get("levers", []) if settings is not None else []
    presets = settings.options.get("lever-presets", []) if settings is not None else []
    return _merged(tuple(presets), tuple(_freeze(e) for e in user))


@functools.cache
def _merged(presets: tuple, user: tuple) -> tuple[Lever, ...]:
    levers = {lever.id: lever for lever in builtin_levers()}
    for name in presets:
        levers.update((lever.id, lever) for lever in preset_levers(name))
    for frozen in user:
        lever = lever_from(_thaw(frozen))
        levers[lever.id] = lever
    return tuple(levers.values())


def _freeze(entry: dict[str, Any]) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in entry.items()))


def _thaw(frozen: tuple) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in frozen}


def table_markdown(levers=None) -> str:
    """A registry as a table (the built-in one by default; for `gpulint rule GPU901`)."""
    rows = ["| Lever | Refuted for | Refuting fact | Status |", "|---|---|---|---|"]
    for lever in builtin_levers() if levers is None else levers:
        targets = ", ".join(lever.targets)
        status = lever.status_text or lever.status
        if lever.source and lever.source not in status:
            status += f" ({', '.join(f'<{u.strip()}>' for u in lever.source.split(';'))})"
        rows.append(f"| {lever.name} | {targets} | {lever.fact} | {status} |")
    return "\n".join(rows)
