"""Join a traced window's costs with ``gpulint check`` of the same tree: pure functions, no torch.

Every static finding becomes one of

- ``confirmed``: its cost was observed where the rule says it is, with the measured cost per step;
- ``not exercised``: the code it points at never ran in the traced window;
- ``not observed``: that code ran and no such cost showed (a candidate false positive);
- ``not measured``: the trace has no observable for what the rule is about (a deprecated API,
  a numerics choice, a timing method): neither confirmed nor refuted;

and every observed cost that no static finding accounts for is reported as ``runtime-only`` (a
candidate false negative of the rules).

How each rule is matched (``JOIN``): ``statement`` means at the lines of the statement holding
the finding (a call spread over lines records the line that was executing), ``function`` within
the function holding it, ``file`` anywhere in its file, ``program`` anywhere in the traced program.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .trace_map import Analysis, Observation

CONFIRMED, NOT_EXERCISED, NOT_OBSERVED, NOT_MEASURED, RUNTIME_ONLY = (
    "confirmed",
    "not exercised",
    "not observed",
    "not measured",
    "runtime-only",
)
STATUS_ORDER = {CONFIRMED: 0, RUNTIME_ONLY: 1, NOT_OBSERVED: 2, NOT_EXERCISED: 3, NOT_MEASURED: 4}

# code -> (scope, kinds that confirm it, kind whose presence means the code was exercised)
JOIN: dict[str, tuple[str, frozenset, str | None]] = {
    "GPU101": ("statement", frozenset({"sync"}), None),
    "GPU105": ("statement", frozenset({"sync"}), None),
    "GPU504": ("statement", frozenset({"sync"}), None),
    "GPU103": ("statement", frozenset({"sync"}), None),
    "GPU102": ("statement", frozenset({"h2d"}), None),
    "GPU104": ("statement", frozenset({"h2d"}), None),
    "GPU503": ("statement", frozenset({"alloc"}), None),
    "GPU502": ("function", frozenset({"gpu"}), None),
    "GPU301": ("file", frozenset({"pageable-h2d"}), "h2d"),
    "GPU302": ("file", frozenset({"input-wait"}), "input-wait"),
    "GPU303": ("file", frozenset({"loader-restart"}), "loader-restart"),
    "GPU202": ("program", frozenset({"fp32-gemm"}), "gpu"),
    "GPU204": ("program", frozenset({"fp32-gemm"}), "gpu"),
    "GPU401": ("program", frozenset({"gloo"}), "gloo"),
}

# A runtime-only cost is reported when it is at least this share of a step (or, for syncs and
# pageable copies, whenever it happens: each is a stall the program asked for).
MIN_SHARE = 0.01
ALWAYS = frozenset({"sync", "pageable-h2d", "alloc", "sdpa-math", "gloo", "loader-restart"})
# Kinds that are costs (the others, h2d/gpu/input-wait/collective, describe what ran).
COSTS = ("sync", "pageable-h2d", "alloc", "fp32-gemm", "sdpa-math", "gpu-idle", "gloo")
# What a run without a CUDA device still measures: the host's own time (workers restarted).
HOST_KINDS = frozenset({"loader-restart"})
NO_GPU = (
    "not measurable: the traced run had no CUDA device, so it saw no GPU time, sync, copy or "
    "allocation"
)
# A data-loader wait costs when the GPU idled through it.
INPUT_WAIT_SHARE = 0.02

KIND_TEXT = {
    "sync": "host-device sync",
    "pageable-h2d": "pageable host-to-device copy",
    "alloc": "cudaMalloc/cudaFree",
    "fp32-gemm": "FP32 matrix product",
    "sdpa-math": "attention on the math backend",
    "gpu-idle": "GPU idle while the host ran this line",
    "input-wait": "GPU idle waiting for the DataLoader",
    "loader-restart": "DataLoader workers restarted",
    "gloo": "collective through gloo (host memory)",
    "h2d": "host-to-device copy",
    "graph-break": "torch.compile graph break",
    "recompile": "torch.compile recompile",
    "gpu": "GPU work",
}


@dataclass
class Row:
    status: str
    path: str
    line: int
    code: str | None = None
    message: str = ""
    kinds: list[str] = field(default_factory=list)
    count_per_step: float = 0.0
    host_us_per_step: float = 0.0
    gpu_us_per_step: float = 0.0
    cost_us_per_step: float = 0.0
    evidence: str = ""
    at: list[str] = field(default_factory=list)  # where the observations were (path:line)
    ops: dict = field(default_factory=dict)
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "path": self.path,
            "line": self.line,
            "code": self.code,
            "message": self.message,
            "kinds": self.kinds,
            "count_per_step": round(self.count_per_step, 3),
            "host_us_per_step": round(self.host_us_per_step, 1),
            "gpu_us_per_step": round(self.gpu_us_per_step, 1),
            "cost_us_per_step": round(self.cost_us_per_step, 1),
            "evidence": self.evidence,
            "at": self.at,
            "ops": self.ops,
            "detail": self.detail,
        }


def cost_of(o: Observation) -> float:
    """The time one observation cost: host time for what stalls the host, GPU time otherwise."""
    if o.kind in ("sync", "alloc", "pageable-h2d", "gloo", "loader-restart"):
        return o.host_us
    return o.gpu_us


def spans(source: str) -> tuple[dict[int, tuple[int, int]], list[tuple[int, int]]]:
    """Per line, the (first, last) line of the innermost simple statement holding it; and the
    (first, last) lines of every function. Unparsable source gives one-line statements."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return {}, []
    stmt: dict[int, tuple[int, int]] = {}
    funcs: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs.append((node.lineno, node.end_lineno or node.lineno))
        if isinstance(node, ast.stmt):
            first, last = node.lineno, node.end_lineno or node.lineno
            if isinstance(
                node, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)
            ):
                # A compound statement's own line(s) only: its header, not its body.
                body = getattr(node, "body", None)
                last = max(first, body[0].lineno - 1) if body else first
            for ln in range(first, last + 1):
                cur = stmt.get(ln)
                if cur is None or (last - first) < (cur[1] - cur[0]):
                    stmt[ln] = (first, last)
    return stmt, funcs


