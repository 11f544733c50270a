"""Which files a run checks: recursion, `.gitignore`, configured excludes, language by extension.

Git's ignore rules apply as git applies them: every `.gitignore` from the repository's top
folder down to the file, and `.git/info/exclude`, whichever folder the walk starts in. Each
folder's `exclude` comes from its own configuration (the nearest `pyproject.toml` with
`[tool.gpulint]`), so a monorepo's packages keep their own settings in one run."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gpulint.config import Config
from gpulint.pathutil import below, repository_root
from gpulint.safeio import MAX_CONFIG_BYTES, Unreadable, read_text

if TYPE_CHECKING:
    import pathspec


def _spec(lines: list[str]) -> pathspec.PathSpec:
    """Git's ignore rules over `lines` (pathspec is imported when a pattern is first needed:
    checking a file named on the command line matches none, and plain name patterns, as the
    default excludes are, need none: `_NamePatterns`)."""
    names = _NamePatterns.over(lines)
    if names is not None:
        return names  # type: ignore[return-value]
    import pathspec

    # a _OneRegex answers match_file as the PathSpec does (all that callers ask of it)
    return _OneRegex.over(pathspec.GitIgnoreSpec.from_lines(lines))  # type: ignore[return-value]


# A pattern of letters, digits, `.`, `_`, `+`, `-`, `*` and `?` (not `**`), with an optional
# trailing slash (folders only): git matches it against each component of a path.
_NAME_PATTERN = re.compile(r"(?!.*\*\*)[A-Za-z0-9._+*?-]+/?")


class _NamePatterns:
    """`match_file` of a spec whose every pattern is a plain name (`_NAME_PATTERN`), as
    pathspec's GitIgnoreSpec answers it, without importing pathspec (a third of a warm run's
    imports): a name matches a path component, anywhere; with a trailing slash, a folder's
    (a path below it, or the folder named with its slash). tests/test_files_walk.py holds it to
    pathspec's answers."""

    def __init__(
        self, names: frozenset[str], folders: frozenset[str], wild: re.Pattern[str] | None
    ) -> None:
        # The literal patterns, any entry's and folders' only, and the wildcard ones as one
        # anchored match of a component (a folder's with its slash).
        self.names, self.folders, self.wild = names, folders, wild

    @classmethod
    def over(cls, lines: list[str]) -> _NamePatterns | None:
        names: set[str] = set()
        folders: set[str] = set()
        wild: list[str] = []
        for line in lines:
            if not line or line.startswith("#"):
                continue
            if not _NAME_PATTERN.fullmatch(line):
                return None
            name, slash = (line[:-1], True) if line.endswith("/") else (line, False)
            if not name.strip("*?"):
                return None  # all wildcards (`*`): pathspec 0.10 answers it unlike git, so ask it
            body = "".join(
                "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in name
            )
            if "*" in name or "?" in name:
                wild.append(f"{body}/" if slash else f"{body}/?")
            else:
                (folders if slash else names).add(name)
        if not (names or folders or wild):
            return None
        one = re.compile("|".join(f"(?:{w})" for w in wild)) if wild else None
        return cls(frozenset(names), frozenset(folders), one)

    def match_file(self, file: str) -> bool:  # a relative path, as pathspec's match_file
        file = file.replace(os.sep, "/")
        if file.startswith("/"):
            file = file[1:]
        elif file.startswith("./"):
            file = file[2:]
        if not file:
            return False
        # A plain name pattern matches a path where it matches one of its components (every
        # component but the last is a folder; the last is one when the path ends with a slash).
        trailing = file.endswith("/")
        parts = (file[:-1] if trailing else file).split("/")
        last = len(parts) - 1
        for i, name in enumerate(parts):
            folder = i < last or trailing
            if name in self.names or (folder and name in self.folders):
                return True
            if self.wild is not None and self.wild.fullmatch(name + "/" if folder else name):
                return True
        return False


