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
    t.add_argument(
        "--every",
        type=int,
        default=1,
        help="profile one step in every K (the window is steps x K long; default 1: every step)",
    )
    t.add_argument(
        "--sample",
        choices=["spread", "tail"],
        default="spread",
        help="with --every: spread (default) records the last step of each cycle of K steps, "
        "CUPTI detached in between; tail records the window's last N steps one after the "
        "other, the steps before them untraced",
    )
    t.add_argument(
        "--keep-cupti",
        action="store_true",
        help="with --every K --sample spread: leave CUPTI attached between recorded steps (the "
        "behaviour before 2026-12-07; unrecorded steps then pay for it)",
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
    t.add_argument(
        "--rows", type=int, default=8, help="rows of the per-line table (default 8; 0: all)"
    )
    t.add_argument("program", nargs="*", help="-- python train.py [args]")
    t.set_defaults(func=trace_command)


def _err(msg: str) -> None:
    print(f"gpulint trace: {msg}", file=sys.stderr, flush=True)


# Interpreter options that take a value (python -W error -X dev train.py).
_PY_OPTS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})
LAUNCHERS = ("torchrun",)
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's options that take no value; every other option takes one (--opt v or --opt=v).
_TORCHRUN_FLAGS = frozenset(
    {
        "--standalone",
        "--module",
        "-m",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
        "--no-python",
        "--no_python",
        "--use-env",
        "--use_env",
    }
)


def _is_python(word: str) -> bool:
    base = os.path.basename(word)
    return base.startswith("python") and not base.endswith(".py")


def _shebang_python(path: str) -> str | None:
    """The interpreter a script's ``#!`` line names, when it is a Python one; else None."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env" and len(words) > 1:
        words = words[1:]
        if words and words[0] == "-S":
            words = words[1:]
        found = shutil.which(words[0]) if words else None
        return found if found and _is_python(words[0]) else None
    if words and _is_python(words[0]) and os.path.exists(words[0]):
        return words[0]
    return None


def _torchrun(words: list[str]) -> dict | str:
    """torchrun's own options, the script (or ``-m`` module) and its arguments."""
    opts: list[str] = []
    module = False
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-"):
            break
        if w in ("--no-python", "--no_python"):
            return "torchrun --no-python runs no Python program: nothing to trace"
        if w in ("-m", "--module"):
            module = True
        elif w in _TORCHRUN_FLAGS or "=" in w:
            opts.append(w)
        else:
            if i + 1 >= len(words):
                return f"torchrun {w} needs a value"
            opts += [w, words[i + 1]]
            i += 1
        i += 1
    rest = words[i:]
    if not rest:
        return "name the program torchrun runs: gpulint trace -- torchrun [options] train.py"
    nproc = 1
    for j, w in enumerate(opts):
        name, _, val = w.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            val = val or (opts[j + 1] if j + 1 < len(opts) else "1")
            nproc = int(val) if val.isdigit() else (os.cpu_count() or 1) if val == "cpu" else 0
    if module:
        return {
            "kind": "module",
            "name": rest[0],
            "args": rest[1:],
            "launcher": opts,
            "nproc": nproc,
        }
    if not os.path.isfile(rest[0]):
        return f"{rest[0]}: no such file"
    return {"kind": "path", "name": rest[0], "args": rest[1:], "launcher": opts, "nproc": nproc}


