"""What ``gpulint trace`` prints and records: the table, SARIF, and the evidence record."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from gpulint import __version__

from . import evidence
from .stats import summarize
from .trace_join import CONFIRMED, NOT_EXERCISED, NOT_MEASURED, NOT_OBSERVED, RUNTIME_ONLY, Row
from .trace_verdict import Verdict, headline, verdict

STATUS_MARK = {
    CONFIRMED: "confirmed",
    RUNTIME_ONLY: "runtime-only",
    NOT_OBSERVED: "not observed",
    NOT_EXERCISED: "not exercised",
    NOT_MEASURED: "not measured",
}


def _window_samples(window: dict | None) -> list[float]:
    """Per-step wall times (ms) of the window's steps, from the recorder's step clock."""
    if not window:
        return []
    walls = window.get("step_wall_s") or []
    w, n = window.get("warmup", 0), window.get("steps", 0)
    # step_wall_s[i] is step i+2's duration; the window is steps w+1 .. w+n.
    picked = walls[max(w - 1, 0) : max(w - 1, 0) + n]
    return [x * 1e3 for x in picked]


def step_ms(window: dict | None) -> dict | None:
    """The window's step time from its own steps: median, min, max (ms) and how many.

    Each step's wall time comes from the recorder's step clock, so the figure is the recorded
    window's own: not the window's total divided by a configured count (a trimmed recording
    keeps fewer steps than it was configured with), and free of what happens at the window's
    two ends (the profiler starting and flushing its buffers at the closing synchronize)."""
    samples = _window_samples(window)
    if not samples:
        return None
    ordered = sorted(samples)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "median": round(median, 3),
        "mean": round(sum(samples) / len(samples), 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
        "steps": len(samples),
    }


# What a step of a sampled window was, in the order the report names them.
STEP_ROLES = ("recorded", "warm-up", "after", "idle", "before")
_ROLE_WORDS = {
    "recorded": "recorded",
    "warm-up": "profiler warm-up",
    "after": "after a recorded step (stop, collect, CUPTI teardown)",
    "idle": "unrecorded, profiler started before",
    "before": "before the profiler first started",
}


def step_roles(window: dict | None) -> dict[int, str]:
    """What each step of a sampled window (``--every``) was, by program step: ``recorded``, its
    profiler ``warm-up`` step, the step ``after`` a recorded one (where the profiler stops,
    collects its events and, between cycles, detaches CUPTI), ``before`` (the profiler had not
    started yet: the untraced program, in the traced process) or ``idle`` (unrecorded, after the
    profiler first started). Empty for a window without sampling (every step recorded)."""
    if not window or not window.get("profiled"):
        return {}
    recorded = {s for s in window["profiled"] if isinstance(s, int)}
    warm = {s for s in window.get("warm_steps") or [] if isinstance(s, int)}
    w, n = window.get("warmup", 0), window.get("steps", 0)
    first = min(recorded | warm) if recorded | warm else w + n + 1
    roles = {}
    for s in range(w + 1, w + n + 1):
        if s in recorded:
            roles[s] = "recorded"
        elif s in warm:
            roles[s] = "warm-up"
        elif s - 1 in recorded:
            roles[s] = "after"
        elif s < first:
            roles[s] = "before"
        else:
            roles[s] = "idle"
    return roles


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _pct(a: float, b: float) -> float:
    return round((a / b - 1) * 100, 1)


def overhead(traced: dict | None, untraced: dict | None) -> dict | None:
    """Tracing overhead: the traced window's mean step against the untraced one's (the mean:
    what the whole window cost, sampled steps, exports and all), with the medians' ratio beside
    it, and, for a sampled run (``--every``), each kind of step's own mean against it (``parts``,
    by ``step_roles``).

    Against drift between runs (a launch-bound program's step follows the host's speed, and the
    untraced run is another process, minutes apart): where the traced window has steps before
    the profiler first started (sampling), ``in_process`` states the overhead against those
    steps of the same process, and how far they are from the untraced run's (``runs_differ``:
    the drift the first figure carries)."""
    t, u = step_ms(traced), step_ms(untraced)
    if not t or not u or u["mean"] <= 0 or u["median"] <= 0:
        return None
    out: dict[str, Any] = {
        "traced_ms": t,
        "untraced_ms": u,
        "pct": _pct(t["mean"], u["mean"]),
        "pct_median": _pct(t["median"], u["median"]),
    }
    profiled = (traced or {}).get("profiled") or []
    walls = (traced or {}).get("step_wall_s") or []

    def wall(s: int) -> float | None:
        return walls[s - 2] * 1e3 if 0 <= s - 2 < len(walls) else None

    own = [x for x in (wall(s) for s in profiled if isinstance(s, int)) if x is not None]
    if own:
        out["profiled_steps"] = len(own)
        out["profiled_pct"] = _pct(_mean(own), u["mean"])
    by_role: dict[str, list[float]] = {}
    for s, role in step_roles(traced).items():
        x = wall(s)
        if x is not None:
            by_role.setdefault(role, []).append(x)
    if by_role:
        out["parts"] = {
            role: {
                "steps": len(by_role[role]),
                "mean_ms": round(_mean(by_role[role]), 3),
                "pct": _pct(_mean(by_role[role]), u["mean"]),
                # each kind's share of the window's extra time, in points of overhead
                "points": round(
                    (sum(by_role[role]) - len(by_role[role]) * u["mean"])
                    / (u["mean"] * t["steps"])
                    * 100,
                    1,
                ),
            }
            for role in STEP_ROLES
            if role in by_role
        }
    before = by_role.get("before") or []
    if len(before) >= 3:
        base = _mean(before)
        inside: dict[str, Any] = {
            "baseline_ms": round(base, 3),
            "steps": len(before),
            "pct": _pct(t["mean"], base),
            "runs_differ_pct": _pct(base, u["mean"]),
        }
        if by_role.get("idle"):
            inside["idle_pct"] = _pct(_mean(by_role["idle"]), base)
        out["in_process"] = inside
    return out


def _variant(name: str, label: str, window: dict | None) -> dict | None:
    samples = _window_samples(window)
    if window is None or len(samples) < 3:  # no window: no samples
        return None
    v: dict[str, Any] = {
        "name": name,
        "label": label,
        "unit": "ms",
        "better": "lower",
        "status": "ok",
    }
    v.update(summarize(samples))
    v["samples"] = samples
    v["extra"] = {"median_step_ms": (step_ms(window) or {}).get("median")}
    return v


def build_record(rec: dict, analysis, rows: list[Row], untraced: dict | None, root, sha) -> dict:
    """A ``gpulint.evidence/1`` record of bench ``trace``: the window's step times (traced and,
    with --overhead, untraced), the per-step summary, and one entry per row, with the sha256 of
    every file a row names so a later check quotes a line only while the file is unchanged."""
    cfg = rec.get("config") or {}
    device = dict(rec.get("device") or {})
    device.setdefault("name", "unknown")
    versions = {
        "gpulint": __version__,
        "torch": device.pop("torch", None),
        "cuda": device.pop("cuda", None),
    }
    variants = []
    traced = _variant(
        "traced_step", "traced step (profiler, sync-debug, line ranges)", rec.get("window")
    )
    if traced:
        variants.append(traced)
    plain = _variant("untraced_step", "untraced step (same program, same steps)", untraced)
    if plain:
        variants.append(plain)
    headline = None
    if traced and plain:
        headline = {
            "baseline": "traced_step",
            "improved": "untraced_step",
            "what": "tracing",
            "per": "per step",
            "versus": "untraced",
        }
    target = cfg.get("target") or {}
    program = (
        ["-m", target.get("name", "")]
        if target.get("kind") == "module"
        else [target.get("name", "")]
    ) + list(target.get("args", []))
    files = {}
    for r in rows:
        for p in {r.path, *(a.rsplit(":", 1)[0] for a in r.at)}:
            if p not in files and not p.startswith("<"):
                digest = sha(p)
                if digest:
                    files[p] = digest
    return {
        "schema": evidence.SCHEMA,
        "bench": "trace",
        "timestamp": evidence.now_utc(),
        "command": "gpulint trace -- python " + " ".join(program),
        "argv": [
            "gpulint",
            "trace",
            "--steps",
            str(cfg.get("steps")),
            "--warmup",
            str(cfg.get("warmup")),
            "--",
            "python",
            *program,
        ],
        "config": {
            "steps": cfg.get("steps"),
            "warmup": cfg.get("warmup"),
            "program": program,
            "root": str(root),
            "traced_step_ms": step_ms(rec.get("window")),
            "untraced_step_ms": step_ms(untraced),
            "overhead": overhead(rec.get("window"), untraced),
        },
        "device": device,
        "versions": versions,
        "variants": variants,
        "headline": headline,
        "checks": {},
        "ok": True,
        "summary": analysis.summary,
        "verdict": verdict(
            analysis.summary, rows, (step_ms(untraced) or {}).get("median", 0) * 1e3 or None
        ).as_dict(),
        "lines": [r.as_dict() for r in rows],
        "files": files,
        # torch.compile's own log of the run: graph breaks and recompiles, with where and why
        "compile": [e for r in rec.get("ranks") or [rec] for e in (r.get("compile") or [])[:500]],
    }


def _us(x: float) -> str:
    if x >= 1000:
        return f"{x / 1000:,.2f} ms"
    return f"{x:,.0f} µs" if x >= 10 else f"{x:.1f} µs"


def render_table(rows: list[Row], record: dict, limit: int = 8) -> str:
    """The verdict first, then the per-line table: the ``limit`` costliest rows (0: all)."""
    s = record.get("summary", {})
    cfg = record.get("config", {})
    head = [
        f"gpulint trace: {' '.join(cfg.get('program', []))} on {record['device'].get('name')}, "
        f"{s.get('steps')} traced steps after {cfg.get('warmup')} warm-up",
    ]
    if s.get("ranks"):
        head[0] += f", {s['ranks']} ranks (costs per rank, the mean; the step, the slowest rank's)"
    v = record.get("verdict")
    if v:
        head += headline(Verdict(**v))
    if not s.get("gpu_measured", True):
        head.append(
            f"step {_us(s.get('step_us') or 0)} (median, traced); no CUDA device: "
            "GPU time, syncs and copies not measured"
        )
    elif s.get("step_us"):
        busy = s.get("gpu_busy_fraction")
        head.append(
            f"step {_us(s['step_us'])} (median, traced); GPU busy {_us(s['gpu_busy_us_per_step'])} "
            f"per step ({busy * 100:.0f}%), {s.get('kernels_per_step')} kernels per step"
            if busy is not None
            else f"step {_us(s['step_us'])}"
        )
    ov = cfg.get("overhead")
    if ov:
        t, u = ov["traced_ms"], ov["untraced_ms"]
        line = (
            f"overhead: {t['mean']:,.2f} ms per step traced vs {u['mean']:,.2f} ms untraced "
            f"({ov['pct']:+.0f}% mean over {t['steps']} steps, {ov['pct_median']:+.0f}% median)"
        )
        if ov.get("profiled_steps"):
            line += (
                f"; the {ov['profiled_steps']} profiled steps themselves {ov['profiled_pct']:+.0f}%"
            )
        head.append(line)
        parts = ov.get("parts") or {}
        if parts:
            head.append(
                "overhead by step (mean vs untraced; points of the window's overhead): "
                + ", ".join(
                    f"{p['steps']} {_ROLE_WORDS[role]} {p['pct']:+.0f}% ({p['points']:+.1f})"
                    for role, p in parts.items()
                )
            )
        inside = ov.get("in_process")
        if inside:
            text = (
                f"overhead in-process: {inside['pct']:+.0f}% against the {inside['steps']} "
                f"steps before the profiler started ({inside['baseline_ms']:,.2f} ms)"
            )
            if "idle_pct" in inside:
                text += f"; unrecorded steps after it {inside['idle_pct']:+.0f}%"
            text += (
                f"; those steps are {inside['runs_differ_pct']:+.0f}% from the untraced run's "
                f"(drift between runs; its steps {u['min']:,.2f}..{u['max']:,.2f} ms)"
            )
            head.append(text)
    comp = [r for r in rows if set(r.kinds) & {"graph-break", "recompile"}]
    if comp:
        gb = [r for r in comp if "graph-break" in r.kinds]
        rc = [r for r in comp if "recompile" in r.kinds]
        parts = []
        if gb:
            parts.append(
                f"{sum(r.detail.get('count', 0) for r in gb)} graph break(s) at "
                + ", ".join(f"{r.path}:{r.line}" for r in gb[:4])
            )
        if rc:
            parts.append(
                f"{sum(r.detail.get('count', 0) for r in rc)} recompile(s) at "
                + ", ".join(f"{r.path}:{r.line}" for r in rc[:4])
            )
        head.append("torch.compile: " + "; ".join(parts))
    cols = ("status", "where", "code", "per step", "host", "GPU", "what")
    table = []
    shown = rows if limit <= 0 else rows[:limit]
    for r in shown:
        n = r.count_per_step
        table.append(
            (
                STATUS_MARK[r.status],
                f"{r.path}:{r.line}",
                r.code or "-",
                (f"{n:.1f}×" if n else "-"),
                _us(r.host_us_per_step) if r.host_us_per_step else "-",
                _us(r.gpu_us_per_step) if r.gpu_us_per_step else "-",
                f"{r.message if r.status == RUNTIME_ONLY else _short(r.message)}: {r.evidence}",
            )
        )
    widths = [
        max(len(c), *(len(t[i]) for t in table)) if table else len(c) for i, c in enumerate(cols)
    ]
    widths[-1] = len(cols[-1])
    lines = head + [""]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    for t in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip())
    if len(shown) < len(rows):
        lines.append(
            f"... {len(rows) - len(shown)} more row(s): --rows 0 shows all, --json has all"
        )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("")
    lines.append(
        ", ".join(f"{v} {k}" for k, v in counts.items()) or "no findings and no runtime costs"
    )
    return "\n".join(lines)


def _short(message: str, width: int = 60) -> str:
    first = message.split(":")[0] if ":" in message[:width] else message
    return first if len(first) <= width else first[: width - 1] + "…"


def render_sarif(rows: list[Row], root: pathlib.Path, record: dict) -> str:
    """SARIF 2.1.0: static findings as gpulint reports them, their messages carrying the status
    and the measured cost; runtime-only costs as results of rules ``trace/<kind>``."""
    from gpulint.diagnostics import Finding, Severity
    from gpulint.reporters import REPORTERS

    findings = []
    extra = []
    for r in rows:
        if r.code:
            findings.append(
                Finding(
                    path=str(root / r.path),
                    line=r.line,
                    col=1,
                    code=r.code,
                    message=f"{r.message} [trace: {r.status}; {r.evidence}]",
                    severity=Severity.WARNING,
                )
            )
        else:
            extra.append(r)
    doc = json.loads(
        REPORTERS["sarif"](
            findings, files_checked=len({r.path for r in rows}), root=root, read_text=None
        )
    )
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    index = {}
    for r in extra:
        rid = f"trace/{r.kinds[0] if r.kinds else 'cost'}"
        if rid not in index:
            index[rid] = len(rules)
            rules.append(
                {
                    "id": rid,
                    "name": rid.replace("/", "-"),
                    "shortDescription": {
                        "text": f"Runtime-only cost seen by gpulint trace: {r.message}."
                    },
                    "fullDescription": {
                        "text": "A cost measured on the GPU that no static rule reported at this line."
                    },
                    "defaultConfiguration": {"level": "note"},
                    "properties": {"tags": ["gpulint", "performance", "trace"]},
                }
            )
        run["results"].append(
            {
                "ruleId": rid,
                "ruleIndex": index[rid],
                "level": "note",
                "message": {"text": f"{r.message}: {r.evidence}"},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": r.path, "uriBaseId": "%SRCROOT%"},
                            "region": {"startLine": max(r.line, 1)},
                        }
                    }
                ],
                "properties": {"costUsPerStep": round(r.cost_us_per_step, 1), "status": r.status},
            }
        )
    return json.dumps(doc, indent=2)