class _OneRegex:
    """`spec.match_file` as one regular-expression search, where that is the same answer: a
    spec with no negated pattern matches a path exactly when one of its patterns does (the
    default excludes are 26 such patterns; pathspec tries each in turn, for every entry of
    the walk). A spec with a negation, or patterns of mixed flags, is asked as it is."""

    def __init__(self, spec: pathspec.PathSpec, regex: re.Pattern[str]) -> None:
        from pathspec.util import normalize_file

        self.spec = spec
        self.regex = regex
        self._normalize = normalize_file

    @classmethod
    def over(cls, spec: pathspec.PathSpec):
        active = [p for p in spec.patterns if getattr(p, "include", None) is not None]
        regexes = [getattr(p, "regex", None) for p in active]
        patterns = [r for r in regexes if isinstance(r, re.Pattern) and isinstance(r.pattern, str)]
        if (
            not active
            or any(p.include is not True for p in active)
            or len(patterns) != len(regexes)
            or len({r.flags for r in patterns}) != 1
        ):
            return spec
        # The directory mark is a named group in each pattern; only matching matters here.
        parts = [r.pattern.replace("(?P<ps_d>", "(?:") for r in patterns]
        if any("(?P<" in p or "(?P=" in p for p in parts):
            return spec
        try:
            regex = re.compile("|".join(f"(?:{p})" for p in parts), patterns[0].flags)
        except re.error:
            return spec
        return cls(spec, regex)

    def match_file(self, file: str) -> bool:  # a relative path, as pathspec's match_file
        return self.regex.search(self._normalize(file)) is not None


def _gitignore_specs(
    directory: Path, roots: list[Path], problems: list[tuple[str, str]]
) -> pathspec.PathSpec | None:
    """The folder's `.gitignore`, read as git reads it: a line git would reject is skipped
    (reported once as that file's GPU000); the other lines still apply."""
    path = directory / ".gitignore"
    if not os.path.lexists(path):
        return None
    try:
        lines = read_text(path, MAX_CONFIG_BYTES, roots, errors="replace").splitlines()
    except Unreadable as e:
        problems.append((str(path), f".gitignore: {e}"))
        return None
    try:
        return _spec(lines)
    except Exception:  # pathspec rejects a line git ignores (`bin\\`, `!`): keep the rest
        pass
    good, bad = [], []
    for number, line in enumerate(lines, 1):
        try:
            _spec([line])
        except Exception:
            bad.append(number)
        else:
            good.append(line)
    shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
    problems.append((str(path), f".gitignore: invalid pattern on line {shown}; line skipped"))
    return _spec(good)


def _git_dir(repo: Path) -> Path:
    """The repository's git directory; for a worktree (`.git` is a file naming it), the shared
    one, where `info/exclude` lives."""
    dot_git = repo / ".git"
    if dot_git.is_dir():
        return dot_git
    try:  # a repository's file: a FIFO or a link to /dev/zero named .git must not hang us
        line = read_text(dot_git, 4096, errors="replace").strip()
    except Unreadable:
        return dot_git
    if not line.startswith("gitdir:"):
        return dot_git
    git_dir = Path(os.path.realpath(repo / line.removeprefix("gitdir:").strip()))
    try:
        common = read_text(git_dir / "commondir", 4096, errors="replace").strip()
    except Unreadable:
        return git_dir
    return Path(os.path.realpath(git_dir / common))


def _lines_spec(lines: list[str]) -> pathspec.PathSpec | None:
    try:
        return _spec(lines)
    except Exception:  # a line pathspec rejects: keep the others
        good = []
        for line in lines:
            try:
                _spec([line])
            except Exception:
                continue
            good.append(line)
        return _spec(good)


