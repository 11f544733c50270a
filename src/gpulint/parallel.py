"""Linting many files: the result cache, a process pool sized to the cores, a time budget per
file, and deterministic output whatever order the workers finish in."""

from __future__ import annotations

import hashlib
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from gpulint.diagnostics import unanalysable

FILE_TIME_BUDGET_S = 30  # a pathological file is reported and skipped, never hangs the run

_worker_linter = None


class _OverBudget(Exception):
    pass


def _alarm(signum, frame):
    raise _OverBudget()


def lint_one(linter, path: Path, budget: int = FILE_TIME_BUDGET_S):
    """Lint one file within the time budget (SIGALRM, main thread of this process)."""
    from gpulint.engine import FileResult, display_path

    use_alarm = budget > 0 and hasattr(signal, "SIGALRM")
    if use_alarm:
        try:
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(budget)
        except ValueError:  # not the main thread: no budget rather than no lint
            use_alarm = False
    try:
        return linter.lint_path(path)
    except _OverBudget:
        shown = display_path(path)
        return FileResult(shown, [unanalysable(shown, f"analysis took over {budget} s; skipped")])
    finally:
        if use_alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


def _init_worker(linter) -> None:
    global _worker_linter
    _worker_linter = linter


def _work(path: Path):
    return lint_one(_worker_linter, path)


def lint_many(linter, files: list[Path], jobs: int = 1, cache=None) -> list:
    from gpulint.engine import FileResult, display_path

    results: dict[int, FileResult] = {}
    todo: list[tuple[int, Path]] = []
    for index, path in enumerate(files):
        if cache is not None:
            hit = _from_cache(linter, cache, path)
            if hit is not None:
                results[index] = hit
                continue
        todo.append((index, path))

    if jobs > 1 and len(todo) > 8:
        lost = _pool(linter, todo, jobs, results)
    else:
        lost = []
        for index, path in todo:
            results[index] = lint_one(linter, path)
    for index, path in lost:
        # The worker died on this file (or beside it): retry alone, in a fresh process.
        results[index] = _isolated(linter, path)

    if cache is not None:
        for index, path in todo:
            result = results[index]
            if result.digest and not any(f.code == "GPU000" for f in result.findings):
                cache.put(linter.relpath(path), result.digest, result.findings)
        cache.save()
    return [
        results[i] if i in results else FileResult(display_path(p), []) for i, p in enumerate(files)
    ]


def _from_cache(linter, cache, path: Path):
    from gpulint.engine import FileResult, display_path
    from gpulint.safeio import Unreadable

    try:
        data = linter.read(path)  # the same checks and cap as an uncached read
    except Unreadable:
        return None  # linted (and reported) the ordinary way
    digest = hashlib.sha256(data).hexdigest()
    shown = display_path(path)
    findings = cache.get(linter.relpath(path), digest, shown)
    if findings is None:
        return None
    return FileResult(shown, findings, digest, parsed=False, cached=True)


def _pool(linter, todo, jobs, results) -> list:
    lost = []
    chunk = max(1, min(32, len(todo) // (jobs * 8) or 1))
    try:
        with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(linter,)) as pool:
            paths = [p for _, p in todo]
            for (index, _), result in zip(
                todo, pool.map(_work, paths, chunksize=chunk), strict=True
            ):
                results[index] = result
    except BrokenProcessPool:
        lost = [(i, p) for i, p in todo if i not in results]
    return lost


def _isolated(linter, path: Path):
    from gpulint.engine import FileResult, display_path

    try:
        with ProcessPoolExecutor(1, initializer=_init_worker, initargs=(linter,)) as pool:
            return pool.submit(_work, path).result()
    except BrokenProcessPool:
        shown = display_path(path)
        return FileResult(
            shown, [unanalysable(shown, "the analyser crashed on this file; skipped")]
        )
