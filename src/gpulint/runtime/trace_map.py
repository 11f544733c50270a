"""From a recorded trace to costs per source line: pure functions over recorded data, no torch.

Input is what ``trace_runner`` recorded: the profiler's Chrome trace (``traceEvents``) and the
sync-debug warnings (``syncs.jsonl``, each with its Python stack). The runner wraps every torch
call issued from the checked tree in a range named ``gpulint@<path>:<line>#<op>``, so a CPU op, a
CUDA runtime call and (through the runtime call's ``correlation``) a kernel or memcpy belong to
the innermost such range that contains them on their thread. Work on other threads (the autograd
engine's backward) belongs to the forward op with the same autograd ``Sequence number``, else to
the range open on the main thread at that time (the ``loss.backward()`` line).

``analyse`` returns one ``Observation`` per (path, line, kind), with totals over the window;
``per_step`` divides by the window's step count. Kinds:

- ``sync``: the host waited for the GPU (sync-debug warnings; the runtime's *Synchronize calls)
- ``pageable-h2d``: host-to-device copies from pageable memory
- ``h2d``: every host-to-device copy (pageable or pinned)
- ``alloc``: ``cudaMalloc``/``cudaFree`` (the caching allocator growing or being emptied)
- ``fp32-gemm``: matrix products on float32 inputs (where TF32 or BF16 would apply)
- ``sdpa-math``: ``scaled_dot_product_attention`` on the math backend
- ``gpu-idle``: the GPU idled while the host ran this line (launch-bound or host-bound steps)
- ``input-wait``: ``DataLoader.__next__`` (``host_us``) and the GPU idle inside it (``gpu_us``)
- ``loader-restart``: ``DataLoader.__iter__`` inside the window (workers started again)
- ``collective``/``gloo``: distributed collectives (gloo: through host memory)
- ``gpu``: all GPU time issued from the line (kernels, copies, memsets)
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

ANNOTATION = "gpulint@"
SYNC_CALLS = frozenset(
    {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
)
LAUNCH_CALLS = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"}
)
ALLOC_CALLS = frozenset({"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync"})
GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::addmv",
        "aten::mv",
    }
)
MATH_SDPA = "aten::_scaled_dot_product_attention_math"
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
MIN_GAP_US = 5.0  # shorter GPU idle gaps are launch latency no host change removes
SYNC_SLACK_US = 20.0  # a sync returns a little after the GPU's last work ended
BACKWARD = "autograd::engine::evaluate_function: "
COLLECTIVE = ("gloo:", "nccl:")  # the process group's own ranges around a collective
_ANNOT = re.compile(r"^gpulint@(?P<path>.+):(?P<line>\d+)#(?P<op>.*)$")


@dataclass
class Observation:
    path: str
    line: int
    kind: str
    count: float = 0.0
    host_us: float = 0.0
    gpu_us: float = 0.0
    bytes: int = 0
    ops: dict = field(default_factory=dict)  # op (or library frame) -> count
    detail: dict = field(default_factory=dict)

    def key(self) -> tuple[str, int, str]:
        return (self.path, self.line, self.kind)

    def as_dict(self, steps: int = 1) -> dict:
        n = max(steps, 1)
        return {
            "path": self.path,
            "line": self.line,
            "kind": self.kind,
            "count_per_step": round(self.count / n, 3),
            "host_us_per_step": round(self.host_us / n, 1),
            "gpu_us_per_step": round(self.gpu_us / n, 1),
            "bytes_per_step": int(self.bytes / n),
            "ops": dict(sorted(self.ops.items(), key=lambda kv: -kv[1])[:5]),
            "detail": self.detail,
        }


@dataclass
class Analysis:
    steps: int
    observations: list[Observation]
    executed: dict  # (path, line) -> number of torch calls issued from it in the window
    summary: dict

    def get(self, kind: str) -> list[Observation]:
        return [o for o in self.observations if o.kind == kind]


def parse_annotation(name: str) -> tuple[str, int, str] | None:
    m = _ANNOT.match(name)
    if not m:
        return None
    return m["path"], int(m["line"]), m["op"]


class _Thread:
    """One thread's CPU-side events, nested by time (a child starts and ends inside its parent)."""

    def __init__(self, events: list[dict]):
        events.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        self.events = events
        self.parent: list[int] = [-1] * len(events)
        stack: list[int] = []
        for i, e in enumerate(events):
            end = e["ts"] + e.get("dur", 0)
            while stack and events[stack[-1]]["ts"] + events[stack[-1]].get("dur", 0) < end:
                stack.pop()
            self.parent[i] = stack[-1] if stack else -1
            stack.append(i)
        self.starts = [e["ts"] for e in events]

    def ancestors(self, i: int):
        i = self.parent[i]
        while i >= 0:
            yield i, self.events[i]
            i = self.parent[i]

    def innermost_at(self, ts: float, want) -> dict | None:
        """The innermost event for which ``want(e)`` holds and that contains ``ts``."""
        # Every event that contains ts is j (the last to start at or before ts) or an ancestor.
        j = bisect.bisect_right(self.starts, ts) - 1
        while j >= 0:
            e = self.events[j]
            if want(e) and e["ts"] + e.get("dur", 0) >= ts:
                return e
            j = self.parent[j]
        return None


