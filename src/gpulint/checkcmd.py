"""`gpulint check`: find the files, lint each with its own configuration, fix, add `noqa`,
report; once, on standard input, or again on every change (`--watch`).

Each file is linted with the configuration nearest to it (the first `pyproject.toml` with
`[tool.gpulint]` at or above its folder), as ruff does: one run over a monorepo gives each
package its own settings, whatever order the paths come in. The flake8 plugin and the language
server find a file's configuration the same way, so all three agree.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpulint.config import Config, ConfigResolver, apply_table
from gpulint.diagnostics import (
    ENGINE_CODES,
    UNUSED_NOQA,
    VENDORED,
    Finding,
    internal_errors,
    note_line,
    split_notes,
    unanalysable,
    vendored_note,
)
from gpulint.engine import FileResult, Linter, Report, cpu_count, display_path, evidence_notes
from gpulint.files import FileFinder
from gpulint.reporters import REPORTERS
from gpulint.safeio import MAX_SOURCE_BYTES, Unreadable, escape, read_bytes
from gpulint.status import EXIT_FINDINGS, EXIT_INTERNAL_ERROR, EXIT_OK, EXIT_USAGE, UsageError

WATCH_INTERVAL_S = 0.5
_CODES = re.compile(r"\b[A-Z]+[0-9]+\b")
MACHINE_FORMATS = {"json", "sarif", "github", "gitlab", "junit", "json-lines", "rdjson", "pylint"}


def config_args(args) -> tuple[Path | None, dict]:
    """`--config` values, as ruff reads them: a path to an existing file is the configuration
    file (one at most); anything else must be TOML (`key = value`), a setting that overrides
    the files' for every file, in order."""
    files: list[Path] = []
    overrides: dict = {}
    for value in getattr(args, "config", None) or []:
        if os.path.isfile(value):
            files.append(Path(value))
            continue
        import tomllib  # here: a run without `--config KEY=VALUE` never parses TOML for it

        try:
            table = tomllib.loads(value)
        except tomllib.TOMLDecodeError as e:
            looks_like_file = "=" not in value
            raise UsageError(
                f"--config {value!r}: no such file"
                if looks_like_file
                else f"--config {value!r}: not a file, nor a TOML `key = value` ({e})"
            ) from None
        overrides.update(table)
    if len(files) > 1:
        raise UsageError("--config names one configuration file at most")
    if files and getattr(args, "isolated", False):
        raise UsageError("--isolated reads no configuration file: drop --config FILE")
    return (files[0] if files else None), overrides


