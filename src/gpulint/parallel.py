"""Linting many files: the result cache, worker processes sized to the cores, a time budget per
file enforced from outside the worker (gpulint.supervisor), and deterministic output whatever
order the workers finish in."""

from __future__ import annotations

import gc
import hashlib
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpulint.cache import file_stamp
from gpulint.diagnostics import ENGINE_CODES
from gpulint.safeio import FILE_TIME_BUDGET_S

if TYPE_CHECKING:
    from gpulint.supervisor import Outcome

_worker_linter = None
# Objects allocated between two young-generation collections of Python's cyclic collector while
# workers lint (the default is 700). A parse allocates hundreds of thousands of nodes that live
# until the file is done, and each collection re-examines them; analysis state holds no reference
# cycles (tests/test_speed.py), so reference counting frees every file and the collector has
# nothing to find. Measured on transformers (2,214 files, one process): collections 9,200 -> 299,
# CPU 14.5 s -> 12.5 s with the freeze below, peak memory unchanged (59 MB). At 10,000 the
# collector still took 0.45 s (385 young, 35 middle, 2 full collections, every middle one
# re-walking the live trees); at 100,000: 0.03 s (40, 4, 0), the worker's peak unchanged
# (55 MB). Garbage that is cyclic after all (none is known) waits for 100,000 allocations.
GC_YOUNG_THRESHOLD = 100_000
# A file modified this recently before the run started is not stamped (git's "racily clean"
# entries): an edit within the file system's timestamp granularity would leave the stamp as it
# was, and the old findings would be served. Such a file is hashed on the next run instead.
RACY_NS = 2_000_000_000


def _work(path: Path):
    return _worker_linter.lint_path(path)  # type: ignore[union-attr]


def _failed(path: Path, outcome: Outcome, budget: float):
    """The result of a file whose worker did not answer with a result (supervisor.failure)."""
    from gpulint.results import FileResult, display_path
    from gpulint.supervisor import failure

    shown = display_path(path)
    return FileResult(shown, [failure(shown, outcome, budget)])


def lint_one(linter, path: Path, budget: float = FILE_TIME_BUDGET_S):
    """Lint one file in a worker process, within the time budget."""
    return lint_many(linter, [path], jobs=1, budget=budget)[0]


def lint_many(
    linter, files: list[Path], jobs: int = 1, cache=None, budget: float = FILE_TIME_BUDGET_S
) -> list:
    from gpulint.results import FileResult, display_path

    results: dict[int, FileResult] = {}
    todo: list[tuple[int, Path]] = []
    digests: dict[str, str | None] = {}  # dependency files hashed once per run
    stamps: dict[int, list[int] | None] = {}  # before linting, of the files not served
    started = time.time_ns()
    places = _Places(linter) if cache is not None else None

    def look_up(index: int, path: Path) -> None:
        if cache is not None:
            stamp = _stamp(path, started)
            hit = _from_cache(linter, cache, path, digests, stamp, started, places)
            if hit is not None:
                results[index] = hit
                return
            stamps[index] = stamp
        todo.append((index, path))

    # Files whose project is still being built (Linter.index_projects(background=True)) wait
    # for it, cache lookups included (the project is part of their cache keys), while the
    # workers lint the others.
    building: frozenset[str] = getattr(linter, "building", frozenset())
    waiting: list[tuple[int, Path]] = []
    for index, path in enumerate(files):
        if building and _language(path) in building:
            waiting.append((index, path))
        else:
            look_up(index, path)
    if waiting and (jobs <= 1 or not todo):
        linter.await_projects()  # nothing to lint meanwhile
        for index, path in waiting:
            look_up(index, path)
        waiting = []

    if len(todo) == 1 and not waiting and _unwanted(linter, todo[0][1]):
        # One file that no rule wants (it is not parsed, only read and, for Python, decoded):
        # answered here, as a worker would answer it, without starting one. The commonest
        # call of an editor or a pre-commit hook.
        index, path = todo[0]
        results[index] = linter.lint_path(path)
    elif todo:
        global _worker_linter
        _worker_linter = linter  # the workers are forked with it
        if len(todo) + len(waiting) > 1:
            # Imported and built once here, shared by the forked workers, rather than once in
            # each; one file alone imports only the rules it passes the gates of, and builds
            # the project index only if a call in it reaches into the project.
            _prepare(linter, [path for _, path in todo + waiting])
        workers = min(max(1, jobs), len(todo) + len(waiting))
        if workers > 1:
            # Largest first: the long files start while the short ones fill in behind them,
            # so no worker is left with a large file when the others have run dry (results
            # are placed by index, whatever the order).
            todo.sort(key=lambda item: -_size(item[1]))
        threshold = gc.get_threshold()
        # Workers are forked with what is alive now (modules, rules, the linter): frozen, the
        # collector leaves it out of every full collection in them (and pages stay shared).
        gc.freeze()
        gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
        try:
            # Imported here: one file that no rule wants is answered without it (pickle, signal)
            from gpulint.supervisor import Supervisor

            with Supervisor(workers, budget) as supervisor:

                def tasks():
                    yield from ((path,) for _, path in todo)
                    if not waiting:
                        return
                    # The rest once their project is in: its files are looked up, and linted
                    # by workers forked from then on (they hold it; the earlier ones do not).
                    linter.await_projects()
                    linter.resolve_projects()
                    supervisor.renew()
                    first = len(todo)
                    for index, path in waiting:
                        look_up(index, path)
                    later = todo[first:]
                    later.sort(key=lambda item: -_size(item[1]))
                    todo[first:] = later
                    yield from ((path,) for _, path in later)

                for i, outcome in supervisor.map(_work, tasks()):
                    index, path = todo[i]
                    ok = outcome.status == "ok"
                    results[index] = outcome.value if ok else _failed(path, outcome, budget)
        finally:
            gc.set_threshold(*threshold)
            gc.unfreeze()

    if cache is not None:
        for index, path in todo:
            result = results[index]
            if result.digest and not any(f.code in ENGINE_CODES for f in result.findings):
                # Stamped only if the file looked the same before and after it was linted.
                stamp = stamps.get(index)
                if stamp is not None and _stamp(path, started) != stamp:
                    stamp = None
                cache.put(
                    linter.relpath(path),
                    result.digest,
                    result.findings,
                    result.deps,
                    result.evidence,
                    stamp,
                )
        cache.save()
    return [
        results[i] if i in results else FileResult(display_path(p), []) for i, p in enumerate(files)
    ]


