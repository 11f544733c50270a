"""Which files a run checks: recursion, `.gitignore`, configured excludes, language by extension."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pathspec

from gpulint.config import Config


def _gitignore_specs(directory: Path) -> pathspec.PathSpec | None:
    path = directory / ".gitignore"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


class FileFinder:
    def __init__(
        self,
        config: Config,
        extensions: set[str],
        respect_gitignore: bool = True,
        force_exclude: bool = False,
    ):
        self.config = config
        # Apply `exclude` to files named on the command line too (pre-commit names every file).
        self.force_exclude = force_exclude
        self.extensions = extensions
        self.respect_gitignore = respect_gitignore
        self.exclude = pathspec.GitIgnoreSpec.from_lines(config.exclude)
        self.problems: list[tuple[str, str]] = []  # (path, why) for paths that cannot be walked

    def _excluded(self, path: Path, is_dir: bool) -> bool:
        try:
            rel = path.resolve().relative_to(self.config.root).as_posix()
        except ValueError:
            rel = path.name
        if is_dir:
            rel += "/"
        return self.exclude.match_file(rel) or self.exclude.match_file(
            path.name + ("/" if is_dir else "")
        )

    def find(self, paths: list[Path]) -> Iterator[Path]:
        seen: set[Path] = set()
        for given in paths:
            if not given.exists() and not given.is_symlink():
                self.problems.append((str(given), "no such file or directory"))
                continue
            if given.is_file() or (given.is_symlink() and not given.is_dir()):
                # Named explicitly: checked even if excluded, as flake8 and ruff do, unless
                # --force-exclude asks otherwise.
                if self.force_exclude and self._excluded(given, False):
                    continue
                key = given.resolve() if given.exists() else given
                if key not in seen:
                    seen.add(key)
                    yield given
                continue
            yield from self._walk(given, seen)

    def _walk(self, top: Path, seen: set[Path]) -> Iterator[Path]:
        # Each stack entry carries the gitignore specs of the directories above it.
        stack: list[tuple[Path, tuple[tuple[Path, pathspec.PathSpec], ...]]] = [(top, ())]
        visited_dirs: set[tuple[int, int]] = set()
        while stack:
            directory, specs = stack.pop()
            try:
                st = directory.stat()
            except OSError as e:
                self.problems.append((str(directory), f"cannot read directory: {e.strerror}"))
                continue
            if (st.st_dev, st.st_ino) in visited_dirs:
                continue  # a symlink loop, or the same tree twice
            visited_dirs.add((st.st_dev, st.st_ino))
            if self.respect_gitignore:
                spec = _gitignore_specs(directory)
                if spec is not None:
                    specs = (*specs, (directory, spec))
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError as e:
                self.problems.append((str(directory), f"cannot read directory: {e.strerror}"))
                continue
            subdirs = []
            for entry in entries:
                path = Path(entry.path)
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if self._excluded(path, is_dir) or self._gitignored(path, is_dir, specs):
                    continue
                if is_dir:
                    subdirs.append(path)
                elif self._wanted(path):
                    key = path.resolve() if path.exists() else path
                    if key not in seen:
                        seen.add(key)
                        yield path
            stack.extend((d, specs) for d in reversed(subdirs))

    def _gitignored(self, path: Path, is_dir: bool, specs) -> bool:
        for base, spec in specs:
            rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
            if spec.match_file(rel):
                return True
        return False

    def _wanted(self, path: Path) -> bool:
        name = path.name.lower()
        return any(name.endswith(ext) for ext in self.extensions)