def _adjuster(args, inline: dict | None = None):
    overrides = dict(inline or {})
    for flag, key in (
        ("select", "select"),
        ("ignore", "ignore"),
        ("extend_select", "extend-select"),
        ("targets", "targets"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    if getattr(args, "preview", None) is not None:
        overrides["preview"] = args.preview
    if getattr(args, "skip_vendored", None) is not None:
        overrides["skip-vendored"] = args.skip_vendored

    def adjust(config: Config) -> None:
        apply_table(config, overrides)
        if args.cache_dir:
            config.cache_dir = str(args.cache_dir)

    return adjust


@dataclass
class Run:
    """One check: the report, and which linter owns each file (for fixes and re-checks)."""

    report: Report
    linters: dict[str, Linter]
    root: Path  # where paths in the report are anchored (SARIF, GitHub, GitLab)
    fixed: Counter  # (path, code) -> fixes applied
    # (path, line, code, why) for findings a fix was offered for and not applied, or that their
    # rule could fix in other shapes but not in this one; `--show-fixes` lists them.
    # (path, line or in a notebook "cell N:line", code, why)
    not_fixed: list[tuple[str, int | str, str, str]] = field(default_factory=list)


class Checker:
    def __init__(self, args):
        self.args = args
        explicit, inline = config_args(args)
        self.resolver = ConfigResolver(explicit, _adjuster(args, inline))
        self.resolver.isolated = getattr(args, "isolated", False)
        self._linters: dict[int, Linter] = {}
        self.evidence_problems: list[tuple[str, str]] = []
        self._traces: dict[str, list[dict]] = {}
        self.named: set[str] = set()  # files named on the command line, shared by the linters

    def linter(self, config: Config) -> Linter:
        linter = self._linters.get(id(config))
        if linter is None:
            notes = evidence_notes(
                config,
                self.args.evidence,
                self.evidence_problems,
                traces=self.traces(config),
            )
            linter = self._linters[id(config)] = Linter(config, notes)
            linter.respect_gitignore = not self.args.no_gitignore
            linter.force_exclude = self.args.force_exclude
            linter.prefilter = not self.args.no_prefilter
            linter.named = self.named
        return linter

    def traces(self, config: Config) -> list[dict]:
        """The records of ``--trace``, built once per project root (a recording folder is
        analysed and joined with a check of that root: not once per configuration)."""
        paths = tuple(getattr(self.args, "trace", ()) or ())
        if not paths:
            return []
        key = str(config.root)
        if key not in self._traces:
            self._traces[key] = trace_records(config, paths, self.evidence_problems)
        return self._traces[key]

    def root_config(self, paths: list[Path]) -> Config:
        """The configuration over all the paths: that of their common folder, whatever their
        order (the report's anchor; `jobs`)."""
        absolute = [os.path.abspath(p) for p in paths] or [os.getcwd()]
        common = Path(os.path.commonpath(absolute))
        if not common.is_dir():
            common = common.parent
        return self.resolver(common)

    def find(self, paths: list[Path]) -> tuple[list[Path], list[FileResult]]:
        root = self.root_config(paths)
        self.resolver.strict = False  # the run's configuration is loaded: see ConfigResolver
        base = self.linter(root)
        finder = FileFinder(
            root,
            base.extensions,
            not self.args.no_gitignore,
            self.args.force_exclude,
            config_for=self.resolver,
        )
        finder.roots.extend(p for p in paths if p.is_dir())
        files = list(finder.find(list(paths)))
        problems = [FileResult(p, [unanalysable(p, why)]) for p, why in finder.problems]
        problems += [FileResult(p, [vendored_note(p, why)]) for p, why in finder.vendored]
        self.named.update(finder.named)
        return files, problems

    def run(self, paths: list[Path]) -> Run:
        from gpulint.cache import ResultCache
        from gpulint.parallel import lint_many

        files, problems = self.find(paths)
        groups: dict[int, tuple[Linter, list[Path]]] = {}
        folders = [p for p in paths if p.is_dir()]
        by_folder: dict[str, Linter] = {}  # a folder's files share its configuration
        for path in files:
            folder = os.path.dirname(path)
            linter = by_folder.get(folder)
            if linter is None:
                linter = by_folder[folder] = self.linter(self.resolver.for_file(path))
            group = groups.get(id(linter))
            if group is None:
                linter.roots.extend(p for p in folders if p not in linter.roots)
                group = groups[id(linter)] = (linter, [])
            group[1].append(path)
        root = self.root_config(paths)
        # A repository's `jobs` is capped at the cores (`jobs = 100000` must not fork-bomb CI);
        # --jobs on the command line is the user's own choice.
        jobs = self.args.jobs or min(root.jobs, cpu_count()) or cpu_count()
        results: list[FileResult] = list(problems)
        owners: dict[str, Linter] = {}
        for linter, members in groups.values():
            cache = None
            if not self.args.no_cache and not self.args.no_prefilter:
                cache_dir = Path(linter.config.cache_dir)
                if not cache_dir.is_absolute():
                    cache_dir = linter.config.root / cache_dir
                cache = ResultCache(cache_dir, linter.fingerprint())
            # cross-file facts (CUDA launchers' callers), once, kept beside the result cache;
            # with workers to spare, built beside them while they lint the other files
            store = cache.directory if cache is not None else None
            linter.index_projects(members, store, background=jobs > 1)
            try:
                linter.prepare_project(paths, files)  # function summaries across the tree
                for result in lint_many(linter, members, jobs=jobs, cache=cache):
                    owners[result.path] = linter
                    results.append(result)
            finally:
                linter.abandon_projects()  # one still building when the run was cut short
        config_problems = [*root.problems]
        config_problems += [p for linter, _ in groups.values() for p in linter.config.problems]
        reported = [*self.resolver.problems, *config_problems, *self.evidence_problems]
        for where, why in dict(reported).items():
            shown = display_path(Path(where))
            results.append(FileResult(shown, [unanalysable(shown, why)]))
        self.evidence_problems.clear()
        self.resolver.problems.clear()
        results.sort(key=lambda r: r.path)
        errors = [f for linter, _ in groups.values() for f in linter.errors]
        return Run(Report(results, errors), owners, root.root, Counter())


def trace_records(
    config: Config, traces: Sequence[Path], problems: list[tuple[str, str]] | None
) -> list[dict]:
    """The records of ``check --trace PATH``: a trace's evidence record (``gpulint trace
    --json``, ``.gpulint/evidence/*-trace-*.json``) or a recording folder
    (``.gpulint/trace/<run>``), which is analysed and joined with the findings of this tree."""
    from gpulint.runtime.evidence import load_records

    out: list[dict] = []
    for p in traces:
        if p.is_dir() and (
            (p / "trace.json.gz").exists() or (p / "trace.json").exists() or (p / "rank0").is_dir()
        ):
            from gpulint.runtime.trace_cli import record_of_recording

            record = record_of_recording(p, config.root)
            if isinstance(record, str):
                if problems is not None:
                    problems.append((str(p), record))
                continue
            out.append(record)
        elif os.path.lexists(p):
            out += [r for r in load_records([p], problems=problems) if r.get("bench") == "trace"]
        elif problems is not None:
            problems.append((str(p), "no such trace record or recording"))
    return out


def _failing(args, findings: list) -> list:
    """The findings that fail the run: all of them, or with ``--fail-on confirmed`` only those a
    trace confirmed (a CI gate on measured costs, not on candidates)."""
    if getattr(args, "fail_on", "findings") == "confirmed":
        return [f for f in findings if getattr(f, "trace", None) == "confirmed"]
    return findings


def hardware_note(run: Run, args=None) -> None:
    """Once, not per finding nor per run: the hardware rules skipped for want of `targets`,
    where a checked file holds what they look for. Never under `-q`. Shown once per project:
    the note's text is recorded in the project's cache folder (`notes.json` beside the result
    cache), and a later run that would say the same thing says nothing; a different note (other
    rules skipped) is shown again. Without a cache (`--no-cache`) there is nowhere to record
    it, and it is shown on every run."""
    if args is not None and args.quiet:
        return
    # Per linter (one per configuration), not per file: which rules are skipped for want of
    # targets (the registry knows, from each rule's own `applicable`) and what they look for.
    # The files are searched for the static triggers first; a rule whose triggers depend on
    # the settings is imported to ask it only when none holds them (a warm run imports no rule
    # for this note).
    notes: dict[int, _SkippedRules] = {}

    def candidates():
        for path, linter in run.linters.items():
            settings = linter.settings
            if settings.targets or settings.option("local_gpu", "target") is not None:
                continue
            skipped = notes.get(id(linter))
            if skipped is None:
                skipped = notes[id(linter)] = _SkippedRules(linter)
            if skipped.refs:
                yield path, linter, skipped

    def holds(linter: Linter, path: str, triggers: list[bytes]) -> bool:
        try:
            data = linter.read(Path(path))
        except (Unreadable, OSError):
            return False
        return any(t in data for t in triggers)

    found = next((s for p, lin, s in candidates() if holds(lin, p, s.static)), None)
    if found is None:
        for path, linter, skipped in candidates():
            dynamic = skipped.dynamic()
            if not dynamic and not skipped.static:  # nothing to look for: a file is enough
                if holds(linter, path, [b""]):
                    found = skipped
                    break
            elif dynamic and holds(linter, path, dynamic):
                found = skipped
                break
    if found is not None:
        codes = ", ".join(ref.code for ref in found.refs)
        text = (
            f"gpulint: note: {codes} {'needs' if len(found.refs) == 1 else 'need'} hardware "
            "`targets` (`--targets H100,GB10` or `targets = [...]` under [tool.gpulint]), or a "
            "local GPU named by `gpulint probe --json > .gpulint/probe.json` or a bench record; "
            "skipped (this note is shown once)"
        )
        no_cache = args is not None and (args.no_cache or args.no_prefilter)
        if no_cache or not _note_shown_before(found.linter, text):
            print(text, file=sys.stderr)


NOTES_FILE = "notes.json"


def _note_shown_before(linter: Linter, text: str) -> bool:
    """Whether the project's cache folder records `text` as shown; records it if not. A
    folder that cannot be read or written: not shown before (the note is printed)."""
    import hashlib
    import json

    from gpulint.cache import write_atomic
    from gpulint.safeio import read_text

    directory = Path(linter.config.cache_dir)
    if not directory.is_absolute():
        directory = linter.config.root / directory
    path = directory / NOTES_FILE
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    try:
        shown = json.loads(read_text(path, 1 << 20, [directory])).get("shown", [])
        if not isinstance(shown, list):
            shown = []
    except (Unreadable, OSError, ValueError, AttributeError, RecursionError):
        shown = []
    if key in shown:
        return True
    try:
        directory.mkdir(parents=True, exist_ok=True)
        gitignore = directory / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("# created by gpulint\n*\n")
        write_atomic(path, {"shown": [*shown[-63:], key]}, ".notes-")
    except OSError:
        pass
    return False


class _SkippedRules:
    """A linter's enabled rules that need hardware targets, and whether a file's bytes hold
    a trigger of one of them as it would be with a target (or none of them has triggers)."""

    def __init__(self, linter: Linter) -> None:
        self.linter = linter
        found = {ref for refs in linter.refs.values() for ref in refs if ref.needs_targets}
        self.refs = sorted(found, key=lambda ref: ref.code)
        self.static = [t for ref in self.refs if ref.static_triggers for t in ref.triggers or ()]
        self._dynamic: list[bytes] | None = None

    def dynamic(self) -> list[bytes]:
        if self._dynamic is None:
            options = self.linter.settings.options
            self._dynamic = []
            for ref in self.refs:
                if ref.static_triggers:
                    continue
                # From the registry where it knows (no rule import); else the rule is asked.
                known = ref.triggers_with_targets(options)
                self._dynamic += known if known is not None else self._ask(ref)
        return self._dynamic

    def _ask(self, ref) -> tuple[bytes, ...]:
        from dataclasses import replace

        from gpulint.hardware import table

        some = replace(self.linter.settings, targets=(table().target("sm_90"),))
        return self.linter._class(ref).trigger_bytes(some) or ()


# -- one run -----------------------------------------------------------------------------------
def cmd_check(args) -> int:
    if args.format == "text":
        args.format = "concise"
    if args.add_noqa and (args.fix or args.diff):
        raise UsageError("--add-noqa cannot be combined with --fix or --diff")
    if args.paths == [Path("-")] or (args.stdin_filename and not args.paths):
        if args.watch or args.add_noqa:
            raise UsageError("--watch and --add-noqa read files, not standard input")
        return check_stdin(args)
    if not args.paths:
        args.paths = [Path(".")]
    if Path("-") in args.paths:
        raise UsageError("`-` (standard input) cannot be mixed with paths")
    if args.show_files or args.show_settings:
        return show_files_or_settings(args)
    if args.watch:
        return watch(args)
    return check_once(args)


def show_files_or_settings(args) -> int:
    """ruff's `--show-files` (each file a run would check, as the walk finds it, sorted) and
    `--show-settings` (what the first of them is checked with: its configuration file and
    every setting after the command line's overrides, then the rules it enables)."""
    import json

    checker = Checker(args)
    files, problems = checker.find(args.paths)
    files = sorted(files, key=lambda p: display_path(p))
    if args.show_files:
        # The vendored copies it leaves alone too, with why (folders from the walk, files from
        # their headers), each marked with its note's code.
        for result in problems:
            for f in result.findings:
                if f.code == VENDORED:
                    print(f"{escape(result.path)}  [{f.code}: {escape(f.message)}]")
        for path in files:
            linter = checker.linter(checker.resolver.for_file(path))
            shown = display_path(path)
            try:
                why = linter.vendored(
                    path, linter.read(path), os.path.abspath(path) in checker.named
                )
            except Unreadable:
                why = None
            if why is None:
                print(escape(shown))
            else:
                note = vendored_note(shown, why)
                print(f"{escape(shown)}  [{VENDORED}: {escape(note.message)}]")
        for result in problems:
            for f in result.findings:
                if f.code != VENDORED:
                    print(f"{escape(result.path)}: {escape(f.message)}", file=sys.stderr)
    if args.show_settings:
        if not files:
            print("gpulint: no file to show the settings of", file=sys.stderr)
            return EXIT_USAGE
        first = files[0]
        config = checker.resolver.for_file(first)
        linter = checker.linter(config)
        codes = sorted({ref.code for refs in linter.refs.values() for ref in refs})
        settings = {
            "select": config.select,
            "extend-select": config.extend_select,
            "ignore": config.ignore,
            "preview": config.preview,
            "skip-vendored": config.skip_vendored,
            "per-file-ignores": config.per_file_ignores,
            "exclude": config.exclude,
            "targets": config.targets,
            "cache-dir": config.cache_dir,
            "jobs": config.jobs,
            "evidence": config.evidence,
            **config.options,
        }
        print(f"Resolved settings for: {escape(display_path(first))}")
        source = config.source
        print(f"Settings path: {escape(str(source)) if source else '(none: the defaults)'}")
        print(f"Project root: {escape(str(config.root))}")
        for key, value in settings.items():
            print(f"{key} = {json.dumps(value, default=str)}")
        print(f"enabled rules ({len(codes)}) = {json.dumps(codes)}")
    return EXIT_OK


def check_once(args) -> int:
    checker = Checker(args)
    run = checker.run(args.paths)
    hardware_note(run, args)
    if args.add_noqa or args.diff:
        # No report is written: the internal errors are said on stderr all the same.
        for error in run.report.internal_errors:
            print(note_line(error), file=sys.stderr)
    if args.add_noqa:
        code = add_noqa(args, checker, run)
        return EXIT_INTERNAL_ERROR if run.report.internal_errors else code
    if args.fix or args.diff:
        written = apply_fixes(args, run)
        if written is not None:
            return EXIT_INTERNAL_ERROR if run.report.internal_errors else written
    findings = run.report.findings
    emit(args, run, findings, notes=run.report.notes)
    if run.report.internal_errors:
        return EXIT_INTERNAL_ERROR
    if _failing(args, findings) and not args.exit_zero:
        return EXIT_FINDINGS
    if args.exit_non_zero_on_fix and sum(run.fixed.values()):
        return EXIT_FINDINGS
    return EXIT_OK


def apply_fixes(args, run: Run) -> int | None:
    """Write (or, with --diff, print) the fixes; re-check what was written."""
    from gpulint.fixes import fix_until_stable, unified_diff

    diffs, fixed_paths = [], []
    for result in run.report.results:
        if not any(f.fix for f in result.findings):
            continue
        path = Path(result.path)
        linter = run.linters[result.path]
        relpath = linter.relpath(path)

        def lint(data: bytes, shown=result.path, relpath=relpath, linter=linter):
            return linter.lint_bytes(shown, data, relpath, prefilter=linter.prefilter)[0]

        # --diff writes nothing, also with --fix.
        write = args.fix and not args.diff
        outcome = fix_until_stable(
            path, result.findings, _content_digest(result), write, lint, linter.config.root
        )
        for fix, why in outcome.refused:
            for f in result.findings:
                if f.fix == fix:
                    run.not_fixed.append((result.path, _line_of(f), f.code, why))
        if outcome.error:
            print(f"{escape(result.path)}: {escape(outcome.error)}", file=sys.stderr)
        elif args.diff:
            diffs.append(unified_diff(outcome, result.path))
        elif outcome.applied:
            fixed_paths.append(path)
    if args.diff:
        sys.stdout.write("".join(diffs))
        return EXIT_FINDINGS if any(diffs) and not args.exit_zero else EXIT_OK
    if fixed_paths:
        # Re-check what was written: report what is left, and prove the fix parsed.
        refreshed = {}
        for path in fixed_paths:
            result = run.linters[display_path(path)].lint_path(path)
            refreshed[result.path] = result
        old = {r.path: r for r in run.report.results}
        run.report.results = [refreshed.get(r.path, r) for r in run.report.results]
        # What the fixes removed, per file and code: the findings that are gone.
        for shown, new in refreshed.items():
            after = Counter(f.code for f in new.findings)
            for code, n in Counter(f.code for f in old[shown].findings).items():
                gone = n - after.get(code, 0)
                if gone > 0:
                    run.fixed[(shown, code)] = gone
        if not args.quiet:
            total = len(fixed_paths)
            print(f"Fixed {total} file{'s' if total != 1 else ''}.", file=sys.stderr)
    return None


def _content_digest(result: FileResult) -> str:
    """The sha256 of the bytes that were linted: a result's digest may carry a salt after a
    colon (what a CUDA file's findings depend on in other files), which fixes do not compare."""
    return result.digest.split(":", 1)[0]


def emit(
    args,
    run: Run,
    findings: list[Finding],
    stdin_text: dict[str, str] | None = None,
    notes: Sequence[Finding] = (),
):
    """Write the report. `notes` (GPU800: lines not analysed) are not findings: JSON and SARIF
    carry them in their own place, every other format prints them on stderr."""

    def read_text(path: str) -> str | None:
        if stdin_text and path in stdin_text:
            return stdin_text[path]
        linter = run.linters.get(path)
        try:
            # A report quotes files it could not lint too (a FIFO's GPU000): read as safely.
            data = linter.read(Path(path)) if linter else read_bytes(path, MAX_SOURCE_BYTES)
            return data.decode("utf-8")
        except (Unreadable, OSError, UnicodeDecodeError):
            return None

    carried = args.format in ("json", "sarif") and not args.statistics
    if notes and not carried and not args.quiet:
        copies = [n for n in notes if n.code == VENDORED]
        for note in notes:
            if note.code != VENDORED:
                print(note_line(note), file=sys.stderr)
        if copies:
            # One line, not one per file: a vendored tree can hold hundreds (--show-files
            # lists each, with why).
            shown = ", ".join(n.path for n in copies[:3]) + (", ..." if len(copies) > 3 else "")
            print(
                f"gpulint: note: {len(copies)} vendored cop{'y' if len(copies) == 1 else 'ies'} "
                f"of other projects not checked ({escape(shown)}); `--show-files` says why, "
                "`--no-skip-vendored` checks them",
                file=sys.stderr,
            )
    if args.statistics:
        output = statistics(findings)
    else:
        output = REPORTERS[args.format](
            findings,
            files_checked=run.report.files_checked,
            root=run.root,
            read_text=read_text,
            color=use_color(args),
            quiet=args.quiet,
            notes=list(notes) if carried else [],
        )
    if args.show_fixes and (run.fixed or run.not_fixed or any(f.fix for f in findings)):
        shown = show_fixes(run.fixed, _not_fixed(run, findings))
        if args.format in MACHINE_FORMATS and not args.statistics:
            sys.stderr.write(shown)
        else:
            output = shown + output
    if args.output_file:
        try:
            args.output_file.parent.mkdir(parents=True, exist_ok=True)
            # surrogateescape: a file name that is not UTF-8 is written back as its own bytes.
            args.output_file.write_text(output, encoding="utf-8", errors="surrogateescape")
        except OSError as e:
            raise UsageError(f"cannot write {args.output_file}: {e.strerror or e}") from None
    else:
        sys.stdout.write(output)
        sys.stdout.flush()


def use_color(args) -> bool:
    """Colour on a terminal, as ruff: not into a file or a pipe, never with NO_COLOR set;
    `--color always|never` decides outright."""
    if args.color != "auto":
        return args.color == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return not args.output_file and sys.stdout.isatty()


def statistics(findings: list[Finding]) -> str:
    """ruff's `--statistics`: one line per code, most frequent first, with the rule's tier."""
    from gpulint.rule import rule_by_code

    counts = Counter(f.code for f in findings)
    fixable = {f.code for f in findings if f.fix}
    if not counts:
        return ""
    width = len(str(max(counts.values())))
    lines = []
    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        rule = rule_by_code(code)
        name = rule.name if rule else "unanalysable-file"
        mark = "[*]" if code in fixable else "[ ]"
        tier = rule.tier if rule else "default"
        lines.append(f"{n:>{width}}\t{code}\t{mark} {name}\t{tier}")
    return "\n".join(lines) + "\n"


def _line_of(f: Finding) -> int | str:
    """A finding's line as `--show-fixes` names it: in a notebook, `cell N:line`."""
    return f.line if f.cell is None else f"cell {f.cell}:{f.line}"


def _not_fixed(run: Run, findings: list[Finding]) -> list[tuple[str, int | str, str, str]]:
    """What is left unfixed and why: fixes that were refused, and findings of fixable rules
    that came with no fix (the rule's page says which shapes it leaves to you)."""
    from gpulint.rule import rule_by_code

    out = list(run.not_fixed)
    refused = {(p, line, code) for p, line, code, _ in out}
    for f in findings:
        rule = rule_by_code(f.code)
        if f.fix is None and rule is not None and rule.fixable:
            if (f.path, _line_of(f), f.code) not in refused:
                why = f"no safe fix for this use; see `gpulint rule {f.code}`"
                out.append((f.path, _line_of(f), f.code, why))
    return sorted(set(out))


def show_fixes(
    fixed: Counter, not_fixed: list[tuple[str, int | str, str, str]] | None = None
) -> str:
    """ruff's `--show-fixes`: what was fixed, per file and code, then what was not, and why."""
    from gpulint.rule import rule_by_code

    total = sum(fixed.values())
    lines = [f"Fixed {total} finding{'s' if total != 1 else ''}:"] if total else []
    by_path: dict[str, list[tuple[str, int]]] = {}
    for (path, code), n in sorted(fixed.items()):
        by_path.setdefault(path, []).append((code, n))
    for path, codes in by_path.items():
        lines.append(f"- {escape(path)}:")
        for code, n in codes:
            rule = rule_by_code(code)
            lines.append(f"    {n} × {code} ({rule.name if rule else code})")
    if not_fixed:
        lines.append(f"Not fixed ({len(not_fixed)}):")
        for path, line, code, why in not_fixed:
            lines.append(f"- {escape(path)}:{line}: {code} {escape(why)}")
    return "\n".join(lines) + "\n\n"


# -- standard input ----------------------------------------------------------------------------
def check_stdin(args) -> int:
    """Lint what arrives on standard input as the file `--stdin-filename` names (its language,
    configuration and per-file-ignores); with --fix, print the fixed text on stdout and the
    findings on stderr, as ruff does."""
    from gpulint.fixes import apply_edits, still_parses
    from gpulint.frontends import ParseError, decode

    name = args.stdin_filename or Path("-.py")
    data = sys.stdin.buffer.read()
    checker = Checker(args)
    config = checker.resolver.for_path(name)
    linter = checker.linter(config)
    shown = display_path(name)
    if args.force_exclude:
        finder = FileFinder(config, linter.extensions, force_exclude=True)
        if finder._excluded(name, False):
            if args.fix:
                sys.stdout.buffer.write(data)
            return EXIT_OK
    findings, _ = linter.lint_bytes(shown, data, linter.relpath(name))
    findings, notes = split_notes(findings)
    try:
        text = decode(data)
    except ParseError:
        text = None
    run = Run(Report([FileResult(shown, findings)]), {shown: linter}, config.root, Counter())
    if args.fix and text is not None:
        if shown.lower().endswith(".ipynb"):
            # A notebook's edits count in their cells: written into the cells, and checked
            from gpulint.fixes import choose_fixes

            def relint(data: bytes) -> list[Finding]:
                return linter.lint_bytes(shown, data, linter.relpath(name))[0]

            new_text = choose_fixes(text, findings, shown, relint)[0]
        else:
            edits = [e for f in findings if f.fix for e in f.fix.edits]
            new_text, _ = apply_edits(text, edits)
        if new_text != text and still_parses(new_text, shown) is None:
            after, _ = linter.lint_bytes(shown, new_text.encode("utf-8"), linter.relpath(name))
            for code, n in Counter(f.code for f in findings).items():
                gone = n - sum(1 for f in after if f.code == code)
                if gone > 0:
                    run.fixed[(shown, code)] = gone
            findings, text = split_notes(after)[0], new_text
        sys.stdout.write(text)
        sys.stdout.flush()
        # The findings left go to stderr: stdout is the file.
        saved, sys.stdout = sys.stdout, sys.stderr
        try:
            emit(args, run, findings, {shown: text}, notes)
        finally:
            sys.stdout = saved
    else:
        emit(args, run, findings, {shown: text} if text is not None else None, notes)
    if internal_errors(notes):
        return EXIT_INTERNAL_ERROR
    if _failing(args, findings) and not args.exit_zero:
        return EXIT_FINDINGS
    if args.exit_non_zero_on_fix and run.fixed:
        return EXIT_FINDINGS
    return EXIT_OK


# -- --add-noqa --------------------------------------------------------------------------------
def add_noqa(args, checker: Checker, run: Run) -> int:
    """Write `# noqa: CODE` on the line of every finding (keeping the codes a `noqa` there
    already names), so a large code base adopts gpulint at once and new code is held to it.
    Idempotent: a second run finds nothing to add.

    Each line's comment is written the way a fix is (gpulint.fixes.fix_file): only if the file
    is unchanged since it was checked, still parses, keeps every token outside the edit, and
    re-linted no longer reports what the comment suppresses."""
    from dataclasses import replace

    from gpulint.diagnostics import Fix
    from gpulint.fixes import decode_for_rewrite, fix_file
    from gpulint.frontends import ParseError
    from gpulint.noqa import NoqaPlanner
    from gpulint.registry import frontend_for

    added = files = 0
    for result in run.report.results:
        frontend = frontend_for(result.path)
        if frontend is None or not any(f.code not in ENGINE_CODES for f in result.findings):
            continue
        path = Path(result.path)
        linter = run.linters.get(result.path)
        if linter is None:
            continue
        try:
            text, _ = decode_for_rewrite(linter.read(path))
        except (Unreadable, ParseError) as e:
            print(f"{escape(result.path)}: {escape(str(e))}; no noqa added", file=sys.stderr)
            continue
        planners: dict[int | None, NoqaPlanner] = {None: NoqaPlanner(text, frontend.language)}

        def planner_for(cell: int | None, text=text, planners=planners) -> NoqaPlanner:
            # In a notebook, a finding's line counts in its cell, and so do its edits.
            if cell not in planners:
                assert cell is not None
                from gpulint.frontends.notebook import cell_source

                planners[cell] = NoqaPlanner(cell_source(text, cell) or "", "python")
            return planners[cell]

        # One fix per line: a comment for the line's first finding, the others ride along.
        by_line: dict[tuple[int | None, int], list] = {}
        # (an unused noqa, GPU003, is not answered with one more: it is left to `--fix`)
        unwritten = {*ENGINE_CODES, UNUSED_NOQA}
        for f in result.findings:
            if f.code not in unwritten:
                target = planner_for(f.cell).target_line(f.line)
                by_line.setdefault((f.cell, target), []).append(f)
        findings = [replace(f, fix=None) for f in result.findings if f.code in unwritten]
        for (cell, _), group in by_line.items():
            (edit,) = planner_for(cell).edits(group) or (None,)
            first, *rest = group
            fix = Fix("add noqa", (edit,)) if edit is not None else None
            findings += [replace(first, fix=fix), *(replace(f, fix=None) for f in rest)]
        if not any(f.fix for f in findings):
            continue
        relpath = linter.relpath(path)

        def lint(data: bytes, shown=result.path, relpath=relpath, linter=linter):
            return linter.lint_bytes(shown, data, relpath, prefilter=linter.prefilter)[0]

        outcome = fix_file(path, findings, _content_digest(result), True, lint, linter.config.root)
        if outcome.error:
            print(f"{escape(result.path)}: {escape(outcome.error)}", file=sys.stderr)
        for _fix, why in outcome.refused:
            print(f"{escape(result.path)}: noqa not added ({escape(why)})", file=sys.stderr)
        if outcome.applied:
            written = {f.fix for f in findings if f.fix} - {fix for fix, _ in outcome.refused}
            added += sum(
                len(_new_codes(e, planner_for(f.cell).text))
                for f in findings
                if f.fix in written
                for e in f.fix.edits
            )
            files += 1
    if not args.quiet:
        print(
            f"Added {added} noqa code{'s' if added != 1 else ''} in {files} "
            f"file{'s' if files != 1 else ''}.",
            file=sys.stderr,
        )
    return EXIT_OK


def _new_codes(edit, text: str) -> set[str]:
    return set(_CODES.findall(edit.text)) - set(_CODES.findall(text[edit.start : edit.end]))


# -- --watch -----------------------------------------------------------------------------------
def _snapshot(args, sources: set[Path] | None = None) -> dict[str, tuple[int, int]]:
    """Every checked file and configuration file, with its modification stamp (and the
    configuration files into `sources`, when given)."""
    checker = Checker(args)
    try:
        files, _ = checker.find(args.paths)
    except Exception:  # a configuration being edited: try again on the next change
        return {}
    stamps = {}
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamps[str(path)] = (st.st_mtime_ns, st.st_size)
    for source in set(checker.resolver._source.values()):
        if source is not None:
            if sources is not None:
                sources.add(Path(source))
            try:
                st = os.stat(source)
                stamps[str(source)] = (st.st_mtime_ns, st.st_size)
            except OSError:
                pass
    return stamps


def watch(args) -> int:
    """Check, then check again whenever a checked file or a configuration changes (Ctrl-C
    stops). New files count: the tree is listed again on every change.

    Waits on the file system's events (watchfiles: inotify, FSEvents, ReadDirectoryChangesW),
    so an idle watch costs nothing; the tree is listed only when something under it changed.
    Without watchfiles it polls (lists the tree every WATCH_INTERVAL_S)."""
    from gpulint.config import ConfigError

    try:
        import watchfiles
    except ImportError:
        watchfiles = None  # type: ignore[assignment]
    while True:
        sources: set[Path] = set()
        before = _snapshot(args, sources)
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] Checking...", file=sys.stderr, flush=True)
        try:
            check_once(args)
        except ConfigError as e:
            print(f"gpulint: configuration error: {escape(str(e))}", file=sys.stderr)
        print(f"[{stamp}] Watching for file changes.", file=sys.stderr, flush=True)
        if watchfiles is None:
            while _snapshot(args) == before:
                time.sleep(WATCH_INTERVAL_S)
        else:
            _wait_for_events(args, before, sources, watchfiles)


def _wait_for_events(args, before: dict, sources: set[Path], watchfiles) -> None:
    """Return once the snapshot differs from `before`, woken only by file-system events under
    the paths checked and on the configuration files (which may sit above them)."""
    if _snapshot(args) != before:  # changed while it was being checked
        return
    roots = {os.path.abspath(p) for p in args.paths if p.exists()}
    roots |= {str(s) for s in sources if s.exists()}
    cache = Path(args.cache_dir).name if args.cache_dir else ".gpulint_cache"
    ignored = watchfiles.DefaultFilter(
        ignore_dirs=(*watchfiles.DefaultFilter.ignore_dirs, cache, ".gpulint_cache")
    )
    # The first timeout (the watcher is set up by then) looks once more: a change made between
    # the look above and the watcher's start sends no event. Later timeouts only wake it.
    first = True
    for changes in watchfiles.watch(
        *sorted(roots),
        watch_filter=ignored,
        debounce=400,
        rust_timeout=2000,
        yield_on_timeout=True,
    ):
        if changes or first:
            first = False
            if _snapshot(args) != before:
                return