def parse_program(program: list[str], module: str | None) -> tuple[dict, str] | str:
    """``(target, interpreter)`` from the words after ``--``, or an error message.

    The forms: ``python [opts] train.py args``, ``python -m pkg.mod args``, ``python -c CODE
    args``, ``train.py args`` (a file), a console script found on PATH (``mytrain args``: its
    file is run, by the interpreter its ``#!`` line names), and ``torchrun [opts] train.py`` or
    ``python -m torch.distributed.run [opts] train.py`` (one host; every rank is traced).
    ``target["python_opts"]`` holds the interpreter's own options (``-u``, ``-W error``)."""
    words = list(program)
    if words and words[0] == "--":
        words = words[1:]
    interpreter = sys.executable
    py_opts: list[str] = []
    if words and _is_python(words[0]):
        found = shutil.which(words[0])
        if not found:
            return f"{words[0]}: no such interpreter"
        interpreter = found
        words = words[1:]
        while words and words[0].startswith("-") and words[0] not in ("-m", "-c", "-"):
            if words[0] in _PY_OPTS_WITH_VALUE and len(words) > 1:
                py_opts += words[:2]
                words = words[2:]
            else:
                py_opts.append(words.pop(0))
    elif words and os.path.basename(words[0]) in LAUNCHERS:
        found = shutil.which(words[0])
        if found:
            interpreter = _shebang_python(found) or interpreter
        words = ["-m", "torch.distributed.run", *words[1:]]
    target: dict | str
    if module:
        target = {"kind": "module", "name": module, "args": words}
    elif words and words[0] == "-m":
        if len(words) < 2:
            return "-m needs a module name"
        if words[1] in LAUNCHER_MODULES:
            target = _torchrun(words[2:])
        else:
            target = {"kind": "module", "name": words[1], "args": words[2:]}
    elif words and words[0] == "-c":
        if len(words) < 2:
            return "-c needs the program's text"
        target = {"kind": "code", "name": "-c", "code": words[1], "args": words[2:]}
    elif not words:
        return "name the program: gpulint trace -- python train.py [args]"
    elif os.path.isfile(words[0]):
        target = {"kind": "path", "name": words[0], "args": words[1:]}
    else:
        found = shutil.which(words[0])
        if not found:
            return f"{words[0]}: no such file, and no such command on PATH"
        shebang = _shebang_python(found)
        if shebang is None:
            return f"{words[0]} ({found}) is no Python script: nothing gpulint can trace"
        interpreter = shebang
        target = {"kind": "path", "name": found, "args": words[1:], "command": words[0]}
    if isinstance(target, str):
        return target
    if py_opts:
        target["python_opts"] = py_opts
    return target, interpreter


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
    target = cfg.get("target") or {}
    cmd = [interpreter, *target.get("python_opts", [])]
    if target.get("launcher") is not None:
        # torchrun itself starts the ranks (its rendezvous, its environment), each one running
        # the recorder, which writes to rank<RANK>/ of the recording.
        cmd += ["-m", "torch.distributed.run", *target["launcher"]]
    cmd += ["-m", "gpulint.runtime.trace_runner", str(out / "config.json")]
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
    status = _combined_status(out)
    status["returncode"] = proc.returncode
    return status, timed_out


def rank_folders(folder: pathlib.Path) -> list[pathlib.Path]:
    """The per-rank recordings of a multi-process run (rank0, rank1, ...), else the folder."""
    ranks = []
    for p in folder.glob("rank*"):
        if p.is_dir() and p.name[4:].isdigit():
            ranks.append((int(p.name[4:]), p))
    return [p for _, p in sorted(ranks)] or [folder]


def _combined_status(out: pathlib.Path) -> dict:
    """One status for the run: the first rank that did not finish, else rank 0's."""
    statuses = [_read_json(f / "status.json") for f in rank_folders(out)]
    if not any(statuses):
        return {"phase": "never started"}
    for i, st in enumerate(statuses):
        if not st or st.get("phase") != "done":
            st = dict(st or {"phase": "never started"})
            if len(statuses) > 1:
                st["rank"] = i
            return st
    return dict(statuses[0] or {})


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
    """Everything a recording folder holds (missing parts are None or empty). A run of several
    processes (torchrun) keeps one recording per rank (``rank<N>/``): rank 0's is returned, with
    every rank's under ``ranks``."""
    folders = rank_folders(folder)
    if folders != [folder]:
        ranks = [_read_one(f) for f in folders]
        config = _read_json(folder / "config.json") or {}
        for r in ranks:
            r["config"] = r["config"] or config
        return dict(ranks[0], ranks=ranks)
    return _read_one(folder)


