"""`[tool.gpulint]` configuration: found, validated, merged with command-line flags.

Every key is checked here, once, with a message that names the key; a bad configuration is a
`ConfigError` (exit code 2), never a traceback.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gpulint.hardware import Target, UnknownTargetError, resolve_targets
from gpulint.source import VENDORED_DIRS


class ConfigError(Exception):
    """A configuration problem; the message names the offending key."""


_CODE_OR_PREFIX = re.compile(r"^GPU\d{0,3}$")


def _str_list(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.gpulint] {key}: expected a list of strings, got {_short(value)}")
    return list(value)


def _short(value: Any) -> str:
    """A value as the message quotes it: a repository's deep array is not printed whole."""
    text = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
    return text if len(text) <= 80 else text[:77] + "..."


# Tier selectors: a name in `select`/`extend-select` that selects every rule of that tier, as
# clippy's `clippy::pedantic` group. Preview is a mode (`preview = true`), as in ruff, not a group.
TIER_SELECTORS = ("PEDANTIC",)
# Tiers whose rules run as default-tier ones (comma-separated, e.g. "pedantic"): a CI job or an
# editor session turns on the full review without editing the project's files, and an explicit
# `--select GPU501` still means that rule alone.
DEFAULT_TIERS_ENV = "GPULINT_DEFAULT_TIERS"


def env_default_tiers() -> tuple[str, ...]:
    """The tiers named in $GPULINT_DEFAULT_TIERS; unknown words are ignored, not fatal (the
    variable may be set for a newer gpulint)."""
    words = os.environ.get(DEFAULT_TIERS_ENV, "").split(",")
    return tuple(w.strip().lower() for w in words if w.strip().upper() in TIER_SELECTORS)


def _codes(key: str, value: Any, selectors: bool = False) -> list[str]:
    codes = [c.strip().upper() for c in _str_list(key, value)]
    from gpulint.registry import registry

    known = {r.code for r in registry().rules} | {"GPU000", "GPU001"}
    for c in codes:
        if c == "ALL" or (selectors and c in TIER_SELECTORS):
            continue
        if c in TIER_SELECTORS:
            raise ConfigError(
                f"[tool.gpulint] {key}: {c.lower()!r} selects a tier; it goes in select or "
                f"extend-select (rules of that tier are off unless selected)"
            )
        if not _CODE_OR_PREFIX.match(c) or not any(k.startswith(c) for k in known):
            raise ConfigError(
                f"[tool.gpulint] {key}: unknown rule code or prefix {c!r} "
                f"(codes look like GPU101; prefixes like GPU1)"
            )
    return codes


def _selection(key: str, value: Any) -> list[str]:
    """`select`/`extend-select`: codes, prefixes, ALL, and the tier selector `pedantic`."""
    return _codes(key, value, selectors=True)


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"[tool.gpulint] {key}: expected true or false, got {_short(value)}")
    return value


def _per_file_ignores(key: str, value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.gpulint] {key}: expected a table of glob = [codes]")
    return {str(glob): _codes(f"{key}.{glob!r}", codes) for glob, codes in value.items()}


def _targets(key: str, value: Any) -> list[str]:
    names = _str_list(key, value)
    try:
        resolve_targets(names)
    except UnknownTargetError as e:
        raise ConfigError(f"[tool.gpulint] {key}: {e}") from None
    return names


def _torch_version(key: str, value: Any) -> str:
    from gpulint.torchversion import range_of

    if not isinstance(value, str) or range_of(value, "") is None:
        raise ConfigError(
            f'[tool.gpulint] {key} must be a version specifier such as ">=2.1" or '
            f'"==2.0.0", not {_short(value)}'
        )
    return value


def _positive_int(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"[tool.gpulint] {key}: expected a non-negative integer, got {value!r}")
    return value


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"[tool.gpulint] {key}: expected a string, got {value!r}")
    if "\x00" in value:
        raise ConfigError(f"[tool.gpulint] {key}: a NUL character in a path")
    return value


