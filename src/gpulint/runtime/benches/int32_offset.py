"""Triton row offsets in int32 past 2^31 elements, and what widening them to int64 costs.

The kernels (`_int32_kernels`) add 1 in place to a row-major int8 tensor of 65,536 columns, one
program per (row, block of 1,024 columns), the pointer `x_ptr + row * stride_row + cols`
(GPU705's pattern): `int32` as written, `int64` with `tl.program_id(0).to(tl.int64)`.

- Past 2^31: a zeroed tensor of 32,800 rows (2,149,580,800 elements, 2.0 GiB) gets one launch
  of each variant, each in a child process of its own (an illegal address poisons the CUDA
  context of the process it happens in). From row 32,768 on, `row * 65536` passes 2^31 - 1 and
  wraps negative in int32. The child counts the rows that do not hold 1 afterwards. The int32
  outcome is recorded as seen (`config.int32_past_2_31.outcome`: `fault`, `wrong`, `correct` or
  `crashed`); the int64 variant must be correct (a check). Free GPU memory is checked first and
  the part is skipped, with the reason, where it would not fit.
- Below 2^31 (8,192 rows, 512 MiB), where both are right: both timed, alternating, to show what
  the 64-bit offset costs.

Without triton the bench refuses: its variants fail with the reason, the record says so, and
the command exits 1.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run
from . import _child

CONFIG = {
    "dtype": "int8",
    "cols": 65536,
    "block": 1024,
    "large_rows": 32800,  # 32,768 rows is 2^31 elements: the last 32 rows' offsets wrap
    "small_rows": 8192,
    "launches_per_run": 20,
    "memory_margin_bytes": 1 << 30,
}
LABELS = {
    "int64": "row offset widened, `tl.program_id(0).to(tl.int64)`",
    "int32": "row offset in int32 (`row * stride_row`)",
}


def refused(cfg: dict, reason: str) -> BenchResult:
    return BenchResult(
        config=cfg,
        variants=[
            variant_not_run(n, lab, "ms", "lower", "failed", reason) for n, lab in LABELS.items()
        ],  # fmt: skip
        checks={"prerequisites": {"ok": False, "reason": reason}},
    )


def large_bytes(cfg: dict) -> int:
    return int(cfg["large_rows"]) * int(cfg["cols"])  # int8: one byte an element


def run(ctx: Context) -> BenchResult:
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("int32-offset", {}))
    cfg["large_elements"] = large_bytes(cfg)
    if importlib.util.find_spec("triton") is None:
        return refused(cfg, "refused: triton is not installed (pip install triton); "
                            "the bench times Triton kernels")  # fmt: skip
    if not ctx.cuda:
        return refused(cfg, "refused: the Triton kernels need an NVIDIA GPU")
    torch = ctx.torch
    from . import _int32_kernels as kernels

    dev = ctx.device
    samples, small_ok = _time_small(ctx, kernels, cfg)
    torch.cuda.empty_cache()

    free, total = torch.cuda.mem_get_info(dev)
    need = large_bytes(cfg) + int(cfg["memory_margin_bytes"])
    large: dict[str, dict] = {}
    if free < need:
        why = f"not run: needs {need / 2**30:.1f} GiB free on the GPU, {free / 2**30:.1f} GiB free"
        large = {v: {"outcome": "not run", "reason": why} for v in LABELS}
    else:
        for variant in ("int64", "int32"):
            ctx.say(f"int32-offset: {variant} on {large_bytes(cfg):,} elements, child process")
            child = _child.run_child(
                "int32_offset", child_args(cfg, variant, dev.index or 0), timeout=300
            )
            large[variant] = outcome(child)
    return to_result(cfg, samples, small_ok, large, free_bytes=free, total_bytes=total)


def _time_small(ctx: Context, kernels, cfg: dict) -> tuple[dict[str, list[float]], bool]:
    """Both variants on a tensor below 2^31 elements: checked, then timed alternating (ms per
    launch). The tensor is freed on return."""
    torch = ctx.torch
    small = torch.zeros(
        int(cfg["small_rows"]), int(cfg["cols"]), dtype=torch.int8, device=ctx.device
    )
    for variant in LABELS:  # compile both, check both
        kernels.launch(small, variant, int(cfg["block"]))
    ctx.sync()
    small_ok = bool((small == 2).all().item())
    launches = int(cfg["launches_per_run"])

    def block(variant: str):
        def go():
            for _ in range(launches):
                kernels.launch(small, variant, int(cfg["block"]))

        return go

    ms = ctx.measure_interleaved({v: block(v) for v in LABELS}, warmup=1, label="int32-offset")
    return {v: [x / launches for x in values] for v, values in ms.items()}, small_ok


def child_args(cfg: dict, variant: str, device_index: int) -> list[str]:
    return ["--large", variant, "--config", json.dumps(cfg, sort_keys=True), "--device-index",
            str(device_index)]  # fmt: skip


def outcome(child: _child.ChildResult) -> dict:
    """What a large run did: the child's own report, or `crashed` where it printed none."""
    if child.result is None:
        return {"outcome": "crashed", "returncode": child.returncode, "error": child.error}
    return {**child.result, "returncode": child.returncode}


