"""``gpulint probe``, ``gpulint bench``, ``gpulint roofline`` (and ``gpulint trace``, in trace_cli).

The main CLI calls ``register(subparsers)``; each subcommand's handler returns the exit code:
0 ok, 1 a measurement failed or was refused (no torch, no GPU, a shared GPU, an unknown
denominator), 2 a usage error. Importing this module imports no torch.
"""

from __future__ import annotations

import json
import pathlib
import sys

from . import evidence
from .stats import DEFAULT_RUNS, MIN_RUNS

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def register(subparsers) -> None:
    """Add ``probe``, ``bench`` and ``roofline`` to an argparse subparsers object."""
    from .benches import NAMES

    p = subparsers.add_parser(
        "probe",
        help="versions, devices, flash-attention impls, environment",
        description="Describe the machine: torch/CUDA/driver/cuDNN/NCCL "
        "versions, devices, registered flash-attention implementations and "
        "the environment variables that matter. Works with no GPU or torch.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=probe_command)

    b = subparsers.add_parser(
        "bench",
        help="measure the costs the rules cite (needs gpulint[bench] and a GPU)",
        description="Run evidence benches: warm-up, CUDA-event timing, at least 3 runs "
        "(median, min, max). Each bench appends a record to .gpulint/evidence/. Benches: "
        + ", ".join(f"{n} ({evidence.BENCHES[n]})" for n in NAMES)
        + "; 'all' runs every one.",
    )
    b.add_argument("names", nargs="*", metavar="NAME", help=f"{', '.join(NAMES)} or all")
    b.add_argument(
        "--runs",
        type=int,
        default=DEFAULT_RUNS,
        help=f"timed runs per variant (at least {MIN_RUNS}; default {DEFAULT_RUNS})",
    )
    b.add_argument("--json", action="store_true", help="print the records as JSON")
    b.add_argument(
        "--force",
        action="store_true",
        help="run even if the shared-GPU guard finds other processes or cannot check",
    )
    b.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="processes for nccl/ddp/fsdp/ddp-no-sync under torchrun (default: visible GPUs)",
    )
    b.add_argument(
        "--evidence-dir",
        type=pathlib.Path,
        default=evidence.EVIDENCE_DIR,
        help="where records are written (default .gpulint/evidence)",
    )
    b.add_argument("--no-record", action="store_true", help="write no evidence record")
    b.add_argument("--no-compile", action="store_true", help="train-step: skip torch.compile")
    b.add_argument(
        "--compare",
        nargs=2,
        type=pathlib.Path,
        metavar=("A", "B"),
        help="print A/B of two record files (or evidence dirs) and exit",
    )
    b.set_defaults(func=bench_command)

    r = subparsers.add_parser(
        "roofline",
        help="dense peak and memory bandwidth of a GPU, with the source",
        description="Dense peak TFLOP/s and memory bandwidth from gpulint's hardware table. "
        "Unknown devices and dtypes are refused unless you pass --peak with --source.",
    )
    r.add_argument("--device", required=True, help='GPU name, e.g. H200 or "NVIDIA H200"')
    r.add_argument("--dtype", required=True, help="bf16, fp16, tf32, fp8 or fp32")
    r.add_argument("--peak", type=float, help="dense peak TFLOP/s to use instead (needs --source)")
    r.add_argument("--source", help="where --peak comes from (datasheet, page)")
    r.add_argument("--bandwidth", type=float, help="memory bandwidth TB/s for a custom device")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=roofline_command)

    from .trace_cli import register as register_trace

    register_trace(subparsers)


def _err(msg: str) -> None:
    print(f"gpulint: {msg}", file=sys.stderr)


# ------------------------------------------------------------------------------------- probe


def probe_command(args) -> int:
    from .probe import collect, render

    info = collect()
    print(json.dumps(info, indent=2) if args.json else render(info))
    return EXIT_OK


# ---------------------------------------------------------------------------------- roofline


def roofline_command(args) -> int:
    from .roofline import RooflineRefused, lookup, render

    if args.peak is not None and not args.source:
        _err("--peak needs --source: say where the figure comes from")
        return EXIT_USAGE
    try:
        roof = lookup(
            args.device, args.dtype, peak=args.peak, source=args.source, bandwidth=args.bandwidth
        )
    except RooflineRefused as exc:
        _err(f"refused: {exc}")
        return EXIT_FAIL
    except ValueError as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(json.dumps(roof.as_dict(), indent=2) if args.json else render(roof))
    return EXIT_OK


# ------------------------------------------------------------------------------------- bench


def _read_side(path: pathlib.Path) -> list[dict]:
    errors: list[str] = []
    recs = evidence.load_records([path], errors)
    for e in errors:
        _err(f"skipped {e}")
    return recs