class FileFinder:
    def __init__(
        self,
        config: Config,
        extensions: set[str],
        respect_gitignore: bool = True,
        force_exclude: bool = False,
        config_for: Callable[[Path], Config] | None = None,
    ):
        self.config = config
        # The configuration of the folder a path is in (default: `config` everywhere).
        self.config_for = config_for
        self._exclude_specs: dict[int, pathspec.PathSpec] = {}
        # id(exclude spec) -> {entry name (with a slash for a folder) -> whether it matches},
        # for a spec that matches a path exactly when it matches one of its components (see
        # `_component_wise`); None for any other spec
        self._by_name: dict[int, dict[str, bool] | None] = {}
        # Apply `exclude` to files named on the command line too (pre-commit names every file).
        self.force_exclude = force_exclude
        self.extensions = extensions
        self.respect_gitignore = respect_gitignore
        self._suffixes = tuple(extensions)
        self.problems: list[tuple[str, str]] = []  # (path, why) for paths that cannot be walked
        # (folder, why) for folders left alone as copies of other projects (gpulint.vendored)
        self.vendored: list[tuple[str, str]] = []
        self.named: set[str] = set()  # files named, not walked to (absolute paths)
        self.roots: list[Path] = [config.root, Path.cwd()]  # where a .gitignore link may lead

    @functools.cached_property
    def exclude(self) -> pathspec.PathSpec:
        spec = _spec(self.config.exclude)
        self._by_name[id(spec)] = {} if _component_wise(self.config.exclude) else None
        return spec

    def _excluded(self, path: Path, is_dir: bool) -> bool:
        config, exclude = self._exclude_for(Path(os.path.abspath(path)).parent)
        try:
            rel = path.resolve().relative_to(config.root).as_posix()
        except (ValueError, OSError, RuntimeError):  # outside the root, or a link loop
            rel = path.name
        if is_dir:
            rel += "/"
        return exclude.match_file(rel) or exclude.match_file(path.name + ("/" if is_dir else ""))

    def _inherited_specs(self, top: Path) -> tuple[tuple[Path, pathspec.PathSpec], ...]:
        """The ignore rules that apply to `top` from above it: `.git/info/exclude` and the
        `.gitignore` of each folder from the repository's top down to `top`'s parent."""
        top = Path(os.path.abspath(top))
        repo = repository_root(top)
        if repo is None:
            return ()
        specs = []
        roots = [*self.roots, repo]
        exclude = _git_dir(repo) / "info" / "exclude"
        if exclude.is_file():
            try:
                lines = read_text(exclude, MAX_CONFIG_BYTES, roots, errors="replace").splitlines()
            except Unreadable:
                lines = []
            spec = _lines_spec(lines)
            if spec is not None:
                specs.append((repo, spec))
        above = [d for d in (top.parent, *top.parent.parents) if d == repo or repo in d.parents]
        for directory in reversed(above) if top != repo else ():
            spec = _gitignore_specs(directory, roots, self.problems)
            if spec is not None:
                specs.append((directory, spec))
        return tuple(specs)

    def find(self, paths: list[Path]) -> Iterator[Path]:
        seen: set[str] = set()
        for given in paths:
            if not given.exists() and not given.is_symlink():
                self.problems.append((str(given), "no such file or directory"))
                continue
            if given.is_file() or (given.is_symlink() and not given.is_dir()):
                # Named explicitly: checked even if excluded, as flake8 and ruff do, unless
                # --force-exclude asks otherwise.
                if self.force_exclude and self._excluded(given, False):
                    continue
                key = _key(given)
                if key not in seen:
                    seen.add(key)
                    self.named.add(os.path.abspath(given))
                    yield given
                continue
            self.roots.append(given)
            yield from self._walk(given, seen)

    def _walk(self, top: Path, seen: set[str]) -> Iterator[Path]:
        # Each stack entry carries the gitignore specs of the directories above it.
        inherited = self._inherited_specs(top) if self.respect_gitignore else ()
        # (folder, specs, its real path when known: a folder reached by an entry that is not
        # a link is its parent's real path plus its name)
        stack: list[tuple[Path, tuple[tuple[Path, pathspec.PathSpec], ...], str | None]] = [
            (top, inherited, None)
        ]
        visited_dirs: set[tuple[int, int]] = set()
        while stack:
            directory, specs, real = stack.pop()
            try:
                st = directory.stat()
            except OSError as e:
                self.problems.append((str(directory), f"cannot read directory: {e.strerror}"))
                continue
            if (st.st_dev, st.st_ino) in visited_dirs:
                continue  # a symlink loop, or the same tree twice
            visited_dirs.add((st.st_dev, st.st_ino))
            if self.respect_gitignore:
                spec = _gitignore_specs(directory, self.roots, self.problems)
                if spec is not None:
                    specs = (*specs, (Path(os.path.abspath(directory)), spec))
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError as e:
                self.problems.append((str(directory), f"cannot read directory: {e.strerror}"))
                continue
            # What every entry of this folder shares is worked out once per folder, not once
            # per entry (a warm run is mostly this walk): its configuration and exclude spec,
            # its real path (an entry that is not a link resolves to it plus the entry's name)
            # and its path below each gitignore's folder.
            place = _Folder(self, directory, specs, real)
            if directory != top and place.config.skip_vendored:
                why = copied_package(directory, entries, place.config)
                if why is not None:
                    self.vendored.append((str(directory), why))
                    continue
            subdirs = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                try:
                    link = entry.is_symlink()
                except OSError:
                    link = True  # the careful way
                if place.excluded(entry.name, entry.path, is_dir, link):
                    continue
                if is_dir and link and not self._inside_roots(Path(entry.path)):
                    # A committed `sys -> /` must not walk the machine.
                    self.problems.append(
                        (entry.path, "symbolic link to a folder outside the project; not followed")
                    )
                    continue
                # (`directory / name` is `Path(entry.path)`, without parsing the folder again)
                if is_dir:
                    real = None if link else os.path.join(place.real, entry.name)
                    subdirs.append((directory / entry.name, real))
                elif entry.name.lower().endswith(self._suffixes):
                    key = place.key(entry.name, entry.path, link)
                    if key not in seen:
                        seen.add(key)
                        yield directory / entry.name
            stack.extend((d, specs, r) for d, r in reversed(subdirs))

    def _inside_roots(self, path: Path) -> bool:
        real = os.path.realpath(path)
        for root in self.roots:
            top = os.path.realpath(root)
            if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
                return True
        return False

    def _gitignored(self, path: Path, is_dir: bool, specs) -> bool:
        if not specs:
            return False
        absolute = Path(os.path.abspath(path))
        for base, spec in specs:
            rel = absolute.relative_to(base).as_posix() + ("/" if is_dir else "")
            if spec.match_file(rel):
                return True
        return False

    def _wanted(self, path: Path) -> bool:
        return path.name.lower().endswith(self._suffixes)

    def _exclude_for(self, directory: Path) -> tuple[Config, pathspec.PathSpec]:
        """The configuration of the files in `directory` and its compiled `exclude`."""
        if self.config_for is None:
            return self.config, self.exclude
        config = self.config_for(Path(os.path.abspath(directory)))
        exclude = self._exclude_specs.get(id(config))
        if exclude is None:
            exclude = self._exclude_specs[id(config)] = _spec(config.exclude)
            self._by_name[id(exclude)] = {} if _component_wise(config.exclude) else None
        return config, exclude


