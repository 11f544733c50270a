"""The engine, one straight line: find files -> read bytes -> prefilter by the enabled rules'
triggers -> parse once (front-end by extension) -> run the rules in one pass -> drop what `noqa`
and per-file-ignores suppress -> hand the findings to a reporter. The result cache and the process
pool (see `run`) wrap this line; they do not bend it.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from gpulint import __version__
from gpulint.config import Config
from gpulint.diagnostics import (
    ENGINE_CODES,
    VENDORED,
    Finding,
    internal_error,
    unanalysable,
    vendored_note,
)
from gpulint.files import FileFinder
from gpulint.frontends import Frontend, ParseError, decode
from gpulint.pathutil import below
from gpulint.project import ProjectIndex
from gpulint.registry import FrontendRef, RuleRef, registry
from gpulint.results import FileResult, Report, display_path
from gpulint.rule import AnyRule, all_rules
from gpulint.safeio import MAX_SOURCE_BYTES, Unreadable, read_bytes
from gpulint.settings import Settings
from gpulint.suppression import NoqaUse, is_suppressed
from gpulint.torchversion import project_range, torch_range

# A project index built in the background (`Linter.index_projects`) that has not answered in
# this long is given up: its files are judged alone, and the run reports an internal error.
PROJECT_TIME_BUDGET_S = 300.0

if TYPE_CHECKING:
    from gpulint.cache import ResultCache
    from gpulint.projectcache import ProjectCache
    from gpulint.supervisor import Background

__all__ = ["FileResult", "Linter", "Report", "display_path", "lint_source"]  # results re-exported

# A prefilter gate: any-of substrings as bytes; None is no gate.
Gate: TypeAlias = tuple[bytes, ...] | None

MAX_FILE_BYTES = MAX_SOURCE_BYTES  # larger files are reported, not parsed


@functools.cache
def _code_stamp() -> str:
    """Names, sizes and mtimes of gpulint's own files (engine, rules, data): an edited rule in a
    development install must not be served findings cached by the old one."""
    import gpulint
    import gpulint.rules

    entries = []
    roots = {os.path.dirname(gpulint.__file__), os.path.dirname(gpulint.rules.__file__)}
    for root in sorted(roots):
        # os.walk, not Path.rglob: every run pays this (a warm one too); __pycache__ holds
        # no source
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(names):
                if not name.endswith((".py", ".toml")):
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    rel = os.path.relpath(path, root)
                    entries.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


class Linter:
    def __init__(self, config: Config, evidence: dict[str, str] | None = None):
        self.config = config
        self.prefilter = True  # off only to prove the prefilter loses nothing
        self.respect_gitignore = True
        self.force_exclude = False
        # Files named on the command line (absolute paths): not reached by the walk, so the
        # folders above them are asked whether they are copied packages (gpulint.vendored).
        self.named: set[str] = set()
        self._copied: dict[str, str | None] = {}  # folder -> why it is a copied package
        # Where a symbolic link in the checked tree may lead: the project root, the working
        # folder and the folders the user named (`run` adds them). A link out of them is refused.
        self.roots: list[Path] = [config.root, Path.cwd()]
        # The tree's modules for function summaries across files; set by `run` (one file linted
        # alone, by the flake8 plugin or the language server, has none).
        self.project: ProjectIndex | None = None
        # Projects taken from the project cache, not yet turned into front-end objects
        # (language -> (front-end, JSON form, files, cache folder)), and the cache salts stored
        # with them (shown path -> salt): see `index_projects`.
        self._stored: dict[str, tuple[FrontendRef, dict[str, Any], list[Path], Path | None]] = {}
        self._salts: dict[str, str] = {}
        # Projects being built in a process of their own while other files are linted
        # (language -> the build, and what `await_projects` needs to take its result in).
        self._building: dict[str, tuple[Background, FrontendRef, list[Path], Path | None]] = {}
        # Internal errors (GPU001) of the run, not of one file: a project index that failed.
        self.errors: list[Finding] = []
        options = dict(config.options)
        # Where the configuration lives: rules that resolve paths (lever registry, evidence
        # records cited in docs) read it as settings.option("config", "root").
        options["config"] = {"root": str(config.root), "source": str(config.source or "")}
        if not config.targets:
            # Hardware rules that can (GPU702) fall back to the GPU a probe output or bench
            # record of this project names, and say so.
            from gpulint.localgpu import local_gpu

            found = local_gpu(config.root, config.evidence)
            if found is not None:
                options["local_gpu"] = {"target": found.target, "why": found.describe()}

        # The torch releases the project declares: advice a pinned release cannot take is none.
        torch_range = project_range(str(config.root), config.torch_version)
        if torch_range is not None:
            options["torch"] = torch_range.as_option()
        self.settings = Settings(
            targets=tuple(config.resolved_targets()),
            options=options,
            evidence=dict(evidence or {}),
        )
        # The enabled rules per language, known from the registry: nothing is imported until
        # a file needs linting, and then only the rules whose gates it passes.
        self.refs: dict[str, list[RuleRef]] = {}
        for ref in registry().rules:
            if config.is_enabled(ref.code, ref.tier):
                # A rule's `language` is one name or a tuple of names (one check, several formats).
                for language in ref.languages:
                    self.refs.setdefault(language, []).append(ref)
        self._gates: dict[str, list[tuple[RuleRef, Gate, Gate]]] = {}
        self._cased: dict[str, dict[bytes, tuple[bytes, ...]]] = {}  # see _cased_needles
        self._running: frozenset[str] | None = None
        self._classes: dict[str, type[AnyRule]] = {}

    def _class(self, ref: RuleRef) -> type[AnyRule]:
        cls = self._classes.get(ref.code)
        if cls is None:
            cls = self._classes[ref.code] = ref.load()
        return cls

    def gates_for(self, language: str) -> list[tuple[RuleRef, Gate, Gate]]:
        """Each enabled rule of `language` with its two gates (any-of `triggers`, and any-of
        `requires`), as bytes; None means "no gate". Rules that cannot fire under these
        settings (a hardware rule with no targets) are left out altogether. A rule whose gates
        are static is answered from the registry; the others are imported and asked."""
        gates = self._gates.get(language)
        if gates is None:
            gates = self._gates[language] = []
            # No target and no local GPU: a rule that needs one cannot fire (the registry read
            # that off its `applicable`), and is not imported to say so.
            untargeted = (
                not self.settings.targets and self.settings.option("local_gpu", "target") is None
            )
            declared = torch_range(self.settings)
            for ref in self.refs.get(language, []):
                if ref.needs_targets and untargeted:
                    continue
                if ref.torch_since and declared and not declared.admits_at_least(ref.torch_since):
                    continue  # the project pins a torch older than the rule's advice
                known = ref.gates_for(language, self.settings.options)
                if known is not None:
                    gates.append((ref, known[0] or None, known[1] or None))
                    continue
                r = self._class(ref)
                if r.applicable(self.settings):
                    triggers, requires = r.gates(language, self.settings)
                    gates.append((ref, triggers or None, requires or None))
        return gates

    @property
    def rules(self) -> dict[str, list[type[AnyRule]]]:
        """The enabled rule classes per language (imports them all)."""
        return {lang: [self._class(ref) for ref in refs] for lang, refs in self.refs.items()}

    @property
    def gates(self) -> dict[str, list[tuple[type[AnyRule], Gate, Gate]]]:
        """`gates_for` of every language, with the classes (imports them all)."""
        return {
            lang: [(self._class(ref), t, r) for ref, t, r in self.gates_for(lang)]
            for lang in self.refs
        }

    def load_rules(self, languages: Iterable[str] | None = None) -> None:
        """Import the enabled rules (of `languages`) now: before worker processes are forked,
        so they share them rather than each importing its own."""
        for language in self.refs if languages is None else languages:
            for ref, _, _ in self.gates_for(language):
                self._class(ref)

    @property
    def extensions(self) -> set[str]:
        return set(registry().by_extension)

    def fingerprint(self) -> str:
        """What the cache key needs beyond the file's bytes: version, config, rule set."""
        codes = ",".join(sorted(r.code for rs in self.refs.values() for r in rs))
        # Who the project is decides which files are vendored copies (its LICENSE, remotes).
        owner = ""
        if self.config.skip_vendored:
            from gpulint.vendored import identity

            owner = repr(identity(str(self.config.root)))
        state = (
            f"{__version__}|{_code_stamp()}|{self.config.fingerprint()}|{codes}|{owner}"
            f"|{sorted(self.settings.evidence.items())}"
            f"|{self.settings.option('local_gpu', 'why', '')}"
            f"|{sorted(self.settings.options.get('torch', {}).items())}"
        )
        return hashlib.sha256(state.encode()).hexdigest()

    # -- one file ----------------------------------------------------------------------------
    def lint_path(self, path: Path) -> FileResult:
        shown = display_path(path)
        try:
            data = self.read(path)
        except Unreadable as e:
            return FileResult(shown, [unanalysable(shown, str(e))])
        why = self.vendored(path, data, os.path.abspath(path) in self.named)
        if why is not None:
            return FileResult(shown, [vendored_note(shown, why)], self.digest(shown, data))
        deps: dict[str, str] = {}
        from gpulint.cache import evidence_stamp

        # The evidence records the claims analysis read for this file (gpulint.claims records
        # them); a file whose rules never imported it read none, and is not made to import it.
        claims = sys.modules.get("gpulint.claims")
        if claims is not None:
            claims.EVIDENCE_READS.clear()
        findings, parsed = self.lint_bytes(
            shown, data, self.relpath(path), prefilter=self.prefilter, deps=deps
        )
        claims = sys.modules.get("gpulint.claims")
        reads = sorted(claims.EVIDENCE_READS) if claims is not None else ()
        evidence = {p: evidence_stamp(p) for p in reads} or None
        return FileResult(
            shown, findings, self.digest(shown, data), parsed, deps=deps, evidence=evidence
        )

    def vendored(self, path: Path | str, data: bytes, named: bool = True) -> str | None:
        """Why the file at `path` (its bytes: `data`) is left alone as a copy of another
        project (`gpulint.vendored`), or None. Its header is read; for a file the walk did not
        reach (`named`: on the command line, from flake8), the folders between it and the
        project root are asked too, as the walk would have."""
        if not self.config.skip_vendored:
            return None
        from gpulint import vendored

        ident = vendored.identity(str(self.config.root))
        why = vendored.header_copy(data, ident)
        if why is not None or not named:
            return why
        from gpulint.files import copied_package

        root = os.path.abspath(self.config.root)
        folder = os.path.dirname(os.path.abspath(path))
        while folder != root and folder.startswith(root + os.sep):
            if folder not in self._copied:
                try:
                    entries = list(os.scandir(folder))
                except OSError:
                    entries = []
                self._copied[folder] = copied_package(Path(folder), entries, self.config)
            why = self._copied[folder]
            if why is not None:
                return f"in {display_path(Path(folder))}: {why}"
            folder = os.path.dirname(folder)
        return None

    def digest(self, shown: str, data: bytes) -> str:
        """The cache key of a file: its bytes, and what its findings depend on in other files
        (a CUDA launcher is judged by its callers: `CudaFrontend.cache_salt`)."""
        return self.salted(shown, hashlib.sha256(data).hexdigest())

    def salted(self, shown: str, digest: str) -> str:
        """`digest` (the sha256 of a file's bytes) with what else the file's findings depend on."""
        ref = registry().frontend_for(shown)
        if ref is None or not ref.cache_salt:
            return digest  # its front-end is not imported for this (a cache hit imports none)
        stored = self._salts.get(shown)
        if stored is not None:  # given with a project taken from the project cache
            return f"{digest}:{stored}" if stored else digest
        salt = getattr(ref.load(), "cache_salt", None)
        extra = salt(self.settings, shown) if salt is not None else ""
        return f"{digest}:{extra}" if extra else digest

    def read(self, path: Path) -> bytes:
        """A checked file's bytes: a regular file, capped, links only inside the roots."""
        return read_bytes(path, MAX_FILE_BYTES, self.roots)

    def relpath(self, path: Path) -> str:
        """Relative to the configuration's root (per-file-ignores, cache keys, SARIF URIs)."""
        rel = below(os.path.abspath(path), str(self.config.root))
        if rel is not None:
            return rel
        return path.as_posix() if isinstance(path, Path) else Path(path).as_posix()

    def lint_bytes(
        self,
        shown: str,
        data: bytes,
        relpath: str | None = None,
        prefilter: bool = True,
        deps: dict[str, str] | None = None,
    ) -> tuple[list[Finding], bool]:
        """Findings for one file's bytes, and whether it had to be parsed. With a project index
        (a run over a tree), calls into the tree's other modules are answered from it, and
        `deps` receives the files that answered."""
        ref = registry().frontend_for(shown)
        if ref is None:
            return [], False
        gated = data
        if ref.embeds:
            # A file that holds another language's source (a notebook's code cells): the gates
            # are tested on that source, and a file that is not of its format is said so.
            try:
                gated = ref.load().gate_bytes(data)
            except ParseError as e:
                return [unanalysable(shown, str(e), e.line, e.col, e.cell)], True
            except (RecursionError, MemoryError):
                return [unanalysable(shown, "file too deeply nested to parse")], True
        rule_classes = self._rules_for(ref.language, gated, prefilter)
        if not rule_classes:
            # Not parsed (no rule can fire), but a file that is not text is still reported where
            # the language is strict about encodings (Python); checking costs little, and the
            # front-end is not even imported.
            if ref.strict_encoding:
                try:
                    decode(data)
                except ParseError as e:
                    return [unanalysable(shown, str(e), e.line, e.col)], False
            return [], False
        frontend = ref.load()
        if self._stored:
            self.resolve_projects()
        where = f"the {frontend.language} front-end"
        try:
            parsed = frontend.parse(shown, data, self.settings)
        except ParseError as e:
            return [unanalysable(shown, str(e), e.line, e.col, e.cell)], True
        except (RecursionError, MemoryError):
            return [unanalysable(shown, "file too deeply nested to parse")], True
        except Exception as e:  # a front-end bug costs this file, not the run
            return [internal_error(shown, where, e)], True
        session = None
        if self.project is not None and deps is not None and frontend.language == "python":
            session = self.project.session(relpath or shown)
            parsed.project_lookup = session.lookup
            parsed.project = session
        rules = [cls(self.settings) for cls in rule_classes]
        judges = [r for r in rules if r.judges_noqa]  # they judge the noqa comments, later
        if judges:
            rules = [r for r in rules if not r.judges_noqa]
        # Each rule's failure is caught where it runs (frontends.run_rules, one GPU001 naming
        # the rule); this catches the front-end's own walk around them (its node index, its
        # captures) and the suppression step.
        findings: list[Finding] = []
        try:
            findings.extend(frontend.run(parsed, rules))
        except RecursionError:
            findings.append(unanalysable(shown, "file too deeply nested"))
        except Exception as e:
            findings.append(internal_error(shown, where, e))
        if session is not None and deps is not None:
            deps.update(session.deps)
        try:
            kept = self._suppress(frontend, parsed, findings, relpath or shown, judges)
        except Exception as e:
            return [internal_error(shown, f"{where}'s noqa reading", e)], True
        place = getattr(frontend, "place", None)
        if place is not None and kept:
            # Where the analysed source is not the file's text (a notebook's joined cells):
            # the findings are placed back in the file's own terms, after noqa was applied.
            try:
                kept = sorted(place(parsed, kept), key=Finding.sort_key)
            except Exception as e:
                return [internal_error(shown, f"{where}'s placing of findings", e)], True
        return kept, True

    def _cased_needles(self, language: str) -> dict[bytes, tuple[bytes, ...]]:
        """The gate needles of `language` that share their lowered form with another one, each
        with all of them (`noqa` -> `noqa`, `NOQA`, `NoQA`, ...)."""
        found = self._cased.get(language)
        if found is None:
            groups: dict[bytes, set[bytes]] = {}
            for _, triggers, requires in self.gates_for(language):
                for needle in (*(triggers or ()), *(requires or ())):
                    groups.setdefault(needle.lower(), set()).add(needle)
            found = self._cased[language] = {
                needle: tuple(sorted(group))
                for group in groups.values()
                if len(group) > 1
                for needle in group
            }
        return found

    def _rules_for(self, language: str, data: bytes, prefilter: bool) -> list[type[AnyRule]]:
        """The rules whose textual gates this file passes: only they run (only they are
        imported), and a file that no rule wants is never parsed."""
        gates = self.gates_for(language)
        if not prefilter or data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return [self._class(ref) for ref, _, _ in gates]
        seen: dict[bytes, bool] = {}
        cased = self._cased_needles(language)
        lowered: list[bytes] = []  # data.lower(), made at the first cased needle

        def hit(needles: tuple[bytes, ...] | None) -> bool:
            if needles is None:
                return True
            for needle in needles:
                found = seen.get(needle)
                if found is None:
                    variants = cased.get(needle)
                    if variants is not None:
                        # One scan of the lowered text answers every case variant that is
                        # absent (GPU003's two dozen spellings of `noqa`): a variant can only
                        # be in the text where its lowered form is in the lowered text.
                        if not lowered:
                            lowered.append(data.lower())
                        if needle.lower() not in lowered[0]:
                            for v in variants:
                                seen[v] = False
                            continue
                    found = seen[needle] = needle in data
                if found:
                    return True
            return False

        return [
            self._class(ref) for ref, triggers, requires in gates if hit(triggers) and hit(requires)
        ]

    def _suppress(
        self,
        frontend: Frontend,
        parsed: Any,
        findings: list[Finding],
        relpath: str,
        judges: Sequence[AnyRule] = (),
    ) -> list[Finding]:
        if not findings and not judges:
            return findings
        ignored = self.config.ignored_for(relpath)
        noqa = frontend.noqa_lines(parsed)
        # line -> the codes a noqa suppressed there: what the noqa judges (GPU003) are told
        suppressed: dict[int, list[str]] = {}
        kept = []
        for f in findings:
            if f.code not in ENGINE_CODES:
                if any(f.code.startswith(c) for c in ignored):
                    continue
                if is_suppressed(f.code, noqa.get(f.line)):
                    suppressed.setdefault(f.line, []).append(f.code)
                    continue
            kept.append(self._with_evidence(f, relpath))
        if judges:
            for f in self._judge_noqa(frontend, parsed, judges, suppressed):
                if f.code in ENGINE_CODES or not any(f.code.startswith(c) for c in ignored):
                    kept.append(f)
        # One finding per place and code: two paths to the same conclusion are one finding.
        unique = {(f.line, f.col, f.code): f for f in kept}
        return sorted(unique.values(), key=Finding.sort_key)

    def _judge_noqa(
        self,
        frontend: Frontend,
        parsed: Any,
        judges: Sequence[AnyRule],
        suppressed: dict[int, list[str]],
    ) -> list[Finding]:
        """What the noqa judges report, told for each `noqa` comment of the file which of its
        codes suppressed a finding (on a line it covers) and what each code is to this run."""
        reader = getattr(frontend, "noqa_comments", None)
        if reader is None:
            return []
        uses = []
        for comment in reader(parsed):
            used: set[str] = set()
            listed = comment.listed
            for line in comment.covers:
                for code in suppressed.get(line, ()):
                    if not listed:
                        used.add("")
                    used.update(c for c in listed if code.startswith(c))
            uses.append(NoqaUse(comment, frozenset(used), tuple(map(self.noqa_kind, listed))))
        out: list[Finding] = []
        for judge in judges:
            try:
                out.extend(judge.judge_noqa(parsed, uses))
            except Exception as e:  # a rule bug costs its findings on this file, as in the walk
                out.append(internal_error(parsed.display_path, f"rule {judge.code}", e))
        return out

    def noqa_kind(self, code: str) -> str:
        """What a code listed in a `noqa` comment is to this run (see `NoqaUse.kinds`). A family
        prefix (`GPU1`) is "run" only when every rule it covers ran: the others may fire in
        another run, and the comment is theirs too."""
        code = code.upper()
        if not code.startswith("GPU"):
            return "other"
        covered = [r.code for r in registry().rules if r.code.startswith(code)]
        covered += [c for c in (*ENGINE_CODES, VENDORED) if c.startswith(code)]
        if not covered:
            return "unknown"
        return "run" if all(c in self.running_codes() for c in covered) else "off"

    def running_codes(self) -> frozenset[str]:
        """The codes this run can report: the enabled rules that can fire under its settings
        (`gates_for`, over every language), and the engine's own."""
        if self._running is None:
            codes = {ref.code for language in self.refs for ref, _, _ in self.gates_for(language)}
            self._running = frozenset(codes | ENGINE_CODES | {VENDORED})
        return self._running

    def _with_evidence(self, finding: Finding, relpath: str = "") -> Finding:
        # A `gpulint trace` of this very line says more than a bench of the pattern in general.
        if not self.settings.evidence:
            return finding
        note = self.settings.evidence.get(f"trace:{relpath}:{finding.line}:{finding.code}")
        status = self.settings.evidence.get(f"trace-status:{relpath}:{finding.line}:{finding.code}")
        if not note:
            ref = next((r for rs in self.refs.values() for r in rs if r.code == finding.code), None)
            key = self._class(ref).evidence_key() if ref else None
            note = self.settings.evidence.get(key) if key else None
        if not note:
            return finding
        from dataclasses import replace

        return replace(finding, message=f"{finding.message} [measured: {note}]", trace=status)

    # -- a whole run -------------------------------------------------------------------------
    def index_projects(
        self, files: Sequence[Path], store_dir: Path | None = None, background: bool = False
    ) -> None:
        """Cross-file facts, gathered once before any file is linted (and before the cache is
        consulted: they are part of each file's cache key). Only front-ends that have them.
        With a cache folder, a project none of whose inputs changed is taken as stored
        (gpulint.projectcache): its files are not read, and its front-end is not even
        imported until a file of its language has to be linted. With `background`, a project
        to build is built in a forked process of its own while the files of other languages
        are linted (`building`, `await_projects`): it holds up only the files of its own."""
        # (a linter that runs again, in a watch or a test, starts from none of the last run's)
        self._stored.clear()
        self._salts.clear()
        self.errors.clear()
        self.abandon_projects()
        grouped: dict[FrontendRef, list[Path]] = {}
        for path in files:
            ref = registry().frontend_for(path.name)
            if ref is None or not ref.index or not self.gates_for(ref.language):
                continue
            grouped.setdefault(ref, []).append(path)
        for ref, paths in grouped.items():
            shown = [display_path(p) for p in paths]
            store = None
            if store_dir is not None:
                from gpulint.projectcache import ProjectCache

                store = ProjectCache(store_dir, ref.language, self.fingerprint())
                stored = store.load(shown)
                if stored is not None:
                    self._stored[ref.language] = (ref, stored["project"], paths, store_dir)
                    self._salts.update(stored["salts"])
                    continue
            from gpulint import supervisor

            frontend = ref.load()
            if not hasattr(frontend, "project_json"):
                store = None  # a project with no JSON form is built every run (and in place)
            elif background and supervisor.CAN_FORK:
                build = supervisor.Background(
                    self._project_in_background,
                    ref,
                    paths,
                    shown,
                    store_dir,
                    store,
                    budget=PROJECT_TIME_BUDGET_S,
                )
                self._building[ref.language] = (build, ref, paths, store_dir)
                continue
            self._build_project(ref, paths, shown, store_dir, store)

    @property
    def building(self) -> frozenset[str]:
        """The languages whose project is being built in the background."""
        return frozenset(self._building)

    def await_projects(self) -> None:
        """Wait for the projects being built in the background and take them as if from the
        project cache (`resolve_projects` turns them into objects); one that failed leaves
        its files judged alone, and the run says so."""
        while self._building:
            language, (build, ref, paths, store_dir) = self._building.popitem()
            outcome = build.result()
            if outcome.status != "ok":
                why = {
                    "timeout": f"took over {PROJECT_TIME_BUDGET_S:g} s",
                    "crash": "the process building it died",
                }.get(outcome.status, str(outcome.value))
                self._index_failed(language, [display_path(p) for p in paths], why)
                continue
            data, salts, errors = outcome.value
            self.errors.extend(errors)
            if data is not None:  # else no project: each file is judged alone
                self._stored[language] = (ref, data, paths, store_dir)
                self._salts.update(salts)

    def abandon_projects(self) -> None:
        """Stop the projects still being built in the background (a run cut short)."""
        while self._building:
            self._building.popitem()[1][0].cancel()

    def _project_in_background(
        self,
        ref: FrontendRef,
        paths: list[Path],
        shown: list[str],
        store_dir: Path | None,
        store: ProjectCache | None,
    ) -> tuple[dict[str, Any] | None, dict[str, str], list[Finding]]:
        """In the forked builder: `_build_project`, and (the project's JSON form or None, the
        salts it stored with it, the internal errors)."""
        project, salts = self._build_project(ref, paths, shown, store_dir, store)
        if project is None:
            return None, {}, self.errors
        return ref.load().project_json(project), salts or {}, self.errors

    def _index_failed(self, language: str, shown: list[str], why: BaseException | str) -> None:
        """A project index that failed (a front-end bug, a builder that died): GPU001."""
        if shown:
            on = f"the {len(shown)} {language} files of this project"
            where = f"the {language} front-end's project index"
            self.errors.append(internal_error(shown[0], where, why, on))

    def _build_project(
        self,
        ref: FrontendRef,
        paths: list[Path],
        shown: list[str],
        store_dir: Path | None,
        store: ProjectCache | None = None,
    ) -> tuple[Any, dict[str, str] | None]:
        """Build the project of `paths` into the settings, and store it where `store` is
        given and every file could be read: (the project or None, the salts stored with it
        or None)."""
        from dataclasses import replace

        frontend = ref.load()
        if store is not None:
            store.snapshot(shown, frontend.index_reads(shown))  # stamped before it is read
        items = []
        for path, name in zip(paths, shown, strict=True):
            try:
                items.append((name, self.read(path)))
            except Unreadable:
                continue  # reported when the file itself is linted
        try:
            project = frontend.index(items, self.settings, store_dir)
        except (ParseError, RecursionError, MemoryError, ValueError):
            return None, None  # no project: each file is judged alone, as in an editor
        except Exception as e:  # a front-end bug: judged alone too, and the run says so
            self._index_failed(ref.language, shown, e)
            return None, None
        self.settings = replace(
            self.settings, projects={**self.settings.projects, ref.language: project}
        )
        if store is not None and len(items) == len(paths):
            try:
                data = frontend.project_json(project)
            except TypeError:
                return project, None  # a project with no JSON form is built every run
            salts = {name: frontend.cache_salt(self.settings, name) for name in shown}
            store.save(data, salts)
            return project, salts
        return project, None

    def resolve_projects(self) -> None:
        """Turn the projects taken from the project cache back into their front-ends' objects:
        before a file is parsed (its rules may ask them), not before (a warm run with nothing
        to lint imports no front-end for them)."""
        from dataclasses import replace

        while self._stored:
            language, (ref, data, paths, store_dir) = self._stored.popitem()
            try:
                project = ref.load().project_from_json(data)
            except (ValueError, TypeError, KeyError, AttributeError):
                # not one this gpulint wrote: built as on a miss (and the salts with it)
                shown = [display_path(p) for p in paths]
                for name in shown:
                    self._salts.pop(name, None)
                self._build_project(ref, paths, shown, store_dir)
                continue
            self.settings = replace(
                self.settings, projects={**self.settings.projects, language: project}
            )

    def find_files(self, paths: Sequence[Path]) -> tuple[list[Path], list[FileResult]]:
        finder = FileFinder(
            self.config, self.extensions, self.respect_gitignore, self.force_exclude
        )
        files = list(finder.find(list(paths)))
        problems = [FileResult(p, [unanalysable(p, why)]) for p, why in finder.problems]
        problems += [FileResult(p, [vendored_note(p, why)]) for p, why in finder.vendored]
        self.named |= finder.named
        return files, problems

    def prepare_project(self, paths: Sequence[Path], files: list[Path]) -> None:
        """The project index for a run over `paths` (found: `files`), before any file is linted."""
        from gpulint import project

        project.reset()
        self.project = _DeferredIndex(
            functools.partial(self._project_entries, list(paths), files), tuple(self.roots)
        )

    def _project_entries(self, paths: Sequence[Path], files: list[Path]) -> list[tuple[Path, str]]:
        return [(p, self.relpath(p)) for p in self._project_files(paths, files)]

    def _project_files(self, paths: Sequence[Path], files: list[Path]) -> list[Path]:
        """The Python files whose functions calls may reach: the folders named, or where files
        are named (`gpulint check train.py`, pre-commit on the changed files) the whole project
        under the configuration's root, found the same way, so they see the same callees as
        `gpulint check .`. Only names here: a module is read when a call reaches it."""
        found = [p for p in files if p.suffix == ".py"]
        if all(p.is_dir() for p in paths):
            return found  # the folders named are the project
        root = Path(os.path.abspath(self.config.root))
        if all(root in Path(os.path.abspath(p)).parents for p in paths):
            finder = FileFinder(self.config, {".py"}, self.respect_gitignore, False)
            found += list(finder.find([root]))
        return list(dict.fromkeys(found))

    def run(self, paths: Sequence[Path], jobs: int = 1, cache: ResultCache | None = None) -> Report:
        self.roots.extend(p for p in paths if p.is_dir())
        files, problems = self.find_files(paths)
        self.index_projects(files, getattr(cache, "directory", None))
        from gpulint.parallel import lint_many

        self.prepare_project(paths, files)
        results = lint_many(self, files, jobs=jobs, cache=cache)
        return Report(problems + results, list(self.errors))