def _inside_path(key: str, value: Any) -> str:
    """A path the repository names for gpulint to read or write: relative, and inside the
    project (a stranger's pyproject.toml must not point gpulint at the rest of the machine;
    the command line may, since the user typed it)."""
    value = _string(key, value)
    path = PurePosixPath(value.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or value.startswith("~"):
        raise ConfigError(
            f"[tool.gpulint] {key}: {value!r} must be a relative path inside the project"
        )
    return value


def _inside_paths(key: str, value: Any) -> list[str]:
    return [_inside_path(key, v) for v in _str_list(key, value)]


def _cuda(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.gpulint] {key}: expected a table")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "check-macros":
            out[k] = _str_list(f"{key}.{k}", v)
        else:
            raise ConfigError(f"[tool.gpulint.cuda] unknown key {k!r}; known: check-macros")
    return out


def _claims(key: str, value: Any) -> dict[str, Any]:
    """`[tool.gpulint.claims]`: which documents GPU910-912 judge beyond the default (README,
    docs/, benchmark and results pages)."""
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.gpulint] {key}: expected a table")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "include":
            out[k] = _str_list(f"claims.{k}", v)
        elif k == "docstrings":
            if not isinstance(v, bool):
                raise ConfigError(
                    f"[tool.gpulint.claims] docstrings: expected true or false, got {v!r}"
                )
            out[k] = v
        else:
            raise ConfigError(
                f"[tool.gpulint.claims] unknown key {k!r}; known: docstrings, include"
            )
    return out


def _levers(key: str, value: Any) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"[[tool.gpulint.{key}]]: expected an array of tables")
    from gpulint.levers import LeverError, check_entry

    try:
        return [check_entry(v, f"[[tool.gpulint.{key}]] #{i + 1}") for i, v in enumerate(value)]
    except LeverError as e:
        raise ConfigError(str(e)) from None


def _lever_presets(key: str, value: Any) -> list[str]:
    from gpulint.levers import preset_names

    names = _str_list(key, value)
    for name in names:
        if name not in preset_names():
            raise ConfigError(
                f"[tool.gpulint] {key}: unknown lever preset {name!r}; known: {', '.join(preset_names())}"
            )
    return names


def _user_levers_file(config: Config) -> None:
    """A `levers.toml` beside the configuration adds to the lever registry (GPU901/GPU902)."""
    from gpulint.levers import USER_FILE, LeverError, load_user_file

    path = config.root / USER_FILE
    if not os.path.lexists(path):
        return
    try:
        entries = load_user_file(path)
    except LeverError as e:
        # A data file of the repository, not the configuration: reported once as its GPU000
        # and left out, so a stranger's levers.toml cannot stop the run.
        config.problems.append((str(path), f"lever registry not used: {e}"))
        return
    config.options["levers"] = [*config.options.get("levers", []), *entries]


# key -> validator; the one list of what [tool.gpulint] accepts.
_KEYS = {
    "select": _selection,
    "ignore": _codes,
    "extend-select": _selection,
    "preview": _bool,
    "skip-vendored": _bool,
    "extend-ignore": _codes,
    "per-file-ignores": _per_file_ignores,
    "exclude": _str_list,
    "extend-exclude": _str_list,
    "targets": _targets,
    "torch-version": _torch_version,
    "cache-dir": _inside_path,
    "jobs": _positive_int,
    "evidence": _inside_paths,
    "cuda": _cuda,
    "claims": _claims,
    "levers": _levers,
    "lever-presets": _lever_presets,
}

DEFAULT_EXCLUDE = [
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".gpulint_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "*.egg-info",
    # vendored copies of other projects (folders only): someone else's code
    *(f"{name}/" for name in VENDORED_DIRS),
]


