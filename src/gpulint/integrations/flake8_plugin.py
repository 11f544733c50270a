"""The flake8 plugin: `flake8 --select GPU` reports exactly what `gpulint check` reports.

flake8 finds the plugin through the `flake8.extension` entry point `GPU` (pyproject.toml). For each
Python file flake8 hands us, the plugin takes the path the CLI would take: the `[tool.gpulint]`
configuration found from the file's directory (`load_config`), the same evidence notes, and
`Linter.lint_bytes` with the same prefilter, suppressions and per-file-ignores. Only the shape of
the output changes: flake8 wants `(line, 0-based column, "CODE message", type)`.

Bytes: flake8 reads a file itself and hands over decoded lines. When flake8 read the file from
disk, the plugin lints the file's bytes, exactly as the CLI does (same decoding, same GPU000 for
a file that cannot be decoded); when flake8 reads standard input (editors send the unsaved
buffer that way), it lints the lines flake8 received.

`noqa`: gpulint drops what its own `noqa` comments suppress, and then flake8 applies its own
`noqa` handling to what is left. The Python front-end reads a `noqa` comment over the same
line ranges as flake8 does (a multi-line string or a backslash-continued statement is one range),
so flake8's pass never removes anything the CLI would report. `--extend-ignore`, `--select` and
`--per-file-ignores` on flake8's side filter further, as for any plugin. GPU003 (an unused gpulint
`noqa`) is reported here as by the CLI when flake8 selects it: it is judged on gpulint's own
suppression, before flake8's, and flake8's pass never hides it (the comment it is on does not name
GPU003; a bare `# noqa`, which would, is never reported in Python).

Tiers: flake8 only filters what a plugin reports, so a rule outside the default tier must be
turned on here for `flake8 --select GPU811` to show what `gpulint check --select GPU811` does.
The gpulint codes and family prefixes in flake8's `select`/`extend-select` (command line or
flake8's own configuration) are added to the configuration's `extend-select`; flake8's filter
then leaves exactly the selection the CLI makes. `--gpulint-preview` (or `gpulint-preview = true`
in flake8's configuration) is `--preview`. `select = ["pedantic"]` and `preview = true` under
`[tool.gpulint]` apply as for the CLI, since the plugin reads the same table.

A file that does not parse is flake8's own E999: flake8 does not call plugins for it, where
`gpulint check` reports GPU000.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulint import __version__
from gpulint.config import ConfigError, find_pyproject, load_config
from gpulint.diagnostics import INTERNAL_ERROR, note_line, split_notes
from gpulint.engine import MAX_FILE_BYTES, Linter, evidence_notes
from gpulint.files import FileFinder
from gpulint.hardware import UnknownTargetError
from gpulint.registry import frontend_for
from gpulint.safeio import Unreadable, read_bytes
from gpulint.supervisor import lint_bytes_budgeted

_STDIN_NAMES = {"-", "stdin"}


@dataclass
class _Project:
    """What one `[tool.gpulint]` configuration gives: the linter, or why there is none."""

    linter: Linter | None
    problem: str | None = None
    finder: FileFinder | None = None

    def excluded(self, path: Path) -> bool:
        """`exclude` as `gpulint check` applies it walking a folder: to the file and to every
        folder between the project root and it. flake8 walks with its own, shorter exclude list
        (it enters `build/` and `.venv/`), so the plugin applies ours as well."""
        assert self.linter is not None and self.finder is not None
        root = self.linter.config.root
        path = Path(os.path.realpath(path))  # never raises on a link loop
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            return self.finder._excluded(path, False)
        for depth in range(1, len(parts)):
            if self.finder._excluded(root.joinpath(*parts[:depth]), True):
                return True
        return self.finder._excluded(path, False)


class GpulintChecker:
    """flake8 tree plugin. flake8 classifies a plugin by its parameters: `tree` makes this one
    an AST plugin (run once per file); `filename` and `lines` are what it actually uses."""

    name = "gpulint"
    version = __version__

    # Set from flake8's options (parse_options); class-level because flake8 builds one checker
    # per file.
    _reads_stdin = False
    # gpulint codes and family prefixes flake8 selects (they turn on rules outside the default
    # tier, see the module's docstring), and --gpulint-preview.
    _opt_in: tuple[str, ...] = ()
    _preview = False
    # One project per configuration file and its modification time (None: no pyproject.toml
    # with [tool.gpulint]), per process. Editors may run flake8 inside their long-lived language
    # server process, so an edited pyproject.toml must not be served from a stale entry.
    _projects: dict[tuple[tuple[Path, int] | None, tuple[str, ...], bool], _Project] = {}

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]):
        self.filename = filename
        self.lines = lines

    @classmethod
    def add_options(cls, parser: Any) -> None:
        parser.add_option(
            "--gpulint-preview",
            action="store_true",
            default=False,
            parse_from_config=True,
            help="gpulint: run preview-tier rules too (as `gpulint check --preview`)",
        )

    @classmethod
    def parse_options(cls, options: Any) -> None:
        filenames = getattr(options, "filenames", None) or []
        cls._reads_stdin = "-" in filenames
        cls._opt_in = flake8_opt_in(
            [
                *(getattr(options, "select", None) or ()),
                *(getattr(options, "extend_select", None) or ()),
            ]
        )
        cls._preview = bool(getattr(options, "gpulint_preview", False))

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        path = Path(self.filename)
        frontend = frontend_for(path.name)
        if frontend is not None and getattr(frontend, "by_cell", False):
            # A notebook (`--filename=*.ipynb`): flake8 would place its findings on the JSON
            # file's lines, not the cells'; `gpulint check` reads notebooks.
            return
        project = self._project_for(path)
        linter = project.linter
        if linter is None:
            yield 1, 0, f"GPU000 configuration error: {project.problem}", type(self)
            return
        if project.excluded(path):
            return
        data = self._bytes(path)
        if len(data) > MAX_FILE_BYTES:
            yield 1, 0, f"GPU000 file too large ({len(data):,} bytes); skipped", type(self)
            return
        if linter.vendored(path, data, named=True) is not None:
            return  # a copy of another project's code, left alone as `gpulint check` does
        # In a supervised worker: flake8 has no per-file time limit of its own, and a stuck
        # file must cost its own GPU000, not the whole flake8 run.
        findings = lint_bytes_budgeted(linter, self.filename, data, linter.relpath(path))
        findings, notes = split_notes(findings)
        for note in notes:
            if note.code == INTERNAL_ERROR:
                # gpulint failed on this file (GPU001): flake8 has no exit status of a plugin's
                # own, so it is reported as an error, which fails the flake8 run (exit 1).
                findings.insert(0, note)
                continue
            # A note on the analysis (GPU800), not a finding: on stderr, as `gpulint check` says it.
            print(note_line(note), file=sys.stderr)
        for f in findings:
            # gpulint columns are 1-based code points; flake8 adds 1 to what plugins give it.
            yield f.line, max(f.col - 1, 0), f"{f.code} {f.message}", type(self)

    # -- what to lint ------------------------------------------------------------------------
    def _bytes(self, path: Path) -> bytes:
        """The file's bytes as the CLI reads them, or the received lines for standard input."""
        if not self._reads_stdin and self.filename not in _STDIN_NAMES:
            try:
                return read_bytes(path, MAX_FILE_BYTES)
            except Unreadable:
                pass
        return _encode_lines(self.lines)

    # -- configuration -----------------------------------------------------------------------
    @classmethod
    def _project_for(cls, path: Path) -> _Project:
        directory = path.parent if path.parent.is_dir() else Path.cwd()
        try:
            source = find_pyproject(directory)
            stamp = (source, source.stat().st_mtime_ns) if source else None
        except (ConfigError, OSError) as e:
            return _Project(None, str(e))
        key = (stamp, cls._opt_in, cls._preview)
        if key not in cls._projects:
            try:
                config = load_config(directory, source)
                config.extend_select = [*config.extend_select, *cls._opt_in]
                config.preview = config.preview or cls._preview
                linter = Linter(config, evidence_notes(config))
                finder = FileFinder(config, set(), respect_gitignore=False)
                cls._projects[key] = _Project(linter, None, finder)
            except (ConfigError, UnknownTargetError) as e:
                cls._projects[key] = _Project(None, str(e))
        return cls._projects[key]


def flake8_opt_in(codes: list[str]) -> tuple[str, ...]:
    """The gpulint codes and family prefixes among flake8's selected codes, that `extend-select`
    them: only those longer than `GPU` (which selects the default tier, as the CLI's does), and
    only those naming a gpulint rule (flake8's own E, W and other plugins' codes are not ours)."""
    from gpulint.registry import registry

    known = [r.code for r in registry().rules]
    picked = {c.strip().upper() for c in codes}
    return tuple(
        sorted(
            c
            for c in picked
            if re.fullmatch(r"GPU\d{1,3}", c) and any(k.startswith(c) for k in known)
        )
    )


def _encode_lines(lines: list[str]) -> bytes:
    """Text back to bytes in the encoding its PEP 263 cookie declares, so gpulint's decoding
    reads the same text flake8 read."""
    text = "".join(lines)
    head = "".join(lines[:2]).encode("utf-8", errors="replace")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(head).readline)
    except SyntaxError:
        encoding = "utf-8"
    try:
        return text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return text.encode("utf-8")