def to_result(
    cfg: dict,
    samples: dict[str, list[float]],
    small_ok: bool,
    large: dict[str, dict],
    *,
    free_bytes: int | None = None,
    total_bytes: int | None = None,
) -> BenchResult:
    """The record's parts from the measured samples (ms per launch), the small-tensor check and
    each large run's outcome: no torch needed, so it is tested on any machine."""
    cfg = dict(cfg)
    cfg["gpu_free_bytes"], cfg["gpu_total_bytes"] = free_bytes, total_bytes
    cfg["int32_past_2_31"] = large.get("int32", {"outcome": "not run"})
    cfg["int64_past_2_31"] = large.get("int64", {"outcome": "not run"})
    gib = 2 * cfg["small_rows"] * cfg["cols"] / 1e9  # bytes read + written per launch, in GB
    variants = [
        variant_from(
            v,
            LABELS[v],
            samples[v],
            "ms",
            "lower",
            rows=cfg["small_rows"],
            cols=cfg["cols"],
            gbps=gib / (statistics.median(samples[v]) * 1e-3),
        )  # fmt: skip
        for v in LABELS
    ]
    checks: dict[str, dict] = {"both_correct_below_2_31": {"ok": bool(small_ok)}}
    wide = large.get("int64", {})
    if wide.get("outcome") != "not run":
        checks["int64_correct_past_2_31"] = {
            "ok": wide.get("outcome") == "correct",
            "outcome": wide.get("outcome"),
            "bad_rows": wide.get("bad_rows"),
        }
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "int64",
            "improved": "int32",
            "what": "widening the Triton row offset to int64",
            "per": "per launch",
            "paired": True,
        },
        checks=checks,
    )


def _large_child(cfg: dict, variant: str, device_index: int) -> dict:
    """In a fresh process: one launch on a zeroed tensor past 2^31 elements, then count the rows
    that do not hold 1. A fault is caught at the synchronize and reported as ``fault``."""
    import torch

    from . import _int32_kernels as kernels

    dev = torch.device("cuda", device_index)
    torch.cuda.set_device(dev)
    rows, cols = int(cfg["large_rows"]), int(cfg["cols"])
    x = torch.zeros(rows, cols, dtype=torch.int8, device=dev)
    torch.cuda.synchronize()
    try:
        kernels.launch(x, variant, int(cfg["block"]))
        torch.cuda.synchronize()
    except Exception as exc:  # an illegal address surfaces here; the context is gone
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"outcome": "fault", "error": f"{type(exc).__name__}: {first}"[:300]}
    try:
        sums = x.sum(dim=1, dtype=torch.int32)
        bad = (sums != cols).nonzero().flatten()
        n_bad = int(bad.numel())
        first_bad = int(bad[0].item()) if n_bad else None
    except Exception as exc:  # a fault reported late, at the next call
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"outcome": "fault", "error": f"{type(exc).__name__}: {first}"[:300]}
    return {
        "outcome": "wrong" if n_bad else "correct",
        "bad_rows": n_bad,
        "first_bad_row": first_bad,
        "first_wrapping_row": -(-(2**31) // cols),
        "elements": rows * cols,
    }


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--large", choices=sorted(LABELS), required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--device-index", type=int, default=0)
    a = p.parse_args()
    try:
        res = _large_child(json.loads(a.config), a.large, a.device_index)
    except Exception as exc:  # report, never crash the parent's table
        res = {"outcome": "crashed", "error": f"{type(exc).__name__}: {exc}"[:300]}
    print(json.dumps(res), flush=True)