def block_lines(source: str | None, line: int) -> range | None:
    """All the lines of the statement that starts at ``line`` (a loop with its body), or None."""
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    ends = [
        n.end_lineno or n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt) and n.lineno == line
    ]
    return range(line, max(ends) + 1) if ends else None


def _scope_lines(scope: str, path: str, line: int, texts) -> tuple[str | None, range | None]:
    """The lines of ``path`` a finding at ``line`` is matched against (None: the whole scope)."""
    if scope in ("file", "program"):
        return (path if scope == "file" else None), None
    source = texts(path)
    stmt, funcs = spans(source) if source is not None else ({}, [])
    if scope == "statement":
        first, last = stmt.get(line, (line, line))
        return path, range(first, last + 1)
    inner = [f for f in funcs if f[0] <= line <= f[1]]
    if not inner:
        return path, range(line, line + 1)
    first, last = min(inner, key=lambda f: f[1] - f[0])
    return path, range(first, last + 1)


def join(
    analysis: Analysis,
    findings: list[dict],
    texts,
    device: str = "the GPU",
    untraced_step_us: float | None = None,
    compile_events: list[dict] | None = None,
) -> list[Row]:
    """Rows for every static finding and every runtime-only cost, worst cost per step first.

    ``findings``: dicts with ``code``, ``path`` (relative to the traced tree's root, as the
    trace records paths), ``line`` and ``message``; ``texts(path)`` gives a file's source or None.
    ``untraced_step_us``: the step time of the same program untraced (``--overhead``). GPU idle
    time is reported per line only with it: tracing slows the host, so the traced window's idle
    time is mostly the tracer's own; the untraced step minus the GPU's busy time is what the
    program itself leaves idle, shared out by each line's part of the traced idle time.
    """
    steps = max(analysis.steps, 1)
    step_us = analysis.summary.get("step_us") or 0.0
    # A run without a CUDA device measured no GPU time, sync, copy or allocation: what the rules
    # about those say can be neither confirmed nor refuted there, and no GPU cost is reported.
    gpu = analysis.summary.get("gpu_measured", True)
    by_file: dict[str, list[Observation]] = {}
    for o in analysis.observations:
        by_file.setdefault(o.path, []).append(o)
    executed_lines: dict[str, set[int]] = {}
    for (p, ln), _n in analysis.executed.items():
        executed_lines.setdefault(p, set()).add(ln)
    used: set[tuple] = set()
    rows: list[Row] = []

    for f in findings:
        code, path, line = f["code"], f["path"], int(f["line"])
        rule = JOIN.get(code)
        row = Row(NOT_MEASURED, path, line, code, f.get("message", ""))
        if code in COMPILE_JOIN:
            _join_compile(row, compile_events or [], texts, device)
            rows.append(row)
            continue
        if rule is None:
            row.evidence = "the trace has no observable for this rule"
            rows.append(row)
            continue
        scope, kinds, exercised_by = rule
        if not gpu and not kinds <= HOST_KINDS:
            row.evidence = NO_GPU
            rows.append(row)
            continue
        # The finding's own place, and the places it names as where the cost is paid (the
        # `.item()` inside a helper that a call in the step loop reaches).
        places = [(path, line)] + [(str(p), int(ln)) for p, ln in f.get("related", ())]
        scopes = [_scope_lines(scope, p, ln, texts) for p, ln in places]
        in_path, lines = scopes[0]

        def inside(o: Observation, scopes=scopes) -> bool:
            return any(
                (sp is None or o.path == sp) and (sl is None or o.line in sl) for sp, sl in scopes
            )

        pool = [o for o in analysis.observations if inside(o)]
        hits = [o for o in pool if o.kind in kinds]
        if code == "GPU302":
            hits = [o for o in hits if step_us and o.gpu_us / steps >= INPUT_WAIT_SHARE * step_us]
        if scope == "program" and path not in executed_lines:
            # judged for the program its file belongs to: a tree holding several programs ran
            # only the traced one, and another one's loop is not confirmed by it
            hits, pool = [], []
        if code in ("GPU202", "GPU204"):
            total_gpu = analysis.summary.get("gpu_busy_us_per_step") or 0.0
            hits = [o for o in hits if o.gpu_us / steps >= MIN_SHARE * total_gpu]
        if exercised_by is None:
            ran = any(
                (sl is None and (sp is None or sp in executed_lines))
                or (sl is not None and sp is not None and executed_lines.get(sp, set()) & set(sl))
                for sp, sl in scopes
            )
        else:
            ran = any(o.kind == exercised_by for o in pool)
            if not ran and scope == "program":
                # judged for the whole program, found at one place (GPU202's training loop):
                # it ran when that loop did, whether or not its kernels mapped to lines
                body = block_lines(texts(path), line)
                ran = bool(body and executed_lines.get(path, set()) & set(body))
        if hits:
            row.status = CONFIRMED
            _fill(row, hits, steps)
            used.update(o.key() for o in hits)
            row.evidence = _sentence(row, device, steps)
        elif ran:
            row.status = NOT_OBSERVED
            row.evidence = f"ran in the {steps}-step window; no {', '.join(KIND_TEXT[k] for k in sorted(kinds))} showed"
        else:
            row.status = NOT_EXERCISED
            row.evidence = f"did not run in the {steps}-step window"
        rows.append(row)

    if not gpu:
        for o in analysis.observations:
            if o.kind in HOST_KINDS and o.key() not in used:
                row = Row(RUNTIME_ONLY, o.path, o.line, None, KIND_TEXT[o.kind])
                _fill(row, [o], steps)
                row.evidence = _sentence(row, device, steps)
                rows.append(row)
        rows.sort(key=lambda r: (-r.cost_us_per_step, STATUS_ORDER[r.status], r.path, r.line))
        return rows
    # FP32 matrix products are spread over every layer: one row for the program, at the line
    # with the largest share, when together they are worth a look.
    gemms = [o for o in analysis.get("fp32-gemm") if o.key() not in used]
    busy = analysis.summary.get("gpu_busy_us_per_step") or 0.0
    if gemms and sum(o.gpu_us for o in gemms) / steps >= MIN_SHARE * busy:
        top = max(gemms, key=lambda o: o.gpu_us)
        row = Row(RUNTIME_ONLY, top.path, top.line, None, KIND_TEXT["fp32-gemm"])
        _fill(row, gemms, steps)
        row.evidence = _sentence(row, device, steps)
        rows.append(row)
        used.update(o.key() for o in gemms)
    idle = [o for o in analysis.get("gpu-idle") if o.key() not in used]
    traced_idle = sum(o.gpu_us for o in idle) / steps
    host_bound = (untraced_step_us or 0.0) - busy
    if untraced_step_us and traced_idle > 0 and host_bound >= 0.1 * untraced_step_us:
        scale = host_bound / traced_idle
        for o in idle:
            est = o.gpu_us / steps * scale
            if est < MIN_SHARE * untraced_step_us or o.path.startswith("<"):
                continue
            row = Row(RUNTIME_ONLY, o.path, o.line, None, KIND_TEXT["gpu-idle"])
            _fill(row, [o], steps)
            row.gpu_us_per_step = row.cost_us_per_step = est
            row.detail["gaps_per_step"] = round(row.count_per_step, 1)
            row.count_per_step = 0.0  # idle gaps are no count of anything the line did
            row.detail["estimated_from"] = (
                f"untraced step {untraced_step_us:,.0f} µs - GPU busy {busy:,.0f} µs, "
                f"{o.gpu_us / steps / traced_idle * 100:.0f}% of the traced idle time"
            )
            row.evidence = _sentence(row, device, steps)
            rows.append(row)
    used.update(o.key() for o in idle)
    for o in analysis.observations:
        if o.kind not in COSTS or o.key() in used:
            continue
        per = cost_of(o) / steps
        if o.kind not in ALWAYS and (not step_us or per < MIN_SHARE * step_us):
            continue
        row = Row(RUNTIME_ONLY, o.path, o.line, None, KIND_TEXT[o.kind])
        _fill(row, [o], steps)
        row.evidence = _sentence(row, device, steps)
        rows.append(row)
    # Input waits cost when the GPU idled through them; report those no finding explained.
    for o in analysis.get("input-wait"):
        if o.key() in used or not step_us or o.gpu_us / steps < INPUT_WAIT_SHARE * step_us:
            continue
        row = Row(RUNTIME_ONLY, o.path, o.line, None, KIND_TEXT["input-wait"])
        _fill(row, [o], steps)
        row.cost_us_per_step = o.gpu_us / steps
        row.evidence = _sentence(row, device, steps)
        rows.append(row)
    rows.sort(
        key=lambda r: (-r.cost_us_per_step, STATUS_ORDER[r.status], r.path, r.line, r.code or "")
    )
    return rows


