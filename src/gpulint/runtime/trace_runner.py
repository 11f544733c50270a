"""The child process behind ``gpulint trace``: runs the user's program in-process and records.

``python -m gpulint.runtime.trace_runner CONFIG.json``. The parent (``trace_cli``) starts it in a
process group of its own, enforces the timeout and reads what it left in the recording folder
(always under ``.gpulint/trace/``); nothing here prints to stdout, so the program's own output
passes through untouched. Progress goes to stderr as ``[gpulint trace] ...``.

What it installs, before the program's first line runs:

- a step counter: a global optimizer step post-hook (the first optimizer that steps defines the
  step; ``gpulint.trace.step()`` marks steps instead once the program calls it);
- at the end of step ``warmup - 1``: ``torch.cuda.set_sync_debug_mode("warn")`` (every warning
  is recorded with its stack), ``torch.profiler`` with a schedule of one warm-up step and
  ``steps`` active steps (CPU ops with shapes, CUDA runtime calls, kernels, memcpys), and a
  TorchFunctionMode that wraps each torch call issued from the checked tree in a
  ``record_function("gpulint@<path>:<line>#<op>")`` range: the exact line of the innermost frame
  inside the tree, which the profiler's own Python stacks do not give;
- after the last active step: the trace is exported, and the program is stopped by raising
  ``StopTrace`` (a BaseException, so ``except Exception`` in the program does not swallow it).

In ``untraced`` mode only the step counter runs, and the window's wall time (CUDA-synchronised at
its two ends, nowhere else) is recorded: the baseline the traced window's overhead is stated
against.

Sampling (``every`` > 1) follows a ``Plan``: which program steps the profiler records, which are
its warm-up steps, and what the profiler does on every other step (nothing). ``spread`` records
one step at the end of each cycle of ``every`` steps, and has kineto tear CUPTI down after each
cycle (``TEARDOWN_CUPTI=1``: without it CUPTI stays attached to the process after the first
cycle and every later unrecorded step pays for it); ``tail`` records the ``steps`` steps at the
end of the window, one after the other, so no unrecorded step ever runs with CUPTI attached.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import pathlib
import re
import runpy
import sys
import threading
import time
import traceback
import types
import warnings
from typing import Any, TextIO

SYNC_WARNING = "called a synchronizing CUDA operation"
ANNOTATION = "gpulint@"
CODE_FILE = (
    "<gpulint -c>"  # `python -c` code runs under this file name (unique: dataclasses use <string>)
)
# Tensor attribute reads that never touch the GPU: not worth a profiler range each.
_QUIET = frozenset(
    {
        "__get__",
        "size",
        "dim",
        "stride",
        "numel",
        "is_contiguous",
        "data_ptr",
        "element_size",
        "__len__",
        "__hash__",
        "__eq__",
        "storage_offset",
        "is_floating_point",
        "requires_grad_",
    }
)


# What the profiler does on a program step (its schedule, kept free of torch so it can be tested).
NONE, WARMUP, RECORD, SAVE = "none", "warmup", "record", "save"
SAMPLES = ("spread", "tail")
DEFAULT_SAMPLE = "spread"


class Plan:
    """Which program steps the profiler records, and what it does on each step.

    Program steps count from 1 (the first ``optimizer.step()``); the window is steps
    ``warmup + 1 .. warmup + steps * every``. The profiler object is started at the end of step
    ``start_at`` (the step before its first action can fall); its own step ``j`` is program step
    ``start_at + 1 + j``.

    - ``every == 1``: one warm-up step (the last warm-up step, when there are two or more), then
      the ``steps`` window steps recorded, one trace.
    - ``spread``: cycles of ``every`` steps, each ending in one profiler warm-up step and one
      recorded step (``trace-<i>``); nothing on the others.
    - ``tail``: the window's last ``steps`` steps recorded one after the other (one trace), after
      one warm-up step; nothing before: the window's first steps run as the untraced program.
    """

    def __init__(self, warmup: int, steps: int, every: int = 1, sample: str = DEFAULT_SAMPLE):
        self.warmup, self.steps = int(warmup), int(steps)
        self.every = max(int(every or 1), 1)
        self.sample = sample if sample in SAMPLES else DEFAULT_SAMPLE
        self.span = self.steps * self.every
        self.total = self.warmup + self.span
        w = self.warmup
        self.start_at = w - 1 if w >= 2 else w
        if self.every == 1:
            self.recorded = list(range(w + 1, w + self.steps + 1))
            self.warm = [w] if w >= 2 else []
        elif self.sample == "tail":
            self.recorded = list(range(self.total - self.steps + 1, self.total + 1))
            self.warm = [self.recorded[0] - 1]
        else:
            self.recorded = [w + i * self.every for i in range(1, self.steps + 1)]
            self.warm = [r - 1 for r in self.recorded]
        self._recorded, self._warm = set(self.recorded), set(self.warm)

    @property
    def cycles(self) -> bool:
        """One trace per recorded step (``spread``), rather than one trace of them all."""
        return self.every > 1 and self.sample == "spread"

    def action(self, step: int) -> str:
        if step in self._recorded:
            return SAVE if self.cycles or step == self.recorded[-1] else RECORD
        return WARMUP if step in self._warm else NONE

    def schedule(self, j: int) -> str:
        """The action of the profiler's own step ``j`` (a ``torch.profiler`` schedule)."""
        return self.action(self.start_at + 1 + j)

    def recording(self, step: int) -> bool:
        return self.action(step) in (RECORD, SAVE)


