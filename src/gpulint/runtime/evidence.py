"""Evidence records: what a bench measured, written so that a lint message can quote it.

Each bench run writes one JSON file to ``.gpulint/evidence/`` (one record per bench per run, never
rewritten). ``gpulint check`` reads them back with ``load_records`` and appends
``evidence_note(records, bench)`` to the messages of the rules that cite that bench, e.g.
GPU101: "on NVIDIA H200 an .item() every step cost +15% per step (1,606 → 1,399 µs, 5 runs
alternating; per run +1% to +19%; host time to issue one step: 1,464 µs)".

This module imports no torch: the linter reads evidence on machines that have no GPU.

Schema ``gpulint.evidence/1`` (``validate_record`` checks it)::

    schema      "gpulint.evidence/1"
    bench       one of BENCHES, or "trace" (a `gpulint trace` record: also `lines`, `files`)
    timestamp   ISO 8601, UTC
    command     the exact command line; argv: the list
    config      the bench's full configuration (shapes, dtypes, iterations, runs)
    device      {name, index, compute_capability, sm_count, memory_bytes, table_name}
    versions    {gpulint, python, torch, cuda, cudnn, nccl, driver}
    variants    [{name, label, unit, better: lower|higher, status: ok|failed|unavailable,
                  median, min, max, mean, stdev, spread, runs, samples: [...], extra: {...}}]
    headline    {baseline, improved, what, per, versus, context, paired} or null: the
                comparison a rule quotes; `context` optionally names a variant (or a list of
                them) that explains the pair rather than being compared (h2d's host memcpy;
                sync's host time to issue a step and GPU time to run one), quoted after the
                pair; `paired` says the two were timed run by run, alternating, so their
                samples pair up
    headlines   optional {claim: headline}: further comparisons in the same record, for rules
                that cite one claim of a bench (e.g. dataloader "persistent")
    checks      {name: {ok: bool, ...}}: correctness gates (a faster wrong answer is a regression)
    ok          false when a check failed or a variant that must run did not
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import pathlib

from .stats import MIN_RUNS, fmt, overlap

SCHEMA = "gpulint.evidence/1"
EVIDENCE_DIR = pathlib.Path(".gpulint") / "evidence"

# The bench names rules may cite, each with what it measures.
BENCHES = {
    "sync": "host sync: .item() every step vs every N steps (small MLP train step)",
    "h2d": "host-to-device copy: pageable vs pinned memory",
    "dataloader": "DataLoader: workers, pinned memory, persistent workers, prefetch",
    "attention": "SDPA backends (math, efficient, flash, cuDNN) and registered flash impls",
    "train-step": "transformer train step: strict FP32, TF32, BF16 autocast, torch.compile",
    "graph-break": "compiled MLP blocks: branchless vs a data-dependent `if` or `.item()` per block",
    "recompile": "torch.compile once vs again every step (same def, fresh closures)",
    "no-grad": "inference with autograd on vs no_grad vs inference_mode: time and memory",
    "eval-mode": "evaluation forward under no_grad: model in training mode vs eval mode",
    "anomaly": "train step with autograd anomaly detection on vs off",
    "graph-capture": "CUDA graph: host value frozen at capture, static inputs vs eager",
    "launch-blocking": "train step in a fresh process with CUDA_LAUNCH_BLOCKING=1 vs unset",
    "device-per-rank": "two ranks sharing cuda:0 (no set_device) vs one alone / one GPU each",
    "int32-offset": "Triton row offsets in int32 past 2^31 elements vs int64: outcome and cost",
    "matmul": "matmul 8192^3: bf16, fp32 with TF32 off and on",
    "copy": "device-to-device copy bandwidth (bytes read + written)",
    "nccl": "NCCL all-reduce: correctness and bus bandwidth (under torchrun)",
    "ddp": "DDP: one training step checked against a single-process reference",
    "fsdp": "FSDP2 (fully_shard): one training step checked against a reference",
    "ddp-no-sync": "DDP gradient accumulation: all-reduce every micro-step vs no_sync() (torchrun)",
}
# Every record kind: the benches, and `gpulint trace` (your own program, costs per line).
KINDS = {**BENCHES, "trace": "gpulint trace: your own program's steps, costs per source line"}

UNITS = {"us", "ms", "s", "GB/s", "TB/s", "TFLOP/s", "samples/s"}
UNIT_TEXT = {"us": "µs"}
STATUSES = {"ok", "failed", "unavailable"}
MAX_QUOTED = 300  # characters of a record's text that a lint message may quote


class EvidenceError(ValueError):
    """A record that does not follow the schema."""


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def validate_record(record: object) -> list[str]:
    """Every way ``record`` departs from the schema; an empty list means it is valid."""
    errors: list[str] = []
    if not isinstance(record, dict):
        return ["a record is a JSON object"]

    def need(key: str, kind: type | tuple[type, ...], where: dict = record, at: str = "") -> bool:
        if key not in where:
            errors.append(f"{at}{key}: missing")
            return False
        if not isinstance(where[key], kind):
            errors.append(f"{at}{key}: expected {_kind_name(kind)}")
            return False
        return True

    if need("schema", str) and record["schema"] != SCHEMA:
        errors.append(f"schema: {record['schema']!r} is not {SCHEMA!r}")
    if need("bench", str) and record["bench"] not in KINDS:
        errors.append(f"bench: unknown {record['bench']!r}")
    if need("timestamp", str):
        try:
            _dt.datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        except ValueError:
            errors.append("timestamp: not ISO 8601")
    need("command", str)
    need("argv", list)
    need("config", dict)
    if need("device", dict):
        need("name", str, record["device"], "device.")
    if need("versions", dict):
        need("gpulint", str, record["versions"], "versions.")
    need("ok", bool)
    names: set[str] = set()
    if need("variants", list):
        for i, v in enumerate(record["variants"]):
            at = f"variants[{i}]."
            if not isinstance(v, dict):
                errors.append(f"variants[{i}]: expected an object")
                continue
            if need("name", str, v, at):
                names.add(v["name"])
            need("label", str, v, at)
            if need("unit", str, v, at) and v["unit"] not in UNITS:
                errors.append(f"{at}unit: unknown {v['unit']!r}")
            if need("better", str, v, at) and v["better"] not in ("lower", "higher"):
                errors.append(f"{at}better: 'lower' or 'higher'")
            if need("status", str, v, at) and v["status"] not in STATUSES:
                errors.append(f"{at}status: one of {sorted(STATUSES)}")
            if v.get("status") == "ok":
                for key in ("median", "min", "max"):
                    # A time or a rate, divided by in every note: positive and finite.
                    if need(key, (int, float), v, at) and not 0 < v[key] < math.inf:
                        errors.append(f"{at}{key}: expected a positive finite number")
                if need("runs", int, v, at) and v["runs"] < MIN_RUNS:
                    errors.append(f"{at}runs: {v['runs']} < {MIN_RUNS}")
                if need("samples", list, v, at) and not all(
                    isinstance(x, (int, float)) and 0 < x < math.inf for x in v["samples"]
                ):
                    errors.append(f"{at}samples: expected positive finite numbers")
                elif "samples" in v and len(v["samples"]) != v.get("runs"):
                    errors.append(
                        f"{at}samples: {len(v['samples'])} samples for {v.get('runs')} runs"
                    )
                if all(isinstance(v.get(k), (int, float)) for k in ("median", "min", "max")):
                    if not v["min"] <= v["median"] <= v["max"]:
                        errors.append(f"{at}: min <= median <= max does not hold")
            elif v.get("status") in ("failed", "unavailable"):
                need("reason", str, v, at)
    heads = {"headline": record.get("headline")}
    extra_heads = record.get("headlines", {})
    if not isinstance(extra_heads, dict):
        errors.append("headlines: expected an object")
        extra_heads = {}
    heads.update({f"headlines.{claim}": h for claim, h in extra_heads.items()})
    for where, headline in heads.items():
        if headline is None and where == "headline":
            continue
        if not isinstance(headline, dict):
            errors.append(
                f"{where}: expected an object" + (" or null" if where == "headline" else "")
            )
            continue
        for key in ("baseline", "improved", "what"):
            if need(key, str, headline, f"{where}.") and key != "what":
                if headline[key] not in names:
                    errors.append(f"{where}.{key}: no variant named {headline[key]!r}")
        context = headline.get("context")
        if context is not None and not isinstance(context, (str, list)):
            errors.append(f"{where}.context: expected a variant name or a list of them")
            continue
        for name in _context_names(headline):
            if name not in names:
                errors.append(f"{where}.context: no variant named {name!r}")
    # Text a message quotes (device, what, label, per, versus): a sentence, not a flood.
    quoted = [
        record.get("device", {}).get("name") if isinstance(record.get("device"), dict) else None
    ]
    variants = record.get("variants")
    quoted += (
        [v.get("label") for v in variants if isinstance(v, dict)]
        if isinstance(variants, list)
        else []
    )
    quoted += [
        h.get(k) for h in heads.values() if isinstance(h, dict) for k in ("what", "per", "versus")
    ]
    if any(isinstance(q, str) and len(q) > MAX_QUOTED for q in quoted):
        errors.append(
            f"a quoted text (device, label, what, per, versus) over {MAX_QUOTED} characters"
        )
    if "checks" in record and not isinstance(record["checks"], dict):
        errors.append("checks: expected an object")
    if record.get("bench") == "trace":
        _validate_trace(record, errors)
    return errors


TRACE_STATUSES = {"confirmed", "not exercised", "not observed", "not measured", "runtime-only"}


def _validate_trace(record: dict, errors: list[str]) -> None:
    """A trace record's per-line entries (``lines``) and the files they name (``files``)."""
    lines, files = record.get("lines"), record.get("files")
    if not isinstance(lines, list):
        errors.append("lines: expected a list (a trace record's per-line results)")
        lines = []
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in files.items()
    ):
        errors.append("files: expected an object of path -> sha256")
    for i, entry in enumerate(lines):
        at = f"lines[{i}]."
        if not isinstance(entry, dict):
            errors.append(f"lines[{i}]: expected an object")
            continue
        for key, kind in (("path", str), ("line", int), ("status", str), ("evidence", str)):
            if not isinstance(entry.get(key), kind):
                errors.append(f"{at}{key}: expected {kind.__name__}")
        if entry.get("status") not in TRACE_STATUSES:
            errors.append(f"{at}status: one of {sorted(TRACE_STATUSES)}")
        if entry.get("code") is not None and not isinstance(entry.get("code"), str):
            errors.append(f"{at}code: expected a rule code or null")
        for key in ("count_per_step", "host_us_per_step", "gpu_us_per_step", "cost_us_per_step"):
            if not isinstance(entry.get(key), (int, float)) or entry[key] < 0:
                errors.append(f"{at}{key}: expected a number >= 0")


