"""Work on a stranger's files under a budget that the work cannot dodge.

Each task runs in a forked worker process; the supervisor (the calling process) waits for the
answer with a deadline, and a worker that is late is killed (SIGKILL) and replaced: no `except`
inside a rule, a parser or a C extension can swallow that, where an in-process alarm's exception
can be caught by any broad handler (and firing inside `ast.parse` it raised SystemError). A
worker that dies (a segfault in a parser, the memory limit) costs only its task. Each worker's
address space is capped too (`MEMORY_HEADROOM` over what the supervisor had at the fork), so a
bomb ends as a MemoryError in that worker, not as the OOM killer's choice on a CI machine.

Workers are forked, so they start with the supervisor's state (the linter and its rules) already
in memory and tasks carry only their arguments. The CLI, the flake8 plugin and the language
server all use this. Where `fork` does not exist (Windows) tasks run in-process, unbudgeted.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from gpulint.safeio import FILE_TIME_BUDGET_S

if TYPE_CHECKING:  # imported where a worker is started: a run that forks none does not pay it
    from multiprocessing.connection import Connection

MEMORY_HEADROOM = 3 * 1024**3  # bytes of address space a worker may add to what it inherited
CAN_FORK = hasattr(os, "fork")


@dataclass
class Outcome:
    """How one task ended: `ok` (value), `error` (the task raised: text), `timeout`, `crash`."""

    status: str
    value: Any = None


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _enter_child(keep: int) -> None:
    """A forked child's set-up: Ctrl-C left to the supervisor, only its own line to it kept
    open, its address space capped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Drop inherited descriptors (a flake8 pool's pipes, an editor's socket): a worker holds
    # only its own line to the supervisor.
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    used = _address_space()
    if used is not None:
        try:
            import resource

            limit = used + MEMORY_HEADROOM
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass


def _run(func: Callable, args: tuple) -> Outcome:
    try:
        return Outcome("ok", func(*args))
    except MemoryError:
        return Outcome("error", "out of memory")
    except BaseException as e:  # noqa: BLE001 - reported as the task's own failure
        return Outcome("error", f"{type(e).__name__}: {e}")


def _answer(conn: Connection, outcome: Outcome) -> bool:
    """Send `outcome` back; False if the line is gone."""
    try:
        conn.send(outcome)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        conn.send(Outcome("error", f"unpicklable result: {e}"))
    except (OSError, MemoryError):
        return False
    return True


def _serve(conn: Connection, keep: int) -> None:
    """The worker's loop: run each (function, args) it is sent, send back an Outcome."""
    _enter_child(keep)
    while True:
        try:
            func, args = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as e:  # a task that could not be unpickled
            outcome = Outcome("error", f"{type(e).__name__}: {e}")
        else:
            outcome = _run(func, args)
        if not _answer(conn, outcome):
            return


class _Worker:
    """A forked child on a line of its own: by default a worker serving tasks (`_serve`),
    or `main` run once on the line."""

    def __init__(self, main: Callable[[Connection], object] | None = None) -> None:
        from multiprocessing.connection import Pipe

        parent, child = Pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's side, measured by the tests' outcomes
            code = 0
            try:
                parent.close()
                if main is None:
                    _serve(child, child.fileno())
                else:
                    main(child)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        child.close()
        self.pid = pid
        self.conn = parent

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.conn.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def hang_up(self) -> None:
        """Close the worker's line: it exits at once if idle (its next read ends)."""
        self.conn.close()

    def reap(self, deadline: float) -> None:
        """Wait for the hung-up worker to exit, until `deadline`; then kill it. Polled with
        short, growing naps: an idle worker exits within a millisecond or so of its hang-up."""
        nap = 0.0002
        while True:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(nap)
            nap = min(nap * 2, 0.01)
        self.kill()