class StopTrace(BaseException):
    """Raised into the program once the window is recorded: stops it cleanly."""


_RUNNER: Runner | None = None


def step() -> None:
    """Mark the end of one step (for programs whose step is not an ``optimizer.step()``)."""
    if _RUNNER is not None:
        _RUNNER.on_step(explicit=True)


def say(msg: str) -> None:
    print(f"[gpulint trace] {msg}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.out = pathlib.Path(cfg["out"])
        if (cfg.get("target") or {}).get("launcher") is not None:
            # one recording per rank of a torchrun job
            self.out = self.out / f"rank{int(os.environ.get('RANK', '0'))}"
            self.out.mkdir(parents=True, exist_ok=True)
        # `python -c CODE`: the code's frames are reported as the file "-c"
        self.code = (cfg.get("target") or {}).get("kind") == "code"
        self.root = os.path.realpath(cfg["root"])
        self.mode = cfg.get("mode", "traced")
        self.steps = int(cfg["steps"])
        # Sampling: profile one step in every `every` (the others run with the profiler idle), so
        # the window is steps * every long and the program pays the profiler on a few steps only.
        self.every = max(int(cfg.get("every", 1) or 1), 1)
        self.span = self.steps * self.every
        self.profiled: list[int] = []  # the program steps the profiler recorded
        self.pending: list[Any] = []  # the recorded cycles, exported once the window is over
        self.warmup = int(cfg["warmup"])
        self.plan = Plan(self.warmup, self.steps, self.every, cfg.get("sample") or DEFAULT_SAMPLE)
        # CUPTI torn down after each recorded cycle (spread sampling only: one cycle has nothing
        # after it worth detaching for). kineto reads TEARDOWN_CUPTI when a trace stops; a value
        # the user set is theirs, and torch itself sets "0" where teardown would crash (CUDA
        # graphs on CUDA < 12.6).
        # At least two unrecorded steps between cycles: cuptiFinalize runs at the program's next
        # CUDA call after a trace stops, and must be done before the next warm-up attaches again
        # (older kinetos do not wait for it).
        self.cupti_teardown = (
            bool(cfg.get("cupti_teardown", True)) and self.plan.cycles and self.every >= 4
        )
        self.count = 0
        self.explicit = False
        self.first_optimizer: int | None = None
        # torch, its profiler and the function mode: imported in the traced process only
        self.torch: Any = None
        self.prof: Any = None
        self.fmode: Any = None
        self.window_start: float | None = None
        self.window_end: float | None = None
        self.step_ends: list[float] = []
        self._in_tree: dict[str, str | None] = {}
        self._syncs: TextIO | None = None
        self._local = threading.local()
        self.tracing = False
        # Parts of the tracing that can be left out, to say what the overhead is made of.
        self.lines = bool(cfg.get("lines", True))
        self.shapes = bool(cfg.get("shapes", True))
        self.sync_debug = bool(cfg.get("sync_debug", True))
        self.lines_off = ""  # why the line ranges were left out, when they were
        self._line_mode: Any = None  # the TorchFunctionMode class, once tracing starts

    # ---- files ------------------------------------------------------------------------------

    def status(self, phase: str, **extra) -> None:
        data = {"phase": phase, "steps_seen": self.count, "time": time.time(), **extra}
        tmp = self.out / "status.json.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(self.out / "status.json")

    # ---- where a frame belongs ---------------------------------------------------------------

    def rel(self, filename: str) -> str | None:
        """The path of ``filename`` relative to the checked tree, or None outside it."""
        if filename in self._in_tree:
            return self._in_tree[filename]
        rel = None
        if filename == CODE_FILE and self.code:
            rel = "-c"
        elif filename and not filename.startswith("<"):
            real = os.path.realpath(filename)
            if real.startswith(self.root + os.sep):
                r = real[len(self.root) + 1 :]
                parts = r.split(os.sep)
                if not any(p in ("site-packages", "dist-packages", ".venv", "venv") for p in parts):
                    rel = "/".join(parts)
        self._in_tree[filename] = rel
        return rel

    def user_frame(self, frame) -> tuple[str, int] | None:
        while frame is not None:
            rel = self.rel(frame.f_code.co_filename)
            if rel is not None:
                return rel, frame.f_lineno
            frame = frame.f_back
        return None

    # ---- steps -------------------------------------------------------------------------------

    def optimizer_hook(self, optimizer, args, kwargs) -> None:
        if self.explicit:
            return
        if self.first_optimizer is None:
            self.first_optimizer = id(optimizer)
        if id(optimizer) == self.first_optimizer:
            self.on_step()

    def on_step(self, explicit: bool = False) -> None:
        if explicit and not self.explicit:
            self.explicit = True
        if self.explicit and not explicit:
            return
        self.count += 1
        now = time.perf_counter()
        self.step_ends.append(now)
        n, w, total = self.count, self.warmup, self.plan.total
        torch = self.torch
        if n == w:
            # The window starts here: the GPU drained, so the window's time is its own.
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.window_start = time.perf_counter()
        if n == total:
            # The window ends here, before the profiler's export (seconds) starts.
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.window_end = time.perf_counter()
        if self.mode == "traced":
            if self.prof is not None:
                self.prof.step()
                if self.every > 1 and n < total:
                    self.sample(n + 1)
            elif n == self.plan.start_at:
                # One profiler warm-up step where there is room for it (CUPTI's start-up and the
                # first ranges stay out of the window); none with --warmup 0 or 1.
                self.start_tracing()
        phase = "warmup" if n < w else "window"
        if n <= w or n == total or n % 5 == 0:
            say(f"step {n}/{total} ({phase if n < total else 'done'})")
        self.status(phase, total=total)
        if n == total:
            self.finish()
            raise StopTrace

    # ---- tracing -----------------------------------------------------------------------------

    def sample(self, step: int) -> None:
        """Record the coming step only when the profiler records it (``--every`` > 1)."""
        on = self.plan.recording(step)
        if on:
            self.profiled.append(step)
        if on != self.tracing:
            self.tracing = on
            if self.torch.cuda.is_available() and self.sync_debug:
                self.torch.cuda.set_sync_debug_mode("warn" if on else 0)
            # The line mode only on recorded steps: on the others each torch call would still
            # pass through it. Toggled only while it is the innermost mode (the program's own
            # modes, entered after it, are never popped from under them).
            if on and self.lines and self.fmode is None and self._mode_depth() == 0:
                self.fmode = self._line_mode()
                self.fmode.__enter__()
            elif not on and self.fmode is not None and self._mode_depth() == 1:
                self.fmode.__exit__(None, None, None)
                self.fmode = None

    def _mode_depth(self) -> int:
        try:
            return int(self.torch._C._len_torch_function_stack())
        except Exception:
            return -1

    def start_tracing(self) -> None:
        torch = self.torch
        from torch.overrides import TorchFunctionMode
        from torch.profiler import ProfilerAction, ProfilerActivity, profile, record_function

        runner = self

        class LineMode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = getattr(func, "__name__", "")
                if not runner.tracing or not runner.lines or name in _QUIET:
                    return func(*args, **kwargs)
                where = runner.user_frame(sys._getframe(1))
                if where is None:
                    return func(*args, **kwargs)
                op = getattr(func, "__qualname__", name) or name
                stack = runner._local.__dict__.setdefault("ops", [])
                stack.append((where, op))
                try:
                    with record_function(f"{ANNOTATION}{where[0]}:{where[1]}#{op}"):
                        return func(*args, **kwargs)
                finally:
                    stack.pop()

        if self.lines and _compiled_anything():
            # A TorchFunctionMode in the window would change what dynamo guards on: every
            # compiled graph would recompile, and break at the mode's own frame walk.
            self.lines = False
            self.lines_off = "the program uses torch.compile"
            say("torch.compile in use: line ranges off (they would make dynamo recompile)")
        self._patch_dataloader(record_function)
        # CPU activity stays: without it the profiler records neither its step marks nor the
        # line ranges (seen on an H200, torch 2.11), and no kernel could be given a line.
        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        if self.cupti_teardown:
            os.environ.setdefault("TEARDOWN_CUPTI", "1")
        actions = {
            NONE: ProfilerAction.NONE,
            WARMUP: ProfilerAction.WARMUP,
            RECORD: ProfilerAction.RECORD,
            SAVE: ProfilerAction.RECORD_AND_SAVE,
        }
        plan = self.plan
        self.prof = profile(
            activities=acts,
            schedule=lambda j: actions[plan.schedule(j)],
            on_trace_ready=self.keep if plan.cycles else self.export,
            record_shapes=self.shapes,
            with_stack=False,
        )
        self._syncs = (self.out / "syncs.jsonl").open("a", encoding="utf-8")
        self._install_warnings()
        if torch.cuda.is_available() and self.sync_debug and self.every == 1:
            torch.cuda.set_sync_debug_mode("warn")
        self.tracing = self.every == 1
        self._line_mode = LineMode
        if self.lines and self.every == 1:
            self.fmode = LineMode()
            self.fmode.__enter__()
        self.prof.start()
        say(
            f"tracing: {len(plan.warm)} profiler warm-up step(s), {self.steps} active step(s)"
            + ("" if self.every == 1 else f" at steps {', '.join(map(str, plan.recorded))}")
            + (" (CUPTI torn down after each)" if self.cupti_teardown else "")
            + ("" if torch.cuda.is_available() else " (no CUDA device: CPU only)")
        )

    def _patch_dataloader(self, record_function) -> None:
        """DataLoader iteration is no torch call: give ``__next__``/``__iter__`` a range too."""
        from torch.utils.data import dataloader as dl

        runner = self

        def wrap(owner, attr, op):
            orig = getattr(owner, attr)

            def wrapper(self_, *a, **k):
                if not runner.tracing:
                    return orig(self_, *a, **k)
                where = runner.user_frame(sys._getframe(1))
                if where is None:
                    return orig(self_, *a, **k)
                with record_function(f"{ANNOTATION}{where[0]}:{where[1]}#{op}"):
                    return orig(self_, *a, **k)

            setattr(owner, attr, wrapper)

        wrap(dl._BaseDataLoaderIter, "__next__", "DataLoader.__next__")
        wrap(dl.DataLoader, "__iter__", "DataLoader.__iter__")

    def _install_warnings(self) -> None:
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}.*")
        previous = warnings.showwarning
        runner = self

        def showwarning(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            text = str(message)
            if SYNC_WARNING not in text or not runner.tracing:
                return previous(message, category, filename, lineno, file, line)
            runner.record_sync(text)

        warnings.showwarning = showwarning

    def record_sync(self, text: str) -> None:
        # The frames from the program's entry to the warning's origin, read off the frame chain
        # (traceback.extract_stack would also read every source line: a program syncing
        # hundreds of times a step pays for that on each one).
        frames: list[types.FrameType] = []
        f: types.FrameType | None = sys._getframe(2)  # skip record_sync and showwarning
        while f is not None and len(frames) < 200:
            frames.append(f)
            f = f.f_back
        stack = []
        for fr in reversed(frames):
            code = fr.f_code
            rel = self.rel(code.co_filename)
            stack.append(
                [rel or _short(code.co_filename), fr.f_lineno, code.co_name, rel is not None]
            )
        ops = getattr(self._local, "ops", None) or []
        op = ops[-1][1] if ops else None
        entry = {"step": self.count + 1, "op": op, "stack": stack[-40:], "message": text[:200]}
        if self._syncs is not None:  # opened when tracing starts, before any warning is recorded
            self._syncs.write(json.dumps(entry) + "\n")

    def keep(self, prof) -> None:
        """A sampled cycle ended: keep its events; they are written after the window."""
        self.pending.append(prof.profiler)

    def export(self, prof) -> None:
        path = self.out / "trace.json"
        prof.export_chrome_trace(str(path))
        with path.open("rb") as src, gzip.open(self.out / "trace.json.gz", "wb") as dst:
            dst.write(src.read())
        path.unlink()

    def finish(self) -> None:
        torch = self.torch
        if self.mode == "traced" and self.prof is not None:
            self.tracing = False
            torch.cuda.set_sync_debug_mode(0) if torch.cuda.is_available() else None
            if self.fmode is not None:
                self.fmode.__exit__(None, None, None)
                self.fmode = None
            self.prof.stop()
            if self.plan.cycles:
                for i, cycle in enumerate(self.pending):
                    path = self.out / "trace.json"
                    cycle.export_chrome_trace(str(path))
                    with (
                        path.open("rb") as src,
                        gzip.open(self.out / f"trace-{i}.json.gz", "wb") as dst,
                    ):
                        dst.write(src.read())
                    path.unlink()
            elif not (self.out / "trace.json.gz").exists():
                self.export(self.prof)
            if self._syncs:
                self._syncs.close()
        window = {
            "mode": self.mode,
            "steps": self.span,
            "warmup": self.warmup,
            "every": self.every,
            "lines": self.lines,
            "lines_off": self.lines_off or None,
            "profiled": self.profiled if self.every > 1 else None,
            # what each window step was: the profiler's warm-up steps, and how it sampled
            "sample": self.plan.sample if self.every > 1 else None,
            "warm_steps": [s for s in self.plan.warm if s > self.warmup]
            if self.mode == "traced"
            else [],
            "cupti_teardown": self.mode == "traced"
            and self.cupti_teardown
            and os.environ.get("TEARDOWN_CUPTI") == "1",
            "window_s": (self.window_end or 0) - (self.window_start or 0),
            "step_wall_s": [
                b - a for a, b in zip(self.step_ends, self.step_ends[1:], strict=False)
            ],
        }
        (self.out / "window.json").write_text(json.dumps(window), encoding="utf-8")
        self.status("done")
        say(
            f"window of {self.span} step(s): {window['window_s'] * 1e3 / self.span:,.1f} ms per "
            f"step ({self.mode}); stopping the program"
        )


_GRAPH_BREAK_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)")
_GRAPH_BREAK_WHY = re.compile(r"(?:Graph Break Reason|Reason): (?P<why>[^\n]*)")
_EXPLANATION = re.compile(r"Explanation: (?P<why>[^\n]*)")
_RECOMPILE = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<file>.+?):(?P<line>\d+)")
_GUARD = re.compile(r"^\s*- (?P<guard>.+)$", re.M)