def _fill(row: Row, hits: list[Observation], steps: int) -> None:
    row.kinds = sorted({o.kind for o in hits})
    row.count_per_step = sum(o.count for o in hits) / steps
    row.host_us_per_step = sum(o.host_us for o in hits) / steps
    row.gpu_us_per_step = sum(o.gpu_us for o in hits) / steps
    row.cost_us_per_step = sum(cost_of(o) for o in hits) / steps
    if row.kinds == ["input-wait"]:
        row.cost_us_per_step = row.gpu_us_per_step
    row.at = sorted({f"{o.path}:{o.line}" for o in hits})
    ops: dict = {}
    for o in hits:
        for k, v in o.ops.items():
            ops[k] = ops.get(k, 0) + v
        for k, v in o.detail.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row.detail[k] = row.detail.get(k, 0) + v
            else:
                row.detail.setdefault(k, v)
    row.ops = dict(sorted(ops.items(), key=lambda kv: -kv[1])[:5])
    nbytes = sum(o.bytes for o in hits)
    if nbytes:
        row.detail["bytes_per_step"] = int(nbytes / steps)


def _us(x: float) -> str:
    return f"{x:,.0f} µs" if x >= 10 else f"{x:.1f} µs"


def _sentence(row: Row, device: str, steps: int) -> str:
    """The measured cost in words, as a lint message quotes it."""
    kinds = row.kinds
    n = row.count_per_step
    count = f"{n:.0f}" if abs(n - round(n)) < 0.05 else f"{n:.1f}"
    if "sync" in kinds:
        what = f"{count} sync(s) per step, host blocked {_us(row.host_us_per_step)} per step"
        lib = row.detail.get("library_frame")
        if lib:
            what += f" (in {lib})"
    elif "pageable-h2d" in kinds:
        mb = row.detail.get("bytes_per_step", 0) / 1e6
        what = (
            f"{count} pageable copy(ies) per step ({mb:,.1f} MB), host {_us(row.host_us_per_step)}, "
            f"GPU {_us(row.gpu_us_per_step)} per step"
        )
    elif "h2d" in kinds:
        what = f"{count} host-to-device copy(ies) per step, GPU {_us(row.gpu_us_per_step)} per step"
    elif "alloc" in kinds:
        what = f"{count} cudaMalloc/cudaFree per step, host {_us(row.host_us_per_step)} per step"
    elif "fp32-gemm" in kinds:
        tf = row.detail.get("tf32_kernels", 0)
        k = row.detail.get("kernels", 0) or 1
        mode = (
            "on TF32 tensor cores" if tf == k else ("in plain FP32" if tf == 0 else "partly TF32")
        )
        what = f"FP32 matrix products {mode}: GPU {_us(row.gpu_us_per_step)} per step"
    elif "sdpa-math" in kinds:
        what = f"attention on the math backend: GPU {_us(row.gpu_us_per_step)} per step"
    elif "input-wait" in kinds:
        what = (
            f"the GPU idled {_us(row.gpu_us_per_step)} per step inside DataLoader.__next__ "
            f"(host {_us(row.host_us_per_step)})"
        )
    elif "loader-restart" in kinds:
        what = f"DataLoader workers started again in the window: host {_us(row.host_us_per_step)} per step"
    elif "gpu-idle" in kinds:
        what = (
            f"the GPU idled about {_us(row.gpu_us_per_step)} per step while the host ran this "
            f"line (estimated: {row.detail.get('estimated_from', '')})"
        )
    elif "gloo" in kinds:
        what = (
            f"{count} gloo collective(s) per step taking {_us(row.host_us_per_step)}, "
            f"{row.detail.get('sync_calls', 0) / steps:.0f} stream sync(s) inside"
        )
    else:
        what = f"GPU {_us(row.gpu_us_per_step)} per step"
    where = ""
    if row.at and row.at != [f"{row.path}:{row.line}"]:
        where = " at " + ", ".join(row.at[:3]) + (" ..." if len(row.at) > 3 else "")
    return f"traced on {device} over {steps} steps: {what}{where}"