class Supervisor:
    """A set of forked workers that run tasks, each within `budget` seconds."""

    def __init__(self, workers: int = 1, budget: float = FILE_TIME_BUDGET_S):
        self.size = max(1, workers)
        self.budget = budget
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._stale: set[_Worker] = set()  # busy at the last `renew`: hung up once they answer
        self._hung: list[_Worker] = []  # hung up, reaped at `close`

    def _worker(self) -> _Worker:
        if self._idle:
            return self._idle.pop()
        worker = _Worker()
        self._all.add(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        self._all.discard(worker)
        self._stale.discard(worker)
        worker.kill()

    def _hang_up(self, worker: _Worker) -> None:
        self._stale.discard(worker)
        worker.hang_up()
        self._hung.append(worker)

    def renew(self) -> None:
        """Tasks handed over from now on run in workers forked with the caller's state as it
        is now (a project index that arrived meanwhile): idle workers are hung up, busy ones
        once they answer."""
        for worker in self._idle:
            self._hang_up(worker)
        self._idle.clear()
        self._stale = self._all.difference(self._hung)

    def map(
        self, func: Callable, tasks: Iterable[tuple], budget: float | None = None
    ) -> Iterator[tuple[int, Outcome]]:
        """(index, Outcome) for each task, in the order they finish. Tasks are taken from
        `tasks` only as workers come free: an iterator may wait for something, or `renew`,
        between two of them while the workers go on."""
        budget = self.budget if budget is None else budget
        todo = enumerate(tasks)
        if not CAN_FORK:
            for index, args in todo:
                try:
                    yield index, Outcome("ok", func(*args))
                except Exception as e:  # noqa: BLE001
                    yield index, Outcome("error", f"{type(e).__name__}: {e}")
            return
        from multiprocessing.connection import wait

        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        more = True
        while more or busy:
            while more and len(busy) < self.size:
                step = next(todo, None)
                if step is None:
                    more = False
                    break
                index, args = step
                worker = self._worker()
                try:
                    worker.conn.send((func, args))
                except (OSError, pickle.PicklingError, TypeError, AttributeError) as e:
                    self._retire(worker)
                    yield index, Outcome("error", f"cannot hand over the task: {e}")
                    continue
                busy[worker.conn] = (worker, index, time.monotonic() + budget)
            if not busy:
                continue
            wait_s = max(0.0, min(d for _, _, d in busy.values()) - time.monotonic())
            for ready in wait(list(busy), timeout=wait_s):
                conn = cast("Connection", ready)  # wait() returns some of the objects it was given
                worker, index, _ = busy.pop(conn)
                try:
                    outcome = conn.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    self._retire(worker)  # it died: a segfault, the memory limit, os._exit
                    yield index, Outcome("crash")
                    continue
                if worker in self._stale:
                    self._hang_up(worker)  # forked before a `renew`
                else:
                    self._idle.append(worker)
                yield index, outcome
            now = time.monotonic()
            for conn, (worker, index, deadline) in list(busy.items()):
                if deadline <= now:
                    del busy[conn]
                    self._retire(worker)  # killed from outside: nothing in it can object
                    yield index, Outcome("timeout")

    def call(self, func: Callable, *args: Any, budget: float | None = None) -> Outcome:
        return next(self.map(func, [args], budget))[1]

    def close(self) -> None:
        # Every idle worker is hung up before any is waited for: they exit side by side. A busy
        # one (a run cut short) is killed.
        for worker in self._all.difference(self._idle, self._hung):
            worker.kill()
        for worker in self._idle:
            worker.hang_up()
        deadline = time.monotonic() + 2.0
        for worker in (*self._idle, *self._hung):
            worker.reap(deadline)
        self._all.clear()
        self._idle.clear()
        self._stale.clear()
        self._hung.clear()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Background:
    """One call run now in a forked process of its own, its Outcome asked for later: work the
    caller need not wait for yet (a project index built while the workers lint other files).
    The child starts with the caller's state, so nothing is sent to it; only the result comes
    back."""

    def __init__(self, func: Callable, *args: Any, budget: float = FILE_TIME_BUDGET_S):
        self.deadline = time.monotonic() + budget
        self._outcome: Outcome | None = None

        def main(conn: Connection) -> None:
            _enter_child(conn.fileno())
            _answer(conn, _run(func, args))

        self._child = _Worker(main)

    def result(self) -> Outcome:
        """The call's Outcome: waits for it until the budget is spent (then `timeout`)."""
        if self._outcome is None:
            from multiprocessing.connection import wait

            child = self._child
            if not wait([child.conn], timeout=max(0.0, self.deadline - time.monotonic())):
                child.kill()
                self._outcome = Outcome("timeout")
            else:
                try:
                    self._outcome = child.conn.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    self._outcome = Outcome("crash")
                child.hang_up()
                child.reap(time.monotonic() + 2.0)
        return self._outcome

    def cancel(self) -> None:
        """Stop the call if it has not answered (a run cut short): killed, never waited for."""
        if self._outcome is None:
            self._child.kill()
            self._outcome = Outcome("error", "cancelled")


# -- one file's bytes, for the flake8 plugin and the language server --------------------------
# Each linter gets its own worker, forked once it is known (so the worker holds it); a handful
# are kept (the configurations open in an editor), the oldest retired first.
_KEEP = 4
_linters: dict[int, Any] = {}
_supervisors: dict[int, tuple[Supervisor, Any]] = {}


def _lint_bytes_task(key: int, shown: str, data: bytes, relpath: str | None):
    linter = _linters[key]
    findings, _ = linter.lint_bytes(shown, data, relpath, prefilter=linter.prefilter)
    return findings


def lint_bytes_budgeted(
    linter, shown: str, data: bytes, relpath: str | None = None, budget: float | None = None
) -> list:
    """`linter.lint_bytes(...)` findings, computed in a supervised worker: a file over the
    budget, or one that kills its worker, is that file's GPU000 and the caller goes on."""
    import threading

    key = id(linter)
    entry = _supervisors.get(key)
    if entry is None:
        while len(_supervisors) >= _KEEP:
            old = next(iter(_supervisors))
            _supervisors.pop(old)[0].close()
            _linters.pop(old, None)
        _linters[key] = linter  # held here, so its id is not reused while its worker lives
        entry = _supervisors[key] = (Supervisor(1), threading.Lock())
    supervisor, lock = entry
    with lock:
        outcome = supervisor.call(_lint_bytes_task, key, shown, data, relpath, budget=budget)
    if outcome.status == "ok":
        return outcome.value
    return [failure(shown, outcome, supervisor.budget if budget is None else budget)]


def failure(shown: str, outcome: Outcome, budget: float):
    """The finding for a file whose worker did not answer with a result: over the budget, out
    of memory or killed, the file's GPU000 (the input is at fault, or too large); an exception
    that escaped the engine, gpulint's own GPU001."""
    from gpulint.diagnostics import internal_error, unanalysable

    if outcome.status == "timeout":
        return unanalysable(shown, f"analysis took over {budget:g} s; skipped")
    if outcome.status == "crash":
        return unanalysable(shown, "the analyser crashed on this file; skipped")
    if outcome.value == "out of memory":
        return unanalysable(shown, "analysis ran out of memory; skipped")
    return internal_error(shown, "the engine", str(outcome.value))