def window_of(folder: pathlib.Path) -> dict | None:
    """The step clock of a recording (rank 0's in a multi-process run)."""
    return _read_json(rank_folders(folder)[0] / "window.json")


def _read_one(folder: pathlib.Path) -> dict:
    trace = None
    for name in ("trace.json.gz", "trace.json"):
        p = folder / name
        if p.exists():
            trace = _load_trace(p)
            break
    # a sampled run (--every K): one trace per recorded step, trace-0.json.gz, trace-1...
    cycles = sorted(
        (p for p in folder.glob("trace-*.json.gz") if p.name[6:-8].isdigit()),
        key=lambda p: int(p.name[6:-8]),
    )
    traces = [t for t in (_load_trace(p) for p in cycles) if t]
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
    compile_events = []
    p = folder / "compile.jsonl"
    if p.exists():
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                compile_events.append(entry)
    return {
        "compile": compile_events,
        "config": _read_json(folder / "config.json")
        or _read_json(folder.parent / "config.json")
        or {},
        "status": _read_json(folder / "status.json") or {},
        "window": _read_json(folder / "window.json"),
        "device": _read_json(folder / "device.json") or {},
        "trace": trace or (traces[0] if traces else None),
        "cycles": traces if cycles else None,
        "syncs": syncs,
    }


def _load_trace(p: pathlib.Path):
    opener = gzip.open if p.name.endswith(".gz") else open
    try:
        with opener(p, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, EOFError, UnicodeDecodeError, ValueError):
        return None  # a profile cut short (the program was killed while exporting)


def _failure(status: dict, timed_out: bool, cfg: dict, timeout: float) -> str | None:
    total = cfg["warmup"] + cfg["steps"] * max(cfg.get("every", 1) or 1, 1)
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
    return f"the program ended after {seen} of {total} steps: lower --warmup/--steps/--every"


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
    cfg = {
        "root": str(root),
        "steps": args.steps,
        "warmup": args.warmup,
        "every": max(args.every, 1),
        "sample": args.sample,
        "cupti_teardown": not args.keep_cupti,
        "target": target,
    }
    for part in args.without:
        cfg[part.replace("-", "_")] = False
    # JSON and SARIF on stdout stay parseable: the program's own stdout goes to stderr then.
    stdout = sys.stderr if args.format != "table" and not args.output_file else None
    untraced = None
    if args.overhead:
        _err(f"untraced run: {args.warmup} + {args.steps * max(args.every, 1)} steps")
        status, timed_out = run_child(
            dict(cfg, mode="untraced"), interpreter, base / "untraced", args.timeout, stdout
        )
        problem = _failure(status, timed_out, cfg, args.timeout)
        if problem:
            _err(f"untraced run: {problem}; recording kept in {base / 'untraced'}")
            return EXIT_FAIL
        untraced = window_of(base / "untraced")
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
    # The pedantic tier too: its costs are often negligible on real code, which is what a
    # trace measures; a finding the run confirms is worth reading whatever its tier.
    config.extend_select = [*config.extend_select, "PEDANTIC"]
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