@dataclass
class Config:
    root: Path
    source: Path | None = None  # the pyproject.toml it came from
    select: list[str] = field(default_factory=lambda: ["ALL"])
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    preview: bool = False  # preview-tier rules run where a pattern selects them (ruff's preview)
    skip_vendored: bool = True  # leave copies of other projects alone (gpulint.vendored)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    targets: list[str] = field(default_factory=list)
    # the torch releases the project runs on (`>=2.1`, `==2.0.0`); "" = read its dependency files
    torch_version: str = ""
    cache_dir: str = ".gpulint_cache"
    jobs: int = 0  # 0: one per core
    evidence: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # per-language tables (cuda, levers)
    # (path, why) of files beside the configuration that were left out (a bad levers.toml)
    problems: list[tuple[str, str]] = field(default_factory=list, compare=False)

    # -- selection ---------------------------------------------------------------------------
    def is_enabled(self, code: str, tier: str = "default") -> bool:
        """Whether the rule `code` of `tier` runs. The most specific matching pattern of
        select/extend-select wins over ignore; on a tie, ignore wins (as in ruff). `ALL` (and
        the `pedantic` selector for that tier's rules) count as the least specific pattern.
        Then the tier: a default rule runs when selected at all; a pedantic one only when
        selected by a family prefix or its code (longer than `GPU`), or by `pedantic`; a
        preview one only when selected by its code, or, in preview mode, by any pattern."""

        def specificity(patterns: list[str]) -> int:
            best = -1
            for p in patterns:
                if p == "ALL" or (p in TIER_SELECTORS and p.lower() == tier):
                    best = max(best, 0)
                elif code.startswith(p):
                    best = max(best, len(p))
            return best

        selected = max(specificity(self.select), specificity(self.extend_select))
        if selected < 0 or specificity(self.ignore) >= selected:
            return False
        if tier in env_default_tiers():
            return True
        if tier == "pedantic":
            return selected > len("GPU") or "PEDANTIC" in (*self.select, *self.extend_select)
        if tier == "preview":
            return self.preview or selected == len(code)
        return True

    def ignored_for(self, relpath: str) -> list[str]:
        """The codes `per-file-ignores` turns off for a file (`relpath`: below the project
        root), matched as ruff matches them: a pattern is a globset glob anchored at the
        project root (`*` crosses `/`, `**`, `?`, `[...]`, `{a,b}`), or matches the file's
        name alone (`conftest.py`, `test_*.py`); a leading `!` turns it off everywhere the
        pattern does not match."""
        out: list[str] = []
        name = relpath.rsplit("/", 1)[-1]
        for glob, codes in self.per_file_ignores.items():
            negated = glob.startswith("!")
            regex = globset_regex(glob[1:] if negated else glob)
            matched = regex.fullmatch(relpath) is not None or regex.fullmatch(name) is not None
            if matched != negated:
                out.extend(codes)
        return out

    def resolved_targets(self) -> list[Target]:
        return resolve_targets(self.targets)

    def fingerprint(self) -> str:
        """A hash of everything that can change findings: the cache key's config part."""
        state = {
            "select": self.select,
            "ignore": self.ignore,
            "extend_select": self.extend_select,
            "default_tiers": env_default_tiers(),
            "preview": self.preview,
            "skip_vendored": self.skip_vendored,
            "per_file_ignores": self.per_file_ignores,
            "targets": self.targets,
            "torch_version": self.torch_version,
            "evidence": self.evidence,
            "options": self.options,
        }
        return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()


@functools.lru_cache(maxsize=1024)
def globset_regex(glob: str) -> re.Pattern[str]:
    """A glob in the dialect of Rust's globset with its defaults, which ruff's settings use:
    `*` and `?` match any character, `/` included (literal_separator off); `**` any run of
    folders (`**/x` also matches `x`, `a/**` everything below `a`); `[abc]`, `[!a-z]` (or
    `[^a-z]`) a class; `{a,b}` alternatives; `\\` escapes the next character."""
    out: list[str] = []
    i, n, depth = 0, len(glob), 0
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")
            i += 3
            continue
        if c == "*":
            while i < n and glob[i] == "*":
                i += 1
            out.append(".*")
            continue
        if c == "?":
            out.append(".")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    out.append(")" * depth)
    try:
        return re.compile("".join(out), re.S)
    except re.error:
        return re.compile(re.escape(glob))


def read_toml(path: Path) -> dict[str, Any]:
    """A configuration file a repository controls: a capped read of a regular file, parsed;
    every way that fails is a ConfigError (exit 2), never a traceback."""
    import tomllib  # 10 ms at start-up; a one-file check with no config never needs it

    from gpulint.safeio import MAX_CONFIG_BYTES, Unreadable, read_text

    try:
        return tomllib.loads(read_text(path, MAX_CONFIG_BYTES, [path.parent]))
    except Unreadable as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e or 'nested too deeply'}") from None


def _tool_table(data: dict[str, Any]) -> dict[str, Any]:
    tool = data.get("tool", {})
    return tool if isinstance(tool, dict) else {}


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for directory in [start, *start.parents] if start.is_dir() else start.parents:
        candidate = directory / "pyproject.toml"
        if os.path.lexists(candidate) and not candidate.is_dir():
            if "gpulint" in _tool_table(read_toml(candidate)):
                return candidate
    return None


def load_config(start: Path, explicit: Path | None = None) -> Config:
    """The configuration for a run started at `start` (a path being checked, or the cwd)."""
    path = explicit or find_pyproject(start)
    if path is None:
        return Config(root=Path.cwd().resolve())
    data = read_toml(path)
    table = _tool_table(data).get("gpulint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.gpulint] must be a table")
    config = Config(root=path.parent.resolve(), source=path)
    apply_table(config, table)
    _user_levers_file(config)
    return config


