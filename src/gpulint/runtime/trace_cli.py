"""``gpulint trace``: run the user's own training step on the GPU, line by line.

``gpulint trace [--steps N] [--warmup W] [--timeout S] [--json|--format sarif] -- python train.py
[args]`` (or ``-m module``). The program runs in a child process (``trace_runner``) in a process
group of its own, so a hang past ``--timeout`` is stopped from here and what was recorded so far
is kept. Afterwards, with no torch needed, the recording is mapped to lines (``trace_map``),
joined with ``gpulint check`` of the same tree (``trace_join``), printed, and written as an
evidence record that later ``gpulint check`` runs quote for those lines. Everything gpulint
writes goes under ``<root>/.gpulint/``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

from . import evidence

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
TRACE_DIR = pathlib.Path(".gpulint") / "trace"


def register(subparsers) -> None:
    t = subparsers.add_parser(
        "trace",
        help="run your training step on the GPU and confirm or refute the static findings",
        description="Run a training program for a few steps under the PyTorch profiler and the "
        "CUDA sync-debug mode; map every sync, pageable copy, cudaMalloc/cudaFree, GPU idle gap, "
        "FP32 matrix product and math-backend attention to the line of your code that issued it; "
        "join that with `gpulint check` of the same tree. Usage: gpulint trace [options] -- "
        "python train.py [args] (or: -m package.module [-- args]). Needs gpulint[bench].",
    )
    t.add_argument("--steps", type=int, default=5, help="steps to trace (default 5, at least 3)")
    t.add_argument(
        "--warmup", type=int, default=3, help="untraced steps first (default 3, at least 1)"
    )
    t.add_argument(
        "--timeout", type=float, default=600.0, help="stop the program after S seconds (600)"
    )
    t.add_argument("-m", "--module", help="run a module (python -m MODULE)")
    t.add_argument("--json", action="store_true", help="print JSON (same as --format json)")
    t.add_argument("--format", choices=["table", "json", "sarif"], default="table")
    t.add_argument("--root", type=pathlib.Path, default=None, help="the checked tree (default .)")
    t.add_argument(
        "--overhead",
        action="store_true",
        help="also run the same steps untraced first, and state the tracing overhead",
    )
    t.add_argument("--force", action="store_true", help="run even if the GPU guard refuses")
    t.add_argument("--no-record", action="store_true", help="write no evidence record")
    t.add_argument(
        "--from-recording",
        type=pathlib.Path,
        help="analyse an earlier recording folder (.gpulint/trace/...) instead of running",
    )
    t.add_argument(
        "--output-file", "-o", type=pathlib.Path, help="write the table, JSON or SARIF here"
    )
    t.add_argument(
        "--without",
        action="append",
        choices=["lines", "shapes", "sync-debug"],
        default=[],
        help="leave out a part of the tracing (to see what the overhead is made of)",
    )
    t.add_argument("program", nargs="*", help="-- python train.py [args]")
    t.set_defaults(func=trace_command)


def _err(msg: str) -> None:
    print(f"gpulint trace: {msg}", file=sys.stderr, flush=True)


def parse_program(program: list[str], module: str | None) -> tuple[dict, str] | str:
    """``(target, interpreter)`` from the words after ``--``, or an error message."""
    words = list(program)
    if words and words[0] == "--":
        words = words[1:]
    interpreter = sys.executable
    if words and os.path.basename(words[0]).startswith("python") and not words[0].endswith(".py"):
        found = shutil.which(words[0])
        if not found:
            return f"{words[0]}: no such interpreter"
        interpreter = found
        words = words[1:]
    if module:
        return {"kind": "module", "name": module, "args": words}, interpreter
    if words and words[0] == "-m":
        if len(words) < 2:
            return "-m needs a module name"
        return {"kind": "module", "name": words[1], "args": words[2:]}, interpreter
    if not words:
        return "name the program: gpulint trace -- python train.py [args]"
    script = words[0]
    if not os.path.isfile(script):
        return f"{script}: no such file"
    return {"kind": "path", "name": script, "args": words[1:]}, interpreter


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def run_child(
    cfg: dict, interpreter: str, out: pathlib.Path, timeout: float, stdout=None
) -> tuple[dict, bool]:
    """Run the recorder; its final status and whether it had to be stopped for the timeout."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(cfg, out=str(out))
    (out / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    env = dict(os.environ)
    here = str(pathlib.Path(__file__).resolve().parents[2])  # the folder holding gpulint/
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = [interpreter, "-m", "gpulint.runtime.trace_runner", str(out / "config.json")]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=stdout)
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop(proc)
    except KeyboardInterrupt:
        _stop(proc)
        raise
    status = _read_json(out / "status.json") or {"phase": "never started"}
    status["returncode"] = proc.returncode
    return status, timed_out


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT first (the program's own cleanup runs), then SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_json(path: pathlib.Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_recording(folder: pathlib.Path) -> dict:
    """Everything a recording folder holds (missing parts are None or empty)."""
    trace = None
    for name in ("trace.json.gz", "trace.json"):
        p = folder / name
        if p.exists():
            opener = gzip.open if name.endswith(".gz") else open
            try:
                with opener(p, "rt", encoding="utf-8") as fh:
                    trace = json.load(fh)
            except (OSError, EOFError, UnicodeDecodeError, ValueError):
                trace = None  # a profile cut short (the program was killed while exporting)
            break
    syncs = []
    p = folder / "syncs.jsonl"
    if p.exists():
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                syncs.append(entry)
    return {
        "config": _read_json(folder / "config.json") or {},
        "status": _read_json(folder / "status.json") or {},
        "window": _read_json(folder / "window.json"),
        "device": _read_json(folder / "device.json") or {},
        "trace": trace,
        "syncs": syncs,
    }


def _failure(status: dict, timed_out: bool, cfg: dict, timeout: float) -> str | None:
    total = cfg["warmup"] + cfg["steps"]
    seen = status.get("steps_seen", 0)
    phase = status.get("phase")
    if timed_out:
        where = f"at step {seen} of {total}" if seen else "before its first step"
        return f"the program ran past --timeout {timeout:g} s ({where}) and was stopped"
    if phase == "done":
        return None
    err = status.get("error")
    if phase == "error":
        return f"the recorder could not start: {err}"
    if seen == 0:
        if phase == "failed":
            return f"the program failed before its first step: {err or 'see its output above'}"
        return (
            "the program ended without reaching a step (no optimizer.step(), no "
            "gpulint.trace.step()): nothing to trace"
        )
    if phase == "failed":
        return f"the program failed at step {seen + 1} of {total}: {err or 'see its output above'}"
    return f"the program ended after {seen} of {total} steps: lower --warmup/--steps"


def trace_command(args) -> int:
    if args.json:
        args.format = "json"
    if args.steps < 3:
        _err("--steps must be at least 3: fewer steps give no per-step figure worth quoting")
        return EXIT_USAGE
    if args.warmup < 1:
        _err("--warmup must be at least 1: the first step holds start-up costs")
        return EXIT_USAGE
    root = (args.root or pathlib.Path.cwd()).resolve()
    if args.from_recording:
        rec = read_recording(args.from_recording)
        if not rec["trace"]:
            _err(f"{args.from_recording}: no trace in this recording")
            return EXIT_FAIL
        return _report(args, root, rec, None, args.from_recording)

    parsed = parse_program(args.program, args.module)
    if isinstance(parsed, str):
        _err(parsed)
        return EXIT_USAGE
    target, interpreter = parsed
    from .guard import check_gpus

    report = check_gpus()
    if not report.ok and not args.force:
        _err(f"refused: {report.message}")
        return EXIT_FAIL
    _err(f"guard: {report.message}{' (--force)' if not report.ok else ''}")

    base = root / TRACE_DIR / f"{_stamp()}-{os.getpid()}"
    cfg = {"root": str(root), "steps": args.steps, "warmup": args.warmup, "target": target}
    for part in args.without:
        cfg[part.replace("-", "_")] = False
    # JSON and SARIF on stdout stay parseable: the program's own stdout goes to stderr then.
    stdout = sys.stderr if args.format != "table" and not args.output_file else None
    untraced = None
    if args.overhead:
        _err(f"untraced run: {args.warmup} + {args.steps} steps")
        status, timed_out = run_child(
            dict(cfg, mode="untraced"), interpreter, base / "untraced", args.timeout, stdout
        )
        problem = _failure(status, timed_out, cfg, args.timeout)
        if problem:
            _err(f"untraced run: {problem}; recording kept in {base / 'untraced'}")
            return EXIT_FAIL
        untraced = _read_json(base / "untraced" / "window.json")
    _err(f"traced run: {args.warmup} warm-up + {args.steps} traced steps; recording in {base}")
    status, timed_out = run_child(dict(cfg, mode="traced"), interpreter, base, args.timeout, stdout)
    problem = _failure(status, timed_out, cfg, args.timeout)
    rec = read_recording(base)
    if problem:
        kept = f"{len(rec['syncs'])} sync warning(s)" + (", the profile" if rec["trace"] else "")
        _err(f"{problem}; kept {kept} in {base}")
        return EXIT_FAIL
    if not rec["trace"]:
        _err(f"the window finished but no profile was written; see {base}")
        return EXIT_FAIL
    return _report(args, root, rec, untraced, base)


def static_findings(root: pathlib.Path) -> tuple[list[dict], dict[str, str]]:
    """``gpulint check`` of the tree, paths relative to ``root``; and the sources it read."""
    from gpulint.config import load_config
    from gpulint.engine import Linter

    config = load_config(root)
    linter = Linter(config, {})
    report = linter.run([root], jobs=1)
    out = []

    def rel(path: str) -> str:
        return os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")

    for f in report.findings:
        out.append(
            {
                "code": f.code,
                "path": rel(f.path),
                "line": f.line,
                "message": f.message,
                # where the cost is paid when the finding is a call of it (a callee's .item())
                "related": [[rel(r.path), r.line] for r in getattr(f, "related", ())],
            }
        )
    return out, {}


def _texts(root: pathlib.Path):
    cache: dict[str, str | None] = {}

    def text(path: str) -> str | None:
        if path not in cache:
            try:
                cache[path] = (root / path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                cache[path] = None
        return cache[path]

    return text


def _report(args, root: pathlib.Path, rec: dict, untraced: dict | None, folder) -> int:
    from .trace_join import join
    from .trace_map import analyse
    from .trace_report import build_record, render_sarif, render_table

    cfg = rec["config"] or {}
    steps, warm = cfg.get("steps", args.steps), cfg.get("warmup", args.warmup)
    analysis = analyse(rec["trace"], rec["syncs"], window=(warm + 1, warm + steps))
    findings, _ = static_findings(root)
    device = rec["device"].get("name", "the GPU")
    texts = _texts(root)
    plain = untraced or _read_json(pathlib.Path(folder) / "untraced" / "window.json")
    untraced_us = plain["window_s"] * 1e6 / plain["steps"] if plain else None
    rows = join(analysis, findings, texts, device, untraced_us)
    record = build_record(rec, analysis, rows, plain, root, _sha_of(root))
    path = None
    if not args.no_record:
        path = evidence.write_record(record, root / evidence.EVIDENCE_DIR)
    if args.format == "json":
        text = json.dumps(record, indent=2)
    elif args.format == "sarif":
        text = render_sarif(rows, root, record)
    else:
        text = render_table(rows, record)
    if args.output_file:
        args.output_file.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    if path:
        _err(f"evidence record {os.path.relpath(path)}; recording in {os.path.relpath(folder)}")
    return EXIT_OK


def _sha_of(root: pathlib.Path):
    def sha(path: str) -> str | None:
        try:
            return hashlib.sha256((root / path).read_bytes()).hexdigest()
        except OSError:
            return None

    return sha