# Static rules about torch.compile, matched against its own log (the recorder's compile.jsonl):
# GPU510 (code dynamo cannot put in its graph) at the statement, by a logged graph break there.
COMPILE_JOIN = frozenset({"GPU510"})


def _join_compile(row: Row, events: list[dict], texts, device: str) -> None:
    """Judge a compile rule's finding by the graph breaks torch.compile logged at its statement.

    Confirmed: dynamo logged a graph break there. Not observed: dynamo compiled code of that file
    (it logged something there) and logged no break at this statement. Not exercised: no
    compile activity in that file in the run (the function may never have been compiled)."""
    path = row.path
    _, lines = _scope_lines("statement", path, row.line, texts)
    span = set(lines) if lines is not None else {row.line}
    mine = [e for e in events if isinstance(e, dict) and e.get("in_tree") and e.get("path") == path]
    hits = [e for e in mine if e.get("kind") == "graph-break" and e.get("line") in span]
    if hits:
        row.status = CONFIRMED
        row.kinds = ["graph-break"]
        row.count_per_step = 0.0
        row.at = sorted({f"{path}:{e['line']}" for e in hits})
        reasons: dict[str, int] = {}
        for e in hits:
            why = str(e.get("reason") or "?")
            reasons[why] = reasons.get(why, 0) + 1
        why = max(reasons, key=lambda k: reasons[k])
        row.detail = {"count": len(hits), "reasons": reasons}
        row.evidence = (
            f"torch.compile on {device} logged {len(hits)} graph break(s) at this statement: {why}"
        )
        for e in hits:
            e["matched"] = row.code
    elif mine:
        row.status = NOT_OBSERVED
        row.evidence = "torch.compile compiled code of this file and logged no graph break here"
    else:
        row.status = NOT_EXERCISED
        row.evidence = "torch.compile logged nothing in this file during the run"