class ConfigResolver:
    """The configuration of each folder: the nearest `pyproject.toml` with `[tool.gpulint]` at
    or above it, as ruff finds its configuration, so one run over a monorepo gives each package
    its own settings whatever order the paths come in. One Config per configuration file;
    `adjust` applies the command line's overrides to each. With `explicit`, every folder gets
    that one file."""

    def __init__(self, explicit: Path | None = None, adjust=None):
        self.explicit = explicit
        self.adjust = adjust
        self._source: dict[str, Path | None] = {}  # folder -> its configuration file
        self._configs: dict[Path | None, Config] = {}
        self._by_folder: dict[str, Config] = {}
        # The run's own configuration must be right (a ConfigError, exit 2). Once it is loaded
        # (`strict` off), a broken pyproject.toml deeper in a checked tree is a stranger's file:
        # reported as its GPU000 (`problems`), and its folder takes the configuration above it.
        self.strict = True
        self.problems: list[tuple[str, str]] = []
        self.isolated = False  # `--isolated`: no configuration file at all

    def _broken(self, path: Path, error: ConfigError) -> None:
        if self.strict:
            raise error
        self.problems.append((str(path), f"configuration not used: {error}"))

    def source_for(self, directory: Path | str) -> Path | None:
        if self.isolated:
            return None
        if self.explicit is not None:
            return self.explicit
        # Walked up with strings, stopping at the first folder already known: a run asks once
        # per folder of the tree, and each answer fills in the folders on the way up.
        d = os.path.abspath(directory)
        chain = []
        found: Path | None = None
        while True:
            if d in self._source:
                found = self._source[d]
                break
            chain.append(d)
            candidate = os.path.join(d, "pyproject.toml")
            if os.path.lexists(candidate) and not os.path.isdir(candidate):
                try:
                    data = read_toml(Path(candidate))
                except ConfigError as e:
                    self._broken(Path(candidate), e)
                    data = {}
                if "gpulint" in _tool_table(data):
                    found = Path(candidate)
                    break
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        for d in chain:
            self._source[d] = found
        return found

    def __call__(self, directory: Path | str) -> Config:
        key = os.path.abspath(directory)
        config = self._by_folder.get(key)
        if config is None:
            config = self._by_folder[key] = self._resolve(key)
        return config

    def _resolve(self, directory: str) -> Config:
        source = self.source_for(directory)
        config = self._configs.get(source)
        if config is None:
            try:
                config = (
                    load_config(Path.cwd(), source) if source else Config(root=Path.cwd().resolve())
                )
            except ConfigError as e:
                assert source is not None  # the defaults cannot fail
                self._broken(source, e)
                config = self._configs[source] = self(source.parent.parent)
                return config
            if self.adjust is not None:
                self.adjust(config)
            self._configs[source] = config
        return config

    def for_path(self, path: Path) -> Config:
        path = Path(os.path.abspath(path))
        return self(path if path.is_dir() else path.parent)

    def for_file(self, path: Path | str) -> Config:
        """`for_path` of a path known not to be a folder (a file the walk found): no stat."""
        folder = os.path.dirname(os.path.abspath(path))
        config = self._by_folder.get(folder)
        return config if config is not None else self(folder)


# key -> (Config field, whether the value extends the field rather than replacing it)
_FIELDS = {
    "select": ("select", False),
    "ignore": ("ignore", False),
    "extend-select": ("extend_select", False),
    "preview": ("preview", False),
    "skip-vendored": ("skip_vendored", False),
    "extend-ignore": ("ignore", True),
    "per-file-ignores": ("per_file_ignores", False),
    "exclude": ("exclude", False),
    "extend-exclude": ("exclude", True),
    "targets": ("targets", False),
    "torch-version": ("torch_version", False),
    "cache-dir": ("cache_dir", False),
    "jobs": ("jobs", False),
    "evidence": ("evidence", False),
}


def apply_table(config: Config, table: dict[str, Any]) -> None:
    for key, value in table.items():
        validator = _KEYS.get(key)
        if validator is None:
            raise ConfigError(
                f"[tool.gpulint] unknown key {key!r}; known keys: {', '.join(sorted(_KEYS))}"
            )
        checked = validator(key, value)
        attr, extends = _FIELDS.get(key, (None, False))
        if attr is None:
            config.options[key] = checked  # per-language tables: cuda, levers
        elif extends:
            setattr(config, attr, getattr(config, attr) + checked)
        else:
            setattr(config, attr, checked)