def _language(path: Path) -> str | None:
    from gpulint.registry import registry

    ref = registry().frontend_for(path.name)
    return ref.language if ref is not None else None


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except (OSError, ValueError):
        return 0


def _unwanted(linter, path: Path) -> bool:
    """Whether no rule passes its gates on the file (so linting it parses nothing)."""
    from gpulint.registry import registry
    from gpulint.safeio import Unreadable

    rules_for = getattr(linter, "_rules_for", None)
    ref = registry().frontend_for(path.name)
    if rules_for is None or ref is None:
        return False
    try:
        data = linter.read(path)
    except (Unreadable, OSError):
        return False  # reported by a worker, as any file
    return not rules_for(ref.language, data, linter.prefilter)


def _prepare(linter, paths: list[Path]) -> None:
    from gpulint.registry import registry

    table = registry()
    refs = {ref for p in paths if (ref := table.frontend_for(p.name)) is not None}
    for ref in refs:
        ref.load()
    languages = {ref.language for ref in refs}
    load = getattr(linter, "load_rules", None)
    if load is not None:
        load(languages)
    resolve = getattr(linter, "resolve_projects", None)
    if resolve is not None:
        resolve()
    build = getattr(getattr(linter, "project", None), "build_now", None)
    if build is not None:
        build()


def _deps_unchanged(
    linter, deps: dict[str, str], digests: dict[str, str | None], cache=None, started: int = 0
) -> bool:
    from gpulint.safeio import Unreadable

    for relpath, digest in deps.items():
        if relpath not in digests:
            path = linter.config.root / relpath
            # A dependency that is itself in the cache with its stamp unchanged has the bytes
            # its entry was made from (the same test as for the file itself): not re-read.
            stamp = _stamp(path, started) if cache is not None and started else None
            recorded = cache.stamped(relpath, stamp) if stamp is not None else None
            if recorded is not None:
                digests[relpath] = recorded.split(":", 1)[0]
                continue
            try:
                digests[relpath] = hashlib.sha256(linter.read(path)).hexdigest()
            except (Unreadable, OSError):
                digests[relpath] = None
        if digests[relpath] != digest:
            return False
    return True


def _stamp(path: Path, started: int) -> list[int] | None:
    """The file's stamp (cache.file_stamp) from an lstat, which opens nothing (a FIFO is not
    read); None for anything but a regular file (a link goes the checked way) or a file
    modified within RACY_NS of the run's start."""
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_mtime_ns > started - RACY_NS:
        return None
    return file_stamp(st)


class _Places:
    """A file's `display_path` and `linter.relpath`, with the working folder and the root
    read once per run rather than once per file (a getcwd and an abspath each)."""

    def __init__(self, linter) -> None:
        self.cwd = os.getcwd()
        self.root = str(linter.config.root)

    def __call__(self, path: Path) -> tuple[str, str]:
        from gpulint.pathutil import below

        name = os.fspath(path)
        # os.path.abspath, without its getcwd
        absolute = os.path.normpath(name if os.path.isabs(name) else os.path.join(self.cwd, name))
        shown, relpath = below(absolute, self.cwd), below(absolute, self.root)
        if shown is None or relpath is None:
            posix = Path(path).as_posix()
            shown = posix if shown is None else shown
            relpath = posix if relpath is None else relpath
        return shown, relpath


def _from_cache(
    linter,
    cache,
    path: Path,
    digests: dict[str, str | None],
    stamp: list[int] | None = None,
    started: int = 0,
    places: _Places | None = None,
):
    from gpulint.results import FileResult, display_path
    from gpulint.safeio import Unreadable

    if places is not None:
        shown, relpath = places(path)
    else:
        shown, relpath = display_path(path), linter.relpath(path)
    # The warm path: the stamp recorded with the entry says the bytes are those it was made
    # from, so they are neither read nor hashed (only the salt, other files' part, is redone).
    recorded = cache.stamped(relpath, stamp) if stamp is not None else None
    if recorded is not None:
        digest = linter.salted(shown, recorded.split(":", 1)[0])
    else:
        try:
            data = linter.read(path)  # the same checks and cap as an uncached read
        except Unreadable:
            return None  # linted (and reported) the ordinary way
        digest = linter.digest(shown, data)
    findings = cache.get(relpath, digest, shown)
    if findings is None:
        return None
    deps = cache.deps(relpath)
    if deps and not _deps_unchanged(linter, deps, digests, cache, started):
        return None  # a callee in another file changed: its callers are linted again
    if recorded is None and stamp is not None:
        cache.restamp(relpath, stamp)  # hashed and unchanged: the next run need not hash it
    return FileResult(shown, findings, digest, parsed=False, cached=True)