class CompileLog(logging.Handler):
    """torch.compile's own account of what it did: every graph break (where in the program's
    code, and why) and every recompile (which function, which guard failed), from the
    ``graph_breaks`` and ``recompiles`` logs (``TORCH_LOGS=graph_breaks,recompiles``), written to
    ``compile.jsonl``. These records are kept out of the program's stderr."""

    def __init__(self, runner: Runner):
        super().__init__(logging.DEBUG)
        self.runner = runner
        self.file = (runner.out / "compile.jsonl").open("a", encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:
        name = record.name
        if not is_compile_record(record):
            return
        try:
            text = record.getMessage()
        except Exception:  # a malformed record must not break the program
            return
        if name.endswith("__graph_breaks"):
            at = _GRAPH_BREAK_AT.search(text)
            why = _EXPLANATION.search(text) or _GRAPH_BREAK_WHY.search(text)
            entry = {"kind": "graph-break", "reason": (why["why"] if why else "")[:300]}
        else:
            at, entry = _RECOMPILE.search(text), {"kind": "recompile"}
            if at:
                entry["function"] = at["fn"]
            entry["reason"] = "; ".join(m["guard"] for m in _GUARD.finditer(text))[:300]
        if at:
            rel = self.runner.rel(at["file"])
            entry.update(path=rel or _short(at["file"]), line=int(at["line"]), in_tree=bool(rel))
        entry["step"] = self.runner.count + 1
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()


def _compiled_anything() -> bool:
    """Whether torch.compile has compiled a frame in this process (dynamo's own counters)."""
    mod = sys.modules.get("torch._dynamo.utils")
    counters = getattr(mod, "counters", None) if mod else None
    try:
        return bool(counters and (counters["stats"].get("unique_graphs") or counters["frames"]))
    except Exception:
        return False


def is_compile_record(record: logging.LogRecord) -> bool:
    return record.name.endswith(("__graph_breaks", "__recompiles"))


def install_compile_log(runner: Runner) -> None:
    """Turn on torch.compile's graph-break and recompile logs, into ``compile.jsonl`` only."""
    try:
        import torch._logging

        torch._logging.set_logs(graph_breaks=True, recompiles=True)
        # the modules that own the two logs, so that the loggers exist now
        import torch._dynamo.guards  # noqa: F401
        import torch._dynamo.symbolic_convert  # noqa: F401
        from torch._logging._internal import log_registry
    except Exception:  # an older torch without these logs: nothing to record
        return
    handler = CompileLog(runner)
    for qname in list(getattr(log_registry, "artifact_log_qnames", ())):
        if qname.endswith(("__graph_breaks", "__recompiles")):
            log = logging.getLogger(qname)
            log.addHandler(handler)
            log.propagate = False  # not onto the program's stderr


def _short(filename: str) -> str:
    """Library paths from ``site-packages`` on, so records name ``torch/amp/grad_scaler.py``."""
    parts = filename.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    # a package from another sys.path entry (pip install --target, PYTHONPATH): name it from there
    for entry in sorted((p for p in sys.path if p), key=len, reverse=True):
        head = entry.rstrip("/") + "/"
        if filename.startswith(head):
            return filename[len(head) :]
    return filename


def device_info() -> dict:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if os.environ.get("WORLD_SIZE"):
        info["rank"] = int(os.environ.get("RANK", "0") or 0)
        info["world_size"] = int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", "0") or 0)
        p = torch.cuda.get_device_properties(index if index < torch.cuda.device_count() else 0)
        info.update(
            name=p.name,
            compute_capability=f"{p.major}.{p.minor}",
            memory_bytes=p.total_memory,
            sm_count=p.multi_processor_count,
        )
    else:
        info["name"] = "CPU"
    return info


def main(argv: list[str]) -> int:
    global _RUNNER
    cfg = json.loads(pathlib.Path(argv[0]).read_text(encoding="utf-8"))
    runner = Runner(cfg)
    runner.status("starting")
    try:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError as exc:
        runner.status("error", error=f"torch is not importable: {exc}")
        say(f"torch is not importable here: {exc}")
        return 3
    runner.torch = torch
    (runner.out / "device.json").write_text(json.dumps(device_info()), encoding="utf-8")
    register_optimizer_step_post_hook(runner.optimizer_hook)
    if runner.mode == "traced":
        install_compile_log(runner)
    _RUNNER = runner
    target = cfg["target"]
    sys.argv = [target["name"], *target["args"]]
    runner.status("running")
    outcome, error = "ended", None
    try:
        if target["kind"] == "module":
            runpy.run_module(target["name"], run_name="__main__", alter_sys=True)
        elif target["kind"] == "code":
            sys.argv = ["-c", *target["args"]]
            sys.path.insert(0, "")
            code = compile(target["code"], CODE_FILE, "exec")
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target["name"])))
            runpy.run_path(target["name"], run_name="__main__")
    except StopTrace:
        outcome = "stopped"
    except SystemExit as exc:
        outcome = "exited" if exc.code in (None, 0) else "failed"
        if outcome == "failed":
            error = f"SystemExit({exc.code!r})"
    except BaseException as exc:  # the program's own failure: record it, keep what we have
        outcome = "failed"
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:2000]
        tb = traceback.format_exc()
        (runner.out / "error.txt").write_text(tb, encoding="utf-8")
        print(tb, file=sys.stderr)
    if outcome != "stopped":
        if runner.prof is not None:
            try:
                runner.prof.stop()
                runner.export(runner.prof)
            except Exception:
                pass
        if runner._syncs:
            runner._syncs.close()
        runner.status(outcome, error=error)
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except Exception:
        pass
    return 0 if outcome == "stopped" else 4


if __name__ == "__main__":
    # Run as `python -m`, this module is `__main__`; the program's `gpulint.trace.step()` imports
    # it by name, and must find this one (holding the runner), not a fresh copy.
    sys.modules.setdefault("gpulint.runtime.trace_runner", sys.modules[__name__])
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Worker threads and pools of the stopped program must not keep the process alive.
    os._exit(code)