def trace_key(path: str, line: int, code: str) -> str:
    """How a trace's note on one finding is keyed among the evidence notes."""
    return f"trace:{path}:{line}:{code}"


def trace_status_key(path: str, line: int, code: str) -> str:
    """How a trace's verdict on one finding ("confirmed", "not observed") is keyed."""
    return f"trace-status:{path}:{line}:{code}"


def trace_statuses(records: list[dict], sha_of) -> dict[str, str]:
    """Per static finding the newest trace judged, its status: ``{trace_status_key(...):
    "confirmed" | "not observed"}``, under the same rule as ``trace_notes`` (the newest trace
    that names the line, only while the file is the one traced)."""
    out: dict[str, str] = {}
    for r in sorted(
        (r for r in records if r.get("bench") == "trace" and r.get("ok")),
        key=lambda r: r["timestamp"],
        reverse=True,
    ):
        files = r.get("files") or {}
        for entry in r.get("lines", []):
            code, path, status = entry.get("code"), entry.get("path"), entry.get("status")
            if not code or status not in ("confirmed", "not observed"):
                continue
            key = trace_status_key(path, entry["line"], code)
            if key not in out and sha_of(path) is not None and sha_of(path) == files.get(path):
                out[key] = status
    return out


def trace_notes(records: list[dict], sha_of) -> dict[str, str]:
    """Per static finding a trace judged (confirmed or not observed), the sentence a lint message
    quotes: ``{trace_key(path, line, code): "traced on NVIDIA H200 over 5 steps: ..."}``.

    Only the newest trace that names a line counts, and only while the file is byte for byte the
    one traced (``sha_of(path)``, relative to the project root, equals the recorded sha256): a
    line number in an edited file may point at other code.
    """
    notes: dict[str, str] = {}
    traces = sorted(
        (r for r in records if r.get("bench") == "trace" and r.get("ok")),
        key=lambda r: r["timestamp"],
        reverse=True,
    )
    current: dict[str, str | None] = {}
    for r in traces:
        files = r.get("files") or {}
        when = r["timestamp"][:10]
        for entry in r.get("lines", []):
            code, path = entry.get("code"), entry.get("path")
            if not code or entry.get("status") not in ("confirmed", "not observed"):
                continue
            key = trace_key(path, entry["line"], code)
            if key in notes:
                continue
            if path not in current:
                current[path] = sha_of(path)
            if current[path] is None or current[path] != files.get(path):
                continue
            text = entry["evidence"]
            if entry["status"] == "not observed":
                text = f"not observed: {text}"
            notes[key] = f"{text} ({when})"
    return notes