class _DeferredIndex(ProjectIndex):
    """A `ProjectIndex` built the first time it is asked about a module: a run served from
    the cache never needs one, and a file checked alone (an editor, pre-commit) needs one only
    when a call in a step loop reaches into the project, so neither walks the project for it.
    The answer is the one `ProjectIndex.build` gives over the same files."""

    def __init__(
        self, entries: Callable[[], list[tuple[Path, str]]], roots: tuple[Path, ...]
    ) -> None:
        self.roots = roots
        self._entries = entries  # () -> [(path, relpath)]

    def __getattr__(self, name: str) -> Any:
        # Only the built fields are missing; anything else is a plain AttributeError.
        if name not in ("modules", "by_last") or "_entries" not in self.__dict__:
            raise AttributeError(name)
        built = ProjectIndex.build(self._entries(), self.roots)
        self.modules, self.by_last = built.modules, built.by_last
        return getattr(self, name)

    def build_now(self) -> None:
        """Build it here (before worker processes are forked, so they share it)."""
        _ = self.modules


def evidence_notes(
    config: Config,
    extra: Sequence[Path] = (),
    problems: list[tuple[str, str]] | None = None,
    traces: Sequence[dict[str, Any]] = (),
) -> dict[str, str]:
    """The measured-cost sentences rules quote, keyed by `Rule.evidence_key()`: the newest bench
    records under `.gpulint/evidence/`, the configured `evidence` paths and `extra`. The CLI,
    the flake8 plugin and the language server all take them from here, so messages agree.
    A record that cannot be read or breaks the schema is left out, and `(file, why)` lands in
    `problems` (the CLI reports each once, as that file's GPU000)."""
    places = [
        config.root / ".gpulint" / "evidence",
        *(config.root / p for p in config.evidence),
        *extra,
    ]
    found = [p for p in places if os.path.lexists(p)]
    if not found and not traces:
        return {}  # nothing to read: the runtime's modules are not imported for it
    try:
        from gpulint.runtime.evidence import evidence_note, load_records, trace_notes
    except ImportError:
        return {}
    records = load_records(found, problems=problems) if found else []
    chosen = list(traces)  # `check --trace`: the records named on the command line
    if not records and not chosen:
        return {}
    notes = {}
    for rule in all_rules():
        key = rule.evidence_key()
        if key and key not in notes and rule.bench:  # a key says the rule has a bench
            note = evidence_note(records, rule.bench, rule.bench_claim)
            if note:
                notes[key] = note

    def sha_of(path: str) -> str | None:
        try:
            return hashlib.sha256((config.root / path).read_bytes()).hexdigest()
        except OSError:
            return None

    from gpulint.runtime.evidence import trace_statuses

    notes.update(trace_notes(records, sha_of))
    notes.update(trace_statuses(records, sha_of))
    # `check --trace`: the traces named on the command line say what they say about a line,
    # whatever newer record the evidence folder holds
    notes.update(trace_notes(chosen, sha_of))
    notes.update(trace_statuses(chosen, sha_of))
    return notes


def lint_source(
    source: str | bytes, filename: str = "example.py", config: Config | None = None
) -> list[Finding]:
    """Lint one in-memory file (tests, the flake8 plugin, the language server)."""
    linter = Linter(config or Config(root=Path.cwd()))
    data = source.encode("utf-8") if isinstance(source, str) else source
    findings, _ = linter.lint_bytes(filename, data)
    return findings


def iter_enabled(config: Config) -> Iterable[type[AnyRule]]:
    return (r for r in all_rules() if config.is_enabled(r.code, r.tier))


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