def analyse_recording(rec: dict, args=None):
    """The analysis of a recording: one rank's, or the ranks' of a torchrun job merged."""
    from .trace_map import analyse, merge

    cfg = rec["config"] or {}
    steps = cfg.get("steps", getattr(args, "steps", 5))
    warm = cfg.get("warmup", getattr(args, "warmup", 3))
    analyses = []
    for r in rec.get("ranks") or [rec]:
        if r.get("cycles"):
            # sampled: each recorded step is its own trace; the sync warnings are its step's
            profiled = (r.get("window") or {}).get("profiled") or []
            parts = [
                analyse(t, r["syncs"], window=(s, s) if isinstance(s, int) else None)
                for t, s in zip(r["cycles"], profiled + [None] * len(r["cycles"]), strict=False)
            ]
            analyses.append(merge(parts, over="steps"))
        elif r.get("trace"):
            # one trace of consecutive steps: every step (warm-up + 1 ..), or a sampled run's
            # last steps (--sample tail), which its window names
            profiled = [
                s for s in (r.get("window") or {}).get("profiled") or [] if isinstance(s, int)
            ]
            span = (min(profiled), max(profiled)) if profiled else (warm + 1, warm + steps)
            analyses.append(analyse(r["trace"], r["syncs"], window=span))
    analysis = merge(analyses)
    device = rec.get("device") or {}
    if device:
        # the recorder saw the device: a run without CUDA measured no GPU time at all
        analysis.summary["gpu_measured"] = "compute_capability" in device
    return analysis


def joined(rec: dict, root: pathlib.Path, untraced: dict | None, folder, args=None):
    """The analysis of a recording, its rows (joined with ``gpulint check`` of ``root``) and its
    evidence record."""
    from .trace_join import compile_rows, join
    from .trace_report import build_record, step_ms

    analysis = analyse_recording(rec, args)
    findings, _ = static_findings(root)
    texts = _texts(root)
    target = (rec["config"] or {}).get("target") or {}
    if target.get("kind") == "code" and isinstance(target.get("code"), str):
        # `python -c CODE`: the code is checked too, as the file "-c" the trace names
        findings += code_findings(target["code"])
        code, base_texts = target["code"], texts

        def texts(path: str, code=code, base_texts=base_texts) -> str | None:
            return code if path == "-c" else base_texts(path)

    device = rec["device"].get("name", "the GPU")
    plain = untraced or window_of(pathlib.Path(folder) / "untraced")
    untraced_ms = step_ms(plain)
    untraced_us = untraced_ms["median"] * 1e3 if untraced_ms else None
    events = [dict(e) for r in rec.get("ranks") or [rec] for e in r.get("compile") or []]
    rows = join(analysis, findings, texts, device, untraced_us, compile_events=events)
    rows += compile_rows(events, device)  # the graph breaks no finding accounts for
    record = build_record(rec, analysis, rows, plain, root, _sha_of(root))
    return analysis, rows, record


def record_of_recording(folder: pathlib.Path, root: pathlib.Path) -> dict | str:
    """The evidence record of a recording folder (``check --trace``), or why there is none."""
    rec = read_recording(folder)
    if not rec["trace"]:
        return "no profile in this recording"
    return joined(rec, root.resolve(), None, folder)[2]


def _report(args, root: pathlib.Path, rec: dict, untraced: dict | None, folder) -> int:
    from .trace_report import render_sarif, render_table

    _, rows, record = joined(rec, root, untraced, folder, args)
    path = None
    if not args.no_record:
        path = evidence.write_record(record, root / evidence.EVIDENCE_DIR)
    if args.format == "json":
        text = json.dumps(record, indent=2)
    elif args.format == "sarif":
        text = render_sarif(rows, root, record)
    else:
        text = render_table(rows, record, limit=args.rows)
    if args.output_file:
        args.output_file.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    if path:
        _err(f"evidence record {os.path.relpath(path)}; recording in {os.path.relpath(folder)}")
    return EXIT_OK


def code_findings(code: str) -> list[dict]:
    """``gpulint check`` of a ``python -c`` program's text, as the file ``-c``."""
    from gpulint.engine import lint_source

    return [
        {"code": f.code, "path": "-c", "line": f.line, "message": f.message, "related": []}
        for f in lint_source(code, "-c.py")
    ]


def _sha_of(root: pathlib.Path):
    def sha(path: str) -> str | None:
        try:
            return hashlib.sha256((root / path).read_bytes()).hexdigest()
        except OSError:
            return None

    return sha