def _context_names(headline: dict) -> list[str]:
    """`context` is one variant name or a list of them."""
    context = headline.get("context")
    if not context:
        return []
    return [context] if isinstance(context, str) else [str(c) for c in context]


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def check_record(record: dict) -> dict:
    errors = validate_record(record)
    if errors:
        raise EvidenceError("; ".join(errors))
    return record


def write_record(record: dict, directory: pathlib.Path | str = EVIDENCE_DIR) -> pathlib.Path:
    """Validate and write one record as a new file; never overwrites an earlier one."""
    check_record(record)
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = record["timestamp"].replace(":", "").replace("-", "")
    base = f"{stamp}-{record['bench']}-{os.getpid()}"
    path = directory / f"{base}.json"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"{base}-{n}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


MAX_RECORD_FILES = 2000  # records read per folder: the newest matter, a flood is cut off


def _candidate_files(path: pathlib.Path) -> list[pathlib.Path]:
    if not path.is_dir():
        return [path]
    nested = path / EVIDENCE_DIR
    folder = nested if nested.is_dir() else path
    return sorted(folder.glob("*.json"))[-MAX_RECORD_FILES:]


def load_records(
    paths: list[pathlib.Path],
    errors: list[str] | None = None,
    problems: list[tuple[str, str]] | None = None,
) -> list[dict]:
    """Valid records from ``.gpulint/evidence/*.json`` under each directory, or from each file.

    A directory is searched for ``.gpulint/evidence/`` first and read directly otherwise (so both
    a project root and the evidence directory itself work). A file may hold one record or a list.
    Malformed files and invalid records are skipped; a description of each lands in ``errors``
    (and, as ``(file, why)``, in ``problems``). Only regular files are read, each capped at
    ``MAX_RECORD_BYTES`` (a record is a repository's file: a FIFO or a link to ``/dev/zero``
    named ``*.json`` must neither hang nor exhaust the run); a link is followed only inside the
    folder it was found in or the path named.
    """
    from gpulint.safeio import MAX_RECORD_BYTES, Unreadable, read_text

    sink = errors if errors is not None else []
    told = problems if problems is not None else []

    def bad(file: pathlib.Path, where: str, why: str) -> None:
        sink.append(f"{where}: {why}")
        told.append((str(file), f"evidence record {why}"))

    found: list[dict] = []
    seen: set[pathlib.Path] = set()
    for raw in paths:
        root = pathlib.Path(raw)
        if not os.path.lexists(root):
            sink.append(f"{root}: no such file or directory")
            continue
        for file in _candidate_files(root):
            resolved = pathlib.Path(os.path.abspath(file))
            if resolved in seen:
                continue
            seen.add(resolved)
            try:
                data = json.loads(read_text(file, MAX_RECORD_BYTES, [root]))
            except Unreadable as exc:
                bad(file, str(file), f"unreadable ({exc})")
                continue
            except (ValueError, RecursionError) as exc:
                bad(
                    file,
                    str(file),
                    f"unreadable (not JSON: {str(exc)[:200] or 'nested too deeply'})",
                )
                continue
            for i, rec in enumerate(data if isinstance(data, list) else [data]):
                errs = validate_record(rec)
                if errs:
                    where = f"{file}[{i}]" if isinstance(data, list) else str(file)
                    bad(file, where, "; ".join(errs[:3]))
                    continue
                rec = dict(rec)
                rec["_source"] = str(file)
                found.append(rec)
    return found


