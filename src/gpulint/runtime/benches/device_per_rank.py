"""Ranks with no device of their own: two training processes that both use `cuda:0`, as every
rank of a host does when nothing calls `torch.cuda.set_device(local_rank)` (GPU406), against
one process alone on `cuda:0`, and, where two GPUs are visible, the right placement: rank i on
`cuda:i`.

Each rank is a process of its own (``python -m gpulint.runtime.benches.device_per_rank
--rank``) running a plain train step, no process group: an MLP (2 x [Linear 4096->4096, ReLU],
Linear 4096->1; batch 1024; fp32; AdamW), warmed up, then timed with CUDA events over a block
of steps per run. The ranks of a variant start each run together (a barrier over their pipes),
so their runs overlap; a variant's figure for a run is its slowest rank's, as a synchronous
job runs at its slowest rank's pace, and every rank's own figures are kept in `extra`. Beside
the times, the GPU memory the ranks take: what `torch.cuda.mem_get_info` shows in use on each
GPU once every rank has warmed up, less what was in use before they started (CUDA contexts
included), and each rank's `torch.cuda.max_memory_reserved`.

On one GPU only the sharing cost is measured (what two ranks on one GPU cost each other); what
a job loses to its idle GPUs needs the right placement beside it, and that needs two GPUs. The
record's `config.gpu_count` and `config.note` say which was measured. NCCL is not involved: it
refuses two ranks on one GPU ("Duplicate GPU detected") rather than share it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import types
from typing import Any, cast

from ..harness import BenchResult, Context, variant_from, variant_not_run
from . import _child

CONFIG = {
    "batch": 1024,
    "width": 4096,
    "hidden_layers": 2,
    "dtype": "float32",
    "optimizer": "AdamW(lr=1e-4)",
    "warmup_steps": 10,
    "steps_per_run": 50,
    "process_group": None,
}
LABELS = {
    "shared_gpu0": "2 ranks both on cuda:0 (no `set_device`), slower rank",
    "alone_gpu0": "1 rank alone on cuda:0",
    "own_gpu": "2 ranks, rank i on cuda:i (`set_device(local_rank)`), slower rank",
}
PLACEMENTS = {"alone_gpu0": [0], "shared_gpu0": [0, 0], "own_gpu": [0, 1]}
TIMEOUT_S = 300.0


def note(gpu_count: int) -> str:
    if gpu_count >= 2:
        return (
            f"{gpu_count} GPUs visible: two ranks sharing cuda:0 against one alone there and "
            "against rank i on cuda:i (the right placement)"
        )
    return (
        f"{gpu_count} GPU visible: only the sharing cost is measured (two ranks on cuda:0 "
        "against one alone); the right placement, rank i on cuda:i, needs 2 GPUs"
    )


def run(ctx: Context) -> BenchResult:
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("device-per-rank", {}))
    if not ctx.cuda:
        return BenchResult(
            config=cfg,
            variants=[
                variant_not_run(
                    n, lab, "ms", "lower", "failed", "refused: the ranks need an NVIDIA GPU"
                )
                for n, lab in LABELS.items()
            ],  # fmt: skip
        )
    torch = ctx.torch
    gpu_count = torch.cuda.device_count()
    raw: dict[str, dict] = {}
    for name in ("alone_gpu0", "shared_gpu0", "own_gpu"):
        devices = PLACEMENTS[name]
        if max(devices) >= gpu_count:
            continue
        ctx.say(f"device-per-rank: {name}, {len(devices)} process(es) on cuda:{devices}")
        ctx.sync()
        torch.cuda.empty_cache()
        before = {d: _used(torch, d) for d in sorted(set(devices))}
        raw[name] = launch_ranks(devices, cfg, ctx.runs)
        raw[name]["used_before"] = {str(d): u for d, u in before.items()}
    return to_result(cfg, raw, gpu_count)


def _used(torch, device: int) -> int:
    free, total = torch.cuda.mem_get_info(device)
    return int(total - free)


def launch_ranks(devices: list[int], cfg: dict, runs: int, timeout: float = TIMEOUT_S) -> dict:
    """Start one rank process per entry of ``devices``, release them through ``runs + 1``
    barriers together, and collect each rank's JSON report: ``{"ranks": [...]}`` or
    ``{"error": ...}``."""
    procs: list[subprocess.Popen] = []
    errs = []
    for rank, device in enumerate(devices):
        err = tempfile.TemporaryFile(mode="w+")
        errs.append(err)
        args = ["--rank", str(rank), "--device-index", str(device), "--runs", str(runs),
                "--config", json.dumps(cfg, sort_keys=True)]  # fmt: skip
        procs.append(
            subprocess.Popen(
                _child.command("device_per_rank", args),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=_child.child_env(),
            )
        )

    def kill_all() -> None:
        for p in procs:
            p.kill()

    timer = threading.Timer(timeout, kill_all)
    timer.start()
    seen: list[list[str]] = [[] for _ in procs]
    try:
        for _ in range(runs + 1):
            for i, p in enumerate(procs):
                if not _wait_ready(p, seen[i]):
                    return {"error": _why(i, p, seen[i], errs[i])}
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
        ranks = []
        for i, p in enumerate(procs):
            out, _ = p.communicate()
            seen[i] += out.splitlines()
            report = _child.last_json("\n".join(seen[i]))
            if report is None or "error" in report:
                return {"error": _why(i, p, seen[i], errs[i])}
            ranks.append(report)
        return {"ranks": ranks}
    except (OSError, ValueError) as exc:  # a pipe closed under us: the child died
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        timer.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for err in errs:
            err.close()


def _wait_ready(p: subprocess.Popen, seen: list[str]) -> bool:
    assert p.stdout is not None
    while True:
        line = p.stdout.readline()
        if not line:
            return False
        seen.append(line.rstrip("\n"))
        if line.startswith("READY"):
            return True


def _why(rank: int, p: subprocess.Popen, seen: list[str], err) -> str:
    report = _child.last_json("\n".join(seen))
    if report and "error" in report:
        return f"rank {rank}: {report['error']}"[:300]
    err.seek(0)
    return f"rank {rank} exited {p.poll()}: {_child.tail(err.read())}"[:300]


def to_result(cfg: dict, raw: dict[str, dict], gpu_count: int) -> BenchResult:
    """The record's parts from each placement's rank reports: no torch needed, so it is tested
    on any machine."""
    cfg = dict(cfg)
    cfg["gpu_count"] = gpu_count
    cfg["note"] = note(gpu_count)
    cfg["placements"] = {n: [f"cuda:{d}" for d in PLACEMENTS[n]] for n in LABELS}
    memory: dict[str, dict] = {}
    variants = []
    for name, label in LABELS.items():
        part = raw.get(name)
        if part is None:
            reason = f"needs {max(PLACEMENTS[name]) + 1} GPUs, {gpu_count} visible"
            variants.append(variant_not_run(name, label, "ms", "lower", "unavailable", reason))
            continue
        if "error" in part:
            variants.append(variant_not_run(name, label, "ms", "lower", "failed", part["error"]))
            continue
        ranks = part["ranks"]
        per_rank = [[float(x) for x in r["ms"]] for r in ranks]
        slowest = [max(run) for run in zip(*per_rank, strict=True)]
        used_before = {int(k): int(v) for k, v in part.get("used_before", {}).items()}
        taken: dict[str, float] = {}
        for d in sorted({int(r["device"]) for r in ranks}):
            used = max(int(r["used_bytes"]) for r in ranks if int(r["device"]) == d)
            taken[f"cuda:{d}"] = (used - used_before.get(d, 0)) / 2**20
        memory[name] = {
            "mib_taken_per_gpu": taken,
            "max_reserved_mib_per_rank": [r["max_reserved"] / 2**20 for r in ranks],
        }
        variants.append(
            variant_from(
                name, label, slowest, "ms", "lower",
                ranks=len(ranks), per_rank_ms=per_rank,
                steps_per_run=cfg["steps_per_run"], **memory[name],
            )
        )  # fmt: skip
    cfg["memory"] = memory
    own_ok = any(v["name"] == "own_gpu" and v["status"] == "ok" for v in variants)
    headline = {
        "baseline": "shared_gpu0",
        "improved": "own_gpu" if own_ok else "alone_gpu0",
        "what": "two ranks on GPU 0 instead of one GPU each"
        if own_ok
        else "a second rank on the same GPU (no `set_device`)",
        "per": "per step of each rank",
    }
    return BenchResult(config=cfg, variants=variants, headline=headline, checks={})


def _rank_main(cfg: dict, device_index: int, runs: int) -> dict:
    """In a rank's process: build the step on ``cuda:device_index``, warm up, then at each
    barrier (print READY, read a line) time one block of steps with CUDA events."""
    import sys

    import torch

    from ..harness import cuda_block_ms
    from .sync import mlp_step

    dev = torch.device("cuda", device_index)
    # The events below record on the current device's stream, so the current device must be
    # the rank's own: for cuda:0 this is what a missing set_device leaves anyway.
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    opt, train = mlp_step(cast(Any, types.SimpleNamespace(torch=torch, device=dev)), cfg)

    def step():
        opt.zero_grad(set_to_none=True)
        return train()

    def barrier(n: int) -> None:
        print(f"READY {n}", flush=True)
        if not sys.stdin.readline():
            raise RuntimeError("the parent closed the barrier")

    for _ in range(int(cfg["warmup_steps"])):
        step()
    torch.cuda.synchronize()
    barrier(0)
    free, total = torch.cuda.mem_get_info(dev)  # every rank has warmed up by now
    steps = int(cfg["steps_per_run"])
    ms = []
    for r in range(runs):
        barrier(r + 1)
        per_step, loss = cuda_block_ms(torch, step, steps)
        ms.append(per_step)
    return {
        "device": device_index,
        "ms": ms,
        "used_bytes": int(total - free),
        "total_bytes": int(total),
        "max_reserved": int(torch.cuda.max_memory_reserved(dev)),
        "loss": float(loss.item()),
    }


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--device-index", type=int, default=0)
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--config", required=True)
    a = p.parse_args()
    try:
        res = _rank_main(json.loads(a.config), a.device_index, a.runs)
    except Exception as exc:  # report, never crash the parent's table
        res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    print(json.dumps(res), flush=True)