def copied_package(directory: Path, entries: list[os.DirEntry], config: Config) -> str | None:
    """Why `directory` is a copy of another project (`vendored.package_copy`); the cheap part
    first: only a folder holding a licence file or a `.git` is read further, and a `.git`
    counts only inside another repository (a submodule, not a checkout the run starts in)."""
    names = [e.name for e in entries]
    if not any(
        n.lower().startswith(("license", "licence", "copying")) or n == ".git" for n in names
    ):
        return None
    if ".git" in names and repository_root(directory.parent) is None:
        names = [n for n in names if n != ".git"]
    from gpulint.vendored import identity, package_copy

    return package_copy(str(directory), names, identity(str(config.root)))


def _component_wise(lines: list[str]) -> bool:
    """Whether every pattern is a plain name pattern (no slash but a trailing one, no `**`, no
    negation, no escape): git matches such a pattern against each component of a path, so a
    path matches exactly when its folder does or its last component does."""
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("!") or "\\" in line or "**" in line or "/" in line.rstrip("/"):
            return False
    return True


class _Folder:
    """One folder of the walk: `FileFinder._excluded`, `_gitignored` and `_key` for its entries,
    with the per-folder part computed once. An entry that is a symbolic link takes the general
    (per-path) way; any other entry's real path is the folder's real path plus its name, which
    is what `Path.resolve` would say, without its lstat of every component."""

    def __init__(self, finder: FileFinder, directory: Path, specs, real: str | None = None) -> None:
        self.finder = finder
        self.directory = directory
        self.config, self.exclude = finder._exclude_for(directory)
        self.real = real if real is not None else os.path.realpath(directory)
        self.rel = below(self.real, str(self.config.root))  # None: outside the root
        # A component-wise spec (`_component_wise`): an entry is excluded when this folder is
        # (a folder the walk starts in may be) or its own name is, asked once per name.
        self.by_name = finder._by_name.get(id(self.exclude))
        self.within = (
            self.by_name is not None
            and self.rel not in (None, ".")
            and self.exclude.match_file(self.rel + "/")
        )
        absolute = os.path.abspath(directory)
        self.specs = []
        for base, spec in specs:
            rel = below(absolute, str(base))
            if rel is None:  # pragma: no cover - a base is always at or above its folders
                rel = Path(absolute).relative_to(base).as_posix()
            self.specs.append(("" if rel == "." else rel + "/", spec))

    def excluded(self, name: str, path: str, is_dir: bool, link: bool) -> bool:
        slash = "/" if is_dir else ""
        if link:  # resolves elsewhere: the general way
            if self.finder._excluded(Path(path), is_dir):
                return True
        elif self.by_name is not None:
            if self.within:
                return True
            hit = self.by_name.get(name + slash)
            if hit is None:
                hit = self.by_name[name + slash] = self.exclude.match_file(name + slash)
            if hit:
                return True
        else:
            rel = name if self.rel is None or self.rel == "." else f"{self.rel}/{name}"
            if self.exclude.match_file(rel + slash) or self.exclude.match_file(name + slash):
                return True
        # gitignore matches the path as named (abspath, links not resolved), as `_gitignored`
        return any(spec.match_file(prefix + name + slash) for prefix, spec in self.specs)

    def key(self, name: str, path: str, link: bool) -> str:
        if link:
            return _key(Path(path))
        return os.path.join(self.real, name)


def _key(path: Path) -> str:
    """One key per file, whatever links lead to it (a dangling link or a loop: its own path)."""
    try:
        return str(path.resolve(strict=True))
    except (OSError, RuntimeError):
        return str(path)
