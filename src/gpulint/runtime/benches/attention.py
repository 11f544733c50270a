"""Causal SDPA forward, bf16, B4 H16 S4096 D128: each SDPA backend (cuDNN, flash, efficient,
math), then each flash implementation torch has registered (FA3, FA4 where present).

Every backend's output is checked against the math backend's (relative L2 error): a backend that
is faster and wrong fails the bench. A registered flash implementation can only be activated
once per process and not undone, so each is timed in a child process of its own; one whose
package is missing is reported as unavailable with the reason, not as a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..harness import BenchResult, Context, variant_from, variant_not_run

CONFIG = {
    "batch": 4,
    "heads": 16,
    "seq": 4096,
    "head_dim": 128,
    "dtype": "bfloat16",
    "causal": True,
    "pass": "forward",
}
MAX_REL_ERR = 2e-2  # bf16 operands: errors land between 1e-3 and 1e-2
BACKENDS = (
    ("cudnn", "CUDNN_ATTENTION", "SDPA cuDNN"),
    ("flash", "FLASH_ATTENTION", "SDPA flash"),
    ("efficient", "EFFICIENT_ATTENTION", "SDPA mem-efficient"),
    ("math", "MATH", "SDPA math"),
)


def flop(cfg: dict) -> float:
    full = 4.0 * cfg["batch"] * cfg["heads"] * cfg["seq"] ** 2 * cfg["head_dim"]
    return full / 2 if cfg["causal"] else full


def inputs(ctx: Context, cfg: dict):
    torch = ctx.torch
    g = torch.Generator(device=ctx.device).manual_seed(0)
    shape = (cfg["batch"], cfg["heads"], cfg["seq"], cfg["head_dim"])
    return [
        torch.randn(shape, device=ctx.device, dtype=torch.bfloat16, generator=g) for _ in range(3)
    ]


def rel_err(torch, out, ref) -> float:
    return float(
        torch.linalg.vector_norm(out.float() - ref.float()) / torch.linalg.vector_norm(ref.float())
    )


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = dict(CONFIG)
    q, k, v = inputs(ctx, cfg)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with sdpa_kernel([SDPBackend.MATH]):
        ref = sdpa(q, k, v, is_causal=cfg["causal"])
    variants, checks = [], {}
    for name, enum, label in BACKENDS:
        backend = getattr(SDPBackend, enum, None)
        if backend is None:
            variants.append(
                variant_not_run(
                    name,
                    label,
                    "ms",
                    "lower",
                    "unavailable",
                    f"this torch has no SDPBackend.{enum}",
                )
            )
            continue

        def call(backend=backend):
            with sdpa_kernel([backend]):
                return sdpa(q, k, v, is_causal=cfg["causal"])

        try:
            out = call()
        except RuntimeError as exc:
            variants.append(
                variant_not_run(
                    name, label, "ms", "lower", "unavailable", str(exc).splitlines()[0][:300]
                )
            )
            continue
        err = rel_err(torch, out, ref)
        if name != "math":
            checks[f"{name}_matches_math"] = {"ok": err <= MAX_REL_ERR, "rel_err": err}
        del out
        m = ctx.measure(call, label=f"attention {name}", min_run_ms=25.0)
        var = variant_from(
            name, label, m["ms"], "ms", "lower", iters=m["iters"], rel_err_vs_math=err
        )
        ctx.annotate_compute(var, flop(cfg) / (var["median"] * 1e-3) / 1e12, "bf16")
        variants.append(var)
    ref = q = k = v = None  # free the inputs before the child processes run
    torch.cuda.empty_cache() if ctx.cuda else None

    from ..probe import flash_impls

    impls = flash_impls()
    cfg["flash_impls_registered"] = impls.get("registered", [])
    for impl in impls.get("registered", []):
        ctx.say(f"attention: flash impl {impl} in a child process")
        var = _impl_in_child(ctx, impl, cfg)
        if var.get("status") == "ok" and "tflops" in var.get("extra", {}):
            ctx.annotate_compute(var, var["extra"]["tflops"], "bf16")
        variants.append(var)
        c = variants[-1].get("extra", {}).get("rel_err_vs_math")
        if c is not None:
            checks[f"{impl}_matches_math"] = {"ok": c <= MAX_REL_ERR, "rel_err": c}

    timed = [x for x in variants if x["status"] == "ok" and x["name"] != "math"]
    best = min(timed, key=lambda x: x["median"])["name"] if timed else None
    headline = None
    if best and any(x["name"] == "math" and x["status"] == "ok" for x in variants):
        label = next(x["label"] for x in variants if x["name"] == best)
        headline = {
            "baseline": "math",
            "improved": best,
            "what": "the math SDPA backend",
            "versus": label,
        }
    return BenchResult(config=cfg, variants=variants, headline=headline, checks=checks)


def _impl_in_child(ctx: Context, impl: str, cfg: dict) -> dict:
    label = f"flash impl {impl}"
    cmd = [
        sys.executable,
        "-m",
        "gpulint.runtime.benches.attention",
        "--impl",
        impl,
        "--runs",
        str(ctx.runs),
        "--device-index",
        str(ctx.device.index or 0),
    ]
    env = dict(os.environ)
    src = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return variant_not_run(impl, label, "ms", "lower", "failed", "timed out after 120 s")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return variant_not_run(
            impl, label, "ms", "lower", "failed", f"child exited {done.returncode}: {tail}"
        )
    return json.loads(lines[-1])


def _child(impl: str, runs: int, device_index: int) -> dict:
    """Runs in a fresh process: activate ``impl``, time SDPA (the default backend choice)."""
    from ..harness import Context

    ctx = Context(runs, device_index=device_index, say=lambda m: None)
    torch = ctx.torch
    import torch.nn.attention as attn

    label = f"flash impl {impl}"
    try:
        attn.activate_flash_attention_impl(impl)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        return variant_not_run(impl, label, "ms", "lower", "unavailable", reason)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = dict(CONFIG)
    q, k, v = inputs(ctx, cfg)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with sdpa_kernel([SDPBackend.MATH]):
        ref = sdpa(q, k, v, is_causal=True)

    def call():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return sdpa(q, k, v, is_causal=True)

    try:
        err = rel_err(torch, call(), ref)
    except Exception as exc:
        return variant_not_run(impl, label, "ms", "lower", "failed", str(exc).splitlines()[0][:300])
    m = ctx.measure(call, label=impl)
    var = variant_from(
        impl,
        label,
        m["ms"],
        "ms",
        "lower",
        iters=m["iters"],
        rel_err_vs_math=err,
        active=getattr(attn, "current_flash_attention_impl", lambda: None)(),
    )
    ctx.annotate_compute(var, flop(cfg) / (var["median"] * 1e-3) / 1e12, "bf16")
    return var


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--impl", required=True)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--device-index", type=int, default=0)
    a = p.parse_args()
    try:
        result = _child(a.impl, a.runs, a.device_index)
    except Exception as exc:  # report, never crash the parent's table
        result = variant_not_run(
            a.impl,
            f"flash impl {a.impl}",
            "ms",
            "lower",
            "failed",
            f"{type(exc).__name__}: {exc}"[:300],
        )
    print(json.dumps(result))