def newest(records: list[dict], bench: str, device: str | None = None) -> dict | None:
    """The newest valid record of ``bench`` (on ``device`` if given)."""
    mine = [
        r
        for r in records
        if r.get("bench") == bench and (device is None or r.get("device", {}).get("name") == device)
    ]
    return max(mine, key=lambda r: r["timestamp"], default=None)


def variant(record: dict, name: str) -> dict | None:
    for v in record.get("variants", []):
        if v.get("name") == name:
            return v
    return None


def _paired_ratios(head: dict, base: dict, better: dict, slow) -> list[float]:
    """Per-run ratios of a headline whose variants were timed run by run, alternating."""
    a, b = base.get("samples") or [], better.get("samples") or []
    if not head.get("paired") or len(a) != len(b) or len(a) < 3 or not all(a) or not all(b):
        return []
    return [slow(x, y) for x, y in zip(a, b, strict=True)]


def _signed(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.0f}%"


def evidence_note(records: list[dict], bench: str, claim: str | None = None) -> str | None:
    """One sentence on the newest record of ``bench`` with a usable headline, or None.

    ``claim`` picks one of the record's ``headlines`` (e.g. ``("dataloader", "persistent")``)
    instead of its main ``headline``; records without that claim are skipped.

    "on NVIDIA H200 an fp32 matmul with TF32 off was 8.0× slower than with TF32 on (51.1 → 410
    TFLOP/s, 5 runs)"
    The pair is always baseline → improved, in the bench's own unit. Where the two ranges
    overlap the sentence says the difference is inside run-to-run noise; for a ``paired``
    headline (variants timed alternately, run by run) noise means the per-run ratios fall on
    both sides of 1, and their range is quoted; the cost is always the ratio of the two medians
    shown, so the sentence's percentage and its pair agree; where the baseline was
    not slower it says so: evidence is quoted as measured, never rounded towards the rule.
    """
    usable = []
    for r in records:
        head = r.get("headline") if claim is None else (r.get("headlines") or {}).get(claim)
        if r.get("bench") != bench or not head or not r.get("ok", False):
            continue
        base = variant(r, head.get("baseline", ""))
        better = variant(r, head.get("improved", ""))
        if base and better and base.get("status") == "ok" and better.get("status") == "ok":
            usable.append((r, head, base, better))
    if not usable:
        return None
    record, head, base, better = max(usable, key=lambda t: t[0]["timestamp"])
    device = record["device"]["name"]
    unit = UNIT_TEXT.get(base["unit"], base["unit"])
    runs = min(base["runs"], better["runs"])
    pair = f"{fmt(base['median'])} → {fmt(better['median'])} {unit}, {runs} runs"
    slow = (lambda b, i: b / i) if base["better"] == "lower" else (lambda b, i: i / b)
    ratio = slow(base["median"], better["median"])  # time ratio baseline / improved
    paired = _paired_ratios(head, base, better, slow)
    if paired:
        # Runs timed alternately: each run's ratio cancels the drift both variants shared, so
        # the ratios' signs, not the ranges, say whether the difference is real.
        pair += f" alternating; per run {_signed(min(paired))} to {_signed(max(paired))}"
        noise = min(paired) <= 1.0 < max(paired)
    else:
        noise = overlap(base, better)
    per = f" {head['per']}" if head.get("per") else ""
    versus = f" than {head['versus']}" if head.get("versus") else ""
    if noise:
        verdict = "made no difference beyond run-to-run spread"
    elif ratio <= 1.0:
        verdict = "was not slower here"
    elif ratio < 2.0:
        verdict = f"cost +{(ratio - 1) * 100:.0f}%{per}"
        if versus:
            verdict = f"was {(ratio - 1) * 100:.0f}% slower{per}{versus}"
    else:
        times = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}"
        verdict = f"was {times}× slower{per}{versus}"
    for name in _context_names(head):
        context = variant(record, name)
        if context and context.get("status") == "ok":
            what = context["label"].split(" (", 1)[0]
            unit = UNIT_TEXT.get(context["unit"], context["unit"])
            pair += f"; {what}: {fmt(context['median'])} {unit}"
    return f"on {device} {head['what']} {verdict} ({pair})"