def compile_rows(events: list[dict], device: str = "the GPU") -> list[Row]:
    """torch.compile's graph breaks and recompiles (the recorder's ``compile.jsonl``), one row per
    place in the checked tree and kind, with how often and why: whole-run counts, not per step
    (a graph break is paid on every call of its function once compiled, a recompile once).
    Places outside the tree (libraries) are left out; the record's ``compile`` keeps them."""
    groups: dict[tuple, list[dict]] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("kind") not in ("graph-break", "recompile"):
            continue
        if not e.get("in_tree") or not isinstance(e.get("line"), int) or e.get("matched"):
            continue
        groups.setdefault((e["kind"], str(e.get("path")), e["line"]), []).append(e)
    rows = []
    for (kind, path, line), group in sorted(groups.items()):
        reasons: dict[str, int] = {}
        for e in group:
            why = str(e.get("reason") or "?")
            reasons[why] = reasons.get(why, 0) + 1
        why = max(reasons, key=lambda k: reasons[k])
        what = "graph break(s)" if kind == "graph-break" else "recompile(s)"
        steps = sorted({e["step"] for e in group if isinstance(e.get("step"), int)})
        row = Row(RUNTIME_ONLY, path, line, None, f"{KIND_TEXT[kind]}: {why}", kinds=[kind])
        row.detail = {"count": len(group), "reasons": reasons, "steps": steps[:20]}
        if kind == "recompile" and group[0].get("function"):
            row.detail["function"] = group[0]["function"]
        row.evidence = (
            f"torch.compile logged {len(group)} {what} here on {device}"
            + (f" (at step {', '.join(map(str, steps[:5]))})" if steps else "")
            + f": {why}"
        )
        rows.append(row)
    return rows