def _is_annot(e: dict) -> bool:
    return e.get("name", "").startswith(ANNOTATION)


def _seq(e: dict):
    return (e.get("args") or {}).get("Sequence number")


def _input_types(e: dict) -> list:
    return (e.get("args") or {}).get("Input type") or []


def analyse(trace: dict, syncs: list[dict], window: tuple[int, int] | None = None) -> Analysis:
    """Costs per line of the traced window.

    ``trace`` is the Chrome trace the profiler exported; ``syncs`` the sync-debug warnings the
    runner recorded; ``window`` the (first, last) step numbers the profiler recorded (warnings of
    other steps are ignored; None keeps all).
    """
    # Only complete events with a name, a start and a length: a damaged recording yields less,
    # never an exception.
    raw = trace.get("traceEvents") if isinstance(trace, dict) else None
    events = [
        e
        for e in (raw if isinstance(raw, list) else [])
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("name"), str)
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur", 0), (int, float))
        and (e.get("args") is None or isinstance(e.get("args"), dict))
    ]
    cpu_by_tid: dict = defaultdict(list)
    gpu: list[dict] = []
    for e in events:
        cat = e.get("cat", "")
        if cat in GPU_CATS:
            gpu.append(e)
        elif cat in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            cpu_by_tid[(e.get("pid"), e.get("tid"))].append(e)
    threads = {k: _Thread(v) for k, v in cpu_by_tid.items()}
    steps_ev = sorted(
        (
            e
            for e in events
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: e["ts"],
    )
    # The main thread is the one holding the most line ranges (the program's own thread).
    main_key = max(
        threads, key=lambda k: sum(1 for e in threads[k].events if _is_annot(e)), default=None
    )
    main = threads.get(main_key)
    nsteps = len(steps_ev) or 1

    # Forward ops by autograd sequence number, for work done on the backward thread.
    seq_line: dict = {}
    math_seqs: set = set()
    index: dict[int, tuple] = {}  # id(event) -> (thread, i)
    for th in threads.values():
        for i, e in enumerate(th.events):
            index[id(e)] = (th, i)

    def own_line(th: _Thread, i: int):
        for _, a in th.ancestors(i):
            if _is_annot(a):
                return parse_annotation(a["name"])
        return None

    if main is not None:
        for i, e in enumerate(main.events):
            s = _seq(e)
            if e.get("cat") == "cpu_op" and s is not None and s not in seq_line:
                line = own_line(main, i)
                if line:
                    seq_line[s] = line
                if e["name"] != MATH_SDPA and any(
                    a["name"] == MATH_SDPA for _, a in main.ancestors(i)
                ):
                    math_seqs.add(s)

    def context(th: _Thread, i: int) -> dict:
        """Where a CPU-side event belongs and what encloses it."""
        # line: (path, line, function) | None; phase: str; math: bool; gemm: event | None; coll: str | None
        ctx: dict[str, Any] = {
            "line": None,
            "phase": "forward",
            "math": False,
            "gemm": None,
            "coll": None,
        }
        e = th.events[i]
        for _, a in [(i, e), *th.ancestors(i)]:
            name = a.get("name", "")
            if ctx["gemm"] is None and a.get("cat") == "cpu_op" and name in GEMM_OPS:
                ctx["gemm"] = a
            if name == MATH_SDPA:
                ctx["math"] = True
            if ctx["coll"] is None and name.startswith(COLLECTIVE):
                ctx["coll"] = name
            if name.startswith(BACKWARD):
                ctx["phase"] = "backward"
                s = _seq(a)
                if s in math_seqs:
                    ctx["math"] = True
                if ctx["line"] is None and s in seq_line:
                    ctx["line"] = seq_line[s]
            if ctx["line"] is None and _is_annot(a):
                ctx["line"] = parse_annotation(name)
        if ctx["line"] is None and main is not None and th is not main:
            a = main.innermost_at(e["ts"], _is_annot)
            if a is not None:
                ctx["line"] = parse_annotation(a["name"])
        return ctx

    obs: dict[tuple, Observation] = {}

    def add(line, kind, *, count=0.0, host=0.0, gpu_us=0.0, nbytes=0, op=None, **detail):
        if line is None:
            return None
        path, lineno, _ = line
        o = obs.get((path, lineno, kind))
        if o is None:
            o = obs[(path, lineno, kind)] = Observation(path, lineno, kind)
        o.count += count
        o.host_us += host
        o.gpu_us += gpu_us
        o.bytes += nbytes
        if op:
            o.ops[op] = o.ops.get(op, 0) + 1
        for k, v in detail.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                o.detail[k] = o.detail.get(k, 0) + v
            else:
                o.detail.setdefault(k, v)
        return o

    executed: dict = defaultdict(int)
    runtime_by_corr: dict = {}
    ctx_cache: dict = {}

    def ctx_of(e: dict) -> dict:
        k = id(e)
        if k not in ctx_cache:
            th, i = index[k]
            ctx_cache[k] = context(th, i)
        return ctx_cache[k]

    sync_trace: dict = defaultdict(lambda: [0, 0.0])  # line -> [calls, host µs]
    sync_ends: list[float] = []  # when each sync the program asked for returned
    comm_host = 0.0  # host time inside collectives (gloo's copies and waits)
    launches: list[float] = []  # host µs of each kernel launch call
    for th in threads.values():
        for e in th.events:
            cat, name = e.get("cat"), e.get("name", "")
            if cat == "user_annotation" and _is_annot(e):
                p = parse_annotation(name)
                if p:
                    executed[(p[0], p[1])] += 1
                    if p[2] == "DataLoader.__next__":
                        add(p, "input-wait", count=1, host=e.get("dur", 0), op=p[2])
                    elif p[2] == "DataLoader.__iter__":
                        add(p, "loader-restart", count=1, host=e.get("dur", 0), op=p[2])
                continue
            if cat == "user_annotation" and name.startswith(COLLECTIVE):
                kind = "gloo" if name.startswith("gloo:") else "collective"
                add(ctx_of(e)["line"], kind, count=1, host=e.get("dur", 0), op=name)
                comm_host += e.get("dur", 0)
                continue
            if cat in ("cuda_runtime", "cuda_driver"):
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    runtime_by_corr[corr] = e
                if name in SYNC_CALLS:
                    c = ctx_of(e)
                    if c["coll"]:
                        # A collective's own wait (gloo copies CUDA tensors through the host):
                        # part of the collective's cost, not a sync the program asked for.
                        kind = "gloo" if c["coll"].startswith("gloo:") else "collective"
                        add(c["line"], kind, sync_calls=1, sync_us=e.get("dur", 0))
                    else:
                        sync_ends.append(e["ts"] + e.get("dur", 0))
                        if c["line"]:
                            s = sync_trace[c["line"][:2]]
                            s[0] += 1
                            s[1] += e.get("dur", 0)
                elif name in LAUNCH_CALLS:
                    launches.append(e.get("dur", 0))
                elif name in ALLOC_CALLS:
                    add(ctx_of(e)["line"], "alloc", count=1, host=e.get("dur", 0), op=name)
                continue

    # Sync warnings: the logical syncs (an .item(), a blocking copy), with the op and the library
    # frame that issued them; the trace's *Synchronize calls at the same line give the time.
    first, last = window if window is not None else (None, None)
    warn: dict = defaultdict(
        lambda: {"count": 0, "ops": defaultdict(int), "callee": defaultdict(int)}
    )
    for s in syncs:
        st = s.get("step")
        if (
            first is not None
            and last is not None
            and isinstance(st, int)
            and not first <= st <= last
        ):
            continue
        stack = s.get("stack")
        stack = [
            f
            for f in (stack if isinstance(stack, list) else [])
            if isinstance(f, list) and len(f) >= 4 and isinstance(f[1], int)
        ]
        user = [i for i, f in enumerate(stack) if f[3] and isinstance(f[0], str)]
        if not user:
            continue
        pos = user[-1]
        top = stack[pos]
        w = warn[(top[0], top[1])]
        w["count"] += 1
        callee = next(
            (
                f"{f[0]}:{f[1]} {f[2]}"
                for f in stack[pos + 1 :]
                if not str(f[0]).endswith(("warnings.py", "trace_runner.py"))
            ),
            None,
        )
        if callee:
            w["callee"][callee] += 1
        w["ops"][s.get("op") or "?"] += 1
    for key in set(warn) | set(sync_trace):
        calls, host = sync_trace.get(key, (0, 0.0))
        w = warn.get(key)
        count = w["count"] if w else calls
        o = add((key[0], key[1], ""), "sync", count=count, host=host)
        o.detail["sync_calls"] = calls
        o.detail["source"] = "warning+trace" if w and calls else ("warning" if w else "trace")
        if w:
            o.ops.update(w["ops"])
            if w["callee"]:
                o.detail["library_frame"] = max(w["callee"], key=w["callee"].get)

    # GPU work: each kernel, memcpy and memset through its launch to a line.
    gpu_intervals = []
    comm_gpu = 0.0
    for g in gpu:
        ts, dur = g["ts"], g.get("dur", 0)
        gpu_intervals.append((ts, ts + dur, g))
        corr = (g.get("args") or {}).get("correlation")
        rt = runtime_by_corr.get(corr)
        if rt is None:
            continue
        c = ctx_of(rt)
        name = g.get("name", "")
        if c["coll"] or "nccl" in name.lower():
            comm_gpu += dur  # a collective's copies (gloo goes through the host) and NCCL kernels
        line = c["line"]
        if line is None:
            continue
        add(line, "gpu", count=1, gpu_us=dur)
        if g.get("cat") == "gpu_memcpy":
            nbytes = int((g.get("args") or {}).get("bytes", 0) or 0)
            if "HtoD" in name:
                pageable = "Pageable" in name
                add(
                    line,
                    "h2d",
                    count=1,
                    gpu_us=dur,
                    host=rt.get("dur", 0),
                    nbytes=nbytes,
                    op="pageable" if pageable else "pinned",
                )
                if pageable:
                    add(
                        line,
                        "pageable-h2d",
                        count=1,
                        gpu_us=dur,
                        host=rt.get("dur", 0),
                        nbytes=nbytes,
                        op=rt.get("name"),
                    )
        if g.get("cat") == "kernel":
            if c["math"]:
                add(line, "sdpa-math", count=1, gpu_us=dur, op=c["phase"])
            gemm = c["gemm"]
            if gemm is not None and any(t == "float" for t in _input_types(gemm)[:2]):
                tf32 = "tf32" in name.lower() or re.search(r"s\d{3,5}gemm", name) is not None
                add(
                    line,
                    "fp32-gemm",
                    count=1,
                    gpu_us=dur,
                    op=gemm["name"],
                    tf32_kernels=int(tf32),
                    kernels=1,
                )

    # GPU idle time inside each step, attributed to the host work it waited for.
    gpu_intervals.sort(key=lambda t: t[0])
    starts = [t[0] for t in gpu_intervals]
    busy_total = idle_total = wall_total = 0.0
    step_walls = []
    all_gaps: list[tuple[float, float]] = []
    kernels = sum(1 for g in gpu if g.get("cat") == "kernel")
    for st in steps_ev:
        s0, s1 = st["ts"], st["ts"] + st.get("dur", 0)
        step_walls.append(s1 - s0)
        lo = max(bisect.bisect_left(starts, s0) - 1, 0)
        cur = s0
        busy = 0.0
        gaps: list[tuple[float, float, dict | None]] = []
        for a, b, g in gpu_intervals[lo:]:
            if a >= s1:
                break
            a, b = max(a, s0), min(b, s1)
            if b <= cur:
                continue
            if a > cur:
                gaps.append((cur, a, g))
            busy += b - max(a, cur)
            cur = b
        if cur < s1:
            gaps.append((cur, s1, None))
        busy_total += busy
        wall_total += s1 - s0
        all_gaps.extend((a, b) for a, b, _ in gaps if b - a >= MIN_GAP_US)
        for a, b, nxt in gaps:
            if b - a < MIN_GAP_US:
                continue
            idle_total += b - a
            line = None
            if main is not None:
                ann = main.innermost_at((a + b) / 2, _is_annot)
                if ann is not None:
                    line = parse_annotation(ann["name"])
            if line is None and nxt is not None:
                rt = runtime_by_corr.get((nxt.get("args") or {}).get("correlation"))
                if rt is not None:
                    line = ctx_of(rt)["line"]
            if line is None:
                line = ("<outside the checked tree>", 0, "")
            add(line, "gpu-idle", count=1, gpu_us=b - a)
    # Input waits: the GPU idle inside DataLoader.__next__.
    for o in obs.values():
        if o.kind == "input-wait" and main is not None:
            o.gpu_us = 0.0
    if main is not None:
        for e in main.events:
            p = parse_annotation(e["name"]) if _is_annot(e) else None
            if not p or p[2] != "DataLoader.__next__":
                continue
            a0, a1 = e["ts"], e["ts"] + e.get("dur", 0)
            obs[(p[0], p[1], "input-wait")].gpu_us += max(
                0.0, (a1 - a0) - _busy_in(gpu_intervals, starts, a0, a1)
            )

    # The GPU idle time that follows the program's syncs: a sync drains the GPU's queue, which
    # the host then fills again from nothing. A gap counts once, however many syncs end in it.
    gap_starts = [g[0] for g in all_gaps]
    after_sync: set[int] = set()
    for t in sync_ends:
        j = bisect.bisect_right(gap_starts, t + SYNC_SLACK_US) - 1
        if j >= 0 and all_gaps[j][1] > t:
            after_sync.add(j)
    sync_idle = sum(all_gaps[j][1] - all_gaps[j][0] for j in after_sync)
    nccl_us = comm_gpu + sum(
        g.get("dur", 0)
        for g in gpu
        if "nccl" in g["name"].lower()
        and runtime_by_corr.get((g.get("args") or {}).get("correlation")) is None
    )
    waits = [o for o in obs.values() if o.kind == "input-wait"]
    n = len(steps_ev) or 1
    summary = {
        "steps": len(steps_ev),
        "step_us": sorted(step_walls)[len(step_walls) // 2] if step_walls else None,
        "step_us_all": [round(x, 1) for x in step_walls],
        "gpu_busy_us_per_step": round(busy_total / n, 1),
        "gpu_idle_us_per_step": round(idle_total / n, 1),
        "gpu_busy_fraction": round(busy_total / wall_total, 4) if wall_total else None,
        "kernels_per_step": round(kernels / n, 1),
        "mean_kernel_us": round(
            sum(g.get("dur", 0) for g in gpu if g.get("cat") == "kernel") / kernels, 1
        )
        if kernels
        else None,
        "sync_warnings": sum(w["count"] for w in warn.values()),
        # what the step-level verdict weighs (trace_verdict), per step
        "gpu_measured": bool(gpu)
        or any(e.get("cat") in ("cuda_runtime", "cuda_driver") for e in events),
        "syncs_per_step": round(sum(o.count for o in obs.values() if o.kind == "sync") / n, 2),
        "sync_host_us_per_step": round(
            sum(o.host_us for o in obs.values() if o.kind == "sync") / n, 1
        ),
        "sync_idle_us_per_step": round(sync_idle / n, 1),
        "input_wait_us_per_step": round(sum(o.host_us for o in waits) / n, 1),
        "input_idle_us_per_step": round(sum(o.gpu_us for o in waits) / n, 1),
        "comm_host_us_per_step": round(comm_host / n, 1),
        "comm_gpu_us_per_step": round(nccl_us / n, 1),
        "launch_us_mean": round(sum(launches) / len(launches), 2) if launches else None,
    }
    return Analysis(nsteps, sorted(obs.values(), key=lambda o: o.key()), dict(executed), summary)


def _busy_in(intervals, starts, a0: float, a1: float) -> float:
    """GPU busy time (union of intervals) inside [a0, a1]."""
    lo = max(bisect.bisect_left(starts, a0) - 1, 0)
    cur, busy = a0, 0.0
    for a, b, _ in intervals[lo:]:
        if a >= a1:
            break
        a, b = max(a, a0), min(b, a1)
        if b <= cur:
            continue
        busy += b - max(a, cur)
        cur = b
    return busy


def merge(analyses: list[Analysis], over: str = "ranks") -> Analysis:
    """One analysis for the ranks of a multi-process run: each line's costs are the mean over
    the ranks (per step), the lines executed are the union, the summary is the mean of the
    ranks' figures except the step time, which is the slowest rank's (it bounds the step);
    ``summary["per_rank"]`` keeps each rank's own.

    ``over="steps"``: the parts are recorded steps of one process (``--every`` sampling): their
    costs add up over their steps, and the summary is their mean (the step time too)."""
    analyses = [a for a in analyses if a is not None]
    if len(analyses) == 1:
        return analyses[0]
    if not analyses:
        return Analysis(0, [], {}, {"steps": 0})
    by_steps = over == "steps"
    steps = sum(a.steps for a in analyses) if by_steps else max(a.steps for a in analyses)
    n = len(analyses)
    obs: dict[tuple, Observation] = {}
    executed: dict = defaultdict(int)
    for a in analyses:
        scale = 1.0 if by_steps else steps / max(a.steps, 1) / n
        for o in a.observations:
            m = obs.get(o.key())
            if m is None:
                m = obs[o.key()] = Observation(o.path, o.line, o.kind)
            m.count += o.count * scale
            m.host_us += o.host_us * scale
            m.gpu_us += o.gpu_us * scale
            m.bytes += int(o.bytes * scale)
            for k, v in o.ops.items():
                m.ops[k] = m.ops.get(k, 0) + v * scale
            for k, v in o.detail.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    m.detail[k] = m.detail.get(k, 0) + v * scale
                else:
                    m.detail.setdefault(k, v)
            if not by_steps:
                m.detail["ranks"] = m.detail.get("ranks", 0) + 1
        for k, v in a.executed.items():
            executed[k] += v
    summary: dict[str, Any] = {}
    for key, first in analyses[0].summary.items():
        values = [a.summary.get(key) for a in analyses]
        nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if isinstance(first, bool):
            summary[key] = all(bool(v) for v in values)
        elif nums and len(nums) == len(values):
            if by_steps and key == "steps":
                summary[key] = sum(nums)
            elif key in ("step_us", "steps") and not by_steps:
                summary[key] = max(nums)  # the slowest rank bounds the step
            else:
                summary[key] = round(sum(nums) / len(nums), 4)
        else:
            summary[key] = first
    if by_steps:
        summary["sampled_steps"] = n
    else:
        summary["ranks"] = n
        summary["per_rank"] = [a.summary for a in analyses]
    return Analysis(steps, sorted(obs.values(), key=lambda o: o.key()), dict(executed), summary)