def bench_command(args) -> int:
    from .benches import DISTRIBUTED, NAMES

    if args.compare:
        from .report import render_compare

        a, b = (_read_side(p) for p in args.compare)
        if not a or not b:
            _err("--compare needs a valid evidence record on each side")
            return EXIT_USAGE
        print(render_compare(a, b, str(args.compare[0]), str(args.compare[1])))
        return EXIT_OK
    if not args.names:
        _err(f"name a bench: {', '.join(NAMES)} or all")
        return EXIT_USAGE
    unknown = [n for n in args.names if n != "all" and n not in NAMES]
    if unknown:
        _err(f"unknown bench {', '.join(unknown)}; known: {', '.join(NAMES)}, all")
        return EXIT_USAGE
    if args.runs < MIN_RUNS:
        _err(f"--runs must be at least {MIN_RUNS} (got {args.runs}): one run is no evidence")
        return EXIT_USAGE
    if args.nproc is not None and args.nproc < 1:
        _err("--nproc must be at least 1")
        return EXIT_USAGE
    wanted = list(NAMES) if "all" in args.names else [n for n in NAMES if n in args.names]
    try:
        import torch
    except ImportError:
        _err("refused: torch is not installed; the benches need it: pip install 'gpulint[bench]'")
        return EXIT_FAIL
    cuda = torch.cuda.is_available()
    local = [n for n in wanted if n not in DISTRIBUTED]
    if not cuda and local:
        _err(
            f"refused: no CUDA device visible to torch {torch.__version__} "
            f"({', '.join(local)} need an NVIDIA GPU; `gpulint probe` says what is there)"
        )
        return EXIT_FAIL
    if cuda:
        from .guard import check_gpus

        report = check_gpus()
        if not report.ok and not args.force:
            _err(f"refused: {report.message}")
            return EXIT_FAIL
        guard = {
            "ok": report.ok,
            "checked": report.checked,
            "forced": bool(args.force and not report.ok),
            "message": report.message,
        }
    else:
        guard = {
            "ok": True,
            "checked": False,
            "forced": False,
            "message": "CPU only: no GPU to guard",
        }
    print(
        f"[gpulint bench] guard: {guard['message']}{' (--force)' if guard['forced'] else ''}",
        file=sys.stderr,
    )
    return _run_benches(args, wanted, guard)


def _run_benches(args, wanted: list[str], guard: dict) -> int:
    import traceback

    from . import harness
    from .benches import DISTRIBUTED, distributed, load
    from .report import render_records

    prior = evidence.load_records([args.evidence_dir]) if args.evidence_dir.exists() else []
    ctx = harness.Context(args.runs, options={"no_compile": args.no_compile}, prior=prior)
    vers = harness.versions()
    command, argv = harness.command_line()
    records: list[dict] = []
    status = EXIT_OK
    total = len(wanted)

    def finish(name: str, result: harness.BenchResult, device: dict) -> None:
        nonlocal status
        result.config.setdefault("runs", args.runs)
        result.config["guard"] = guard
        rec = harness.make_record(
            name, result, device=device, vers=vers, command=command, argv=argv
        )
        records.append(rec)
        if not rec["ok"]:
            status = EXIT_FAIL
            _err(f"{name}: {'; '.join(rec.get('problems', []))}")
        if not args.no_record:
            path = evidence.write_record(rec, args.evidence_dir)
            print(f"[gpulint bench] {name}: record {path}", file=sys.stderr)

    for i, name in enumerate([n for n in wanted if n not in DISTRIBUTED], 1):
        ctx.say(f"[{i}/{total}] {name}")
        try:
            result = load(name).run(ctx)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            result = harness.BenchResult(
                config={},
                variants=[
                    harness.variant_not_run(
                        "run", name, "ms", "lower", "failed", f"{type(exc).__name__}: {exc}"[:500]
                    )
                ],
            )
        finish(name, result, ctx.device_info)
        if ctx.cuda:
            ctx.torch.cuda.empty_cache()

    modes = [n for n in wanted if n in DISTRIBUTED]
    if modes:
        nproc = args.nproc or (ctx.torch.cuda.device_count() if ctx.cuda else 1)
        ctx.say(f"[{total - len(modes) + 1}-{total}/{total}] {', '.join(modes)} under torchrun")
        raw = distributed.launch(modes, nproc, args.runs, say=ctx.say)
        for mode in modes:
            part = raw.get("modes", {}).get(mode) or {"error": raw.get("error", "no result")}
            result = distributed.to_results(mode, part, nproc)
            result.config["torchrun_command"] = " ".join(raw.get("command", []))
            finish(mode, result, ctx.device_info)

    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print(render_records(records))
    return status
