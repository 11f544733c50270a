"""matmul 8192³: bf16, and fp32 with TF32 off (strict) and on. Random inputs, never zeros
(zeros draw less power and run faster).

Each run is a burst of ten products after an idle gap (three warm-ups first): the rate the GPU
reaches at the clocks it holds before its power limit pulls them down, which is how the
reference figures were taken. ``bf16_sustained`` times the same product back to back for about
a second: the power-limited rate a long training run sees. The bf16 burst figure is the measured
compute ceiling later benches report against.
"""

from __future__ import annotations

from ..harness import BenchResult, Context, variant_from

N = 8192
BURST = 10  # products per timed run
GAP_S = 0.25  # idle before each run
SUSTAINED_MS = 250.0  # per run, back to back, after a 1 s warm-up


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    flop = 2.0 * N**3
    variants = []
    prev = torch.get_float32_matmul_precision()
    plan = [
        ("bf16", "bf16 matmul", torch.bfloat16, None, "bf16", False),
        ("fp32_strict", "fp32 matmul, TF32 off", torch.float32, "highest", "fp32", False),
        ("fp32_tf32", "fp32 matmul, TF32 on", torch.float32, "high", "tf32", False),
        ("bf16_sustained", "bf16 matmul, sustained", torch.bfloat16, None, "bf16", True),
    ]
    try:
        for name, label, dtype, precision, roof_dtype, sustained in plan:
            if precision:
                torch.set_float32_matmul_precision(precision)
            g = torch.Generator(device=ctx.device).manual_seed(0)
            a = torch.randn(N, N, device=ctx.device, dtype=dtype, generator=g)
            b = torch.randn(N, N, device=ctx.device, dtype=dtype, generator=g)
            c = torch.empty(N, N, device=ctx.device, dtype=dtype)

            def mm(a=a, b=b, c=c):
                return torch.mm(a, b, out=c)

            if sustained:
                m = ctx.measure(
                    mm, warmup_ms=1000.0, min_run_ms=SUSTAINED_MS, label=f"matmul {name}"
                )
            else:
                m = ctx.measure(mm, iters=BURST, gap_s=GAP_S, label=f"matmul {name}")
            tflops = [flop / (ms * 1e-3) / 1e12 for ms in m["ms"]]
            v = variant_from(
                name,
                label,
                tflops,
                "TFLOP/s",
                "higher",
                iters=m["iters"],
                ms_median=sorted(m["ms"])[len(m["ms"]) // 2],
                sm_clock_mhz_after=m["sm_clock_mhz"],
            )
            ctx.annotate_compute(v, v["median"], roof_dtype)
            variants.append(v)
            if name == "bf16":
                ctx.ceilings["bf16_tflops"] = {"value": v["median"], "from": "this run"}
            del a, b, c
    finally:
        torch.set_float32_matmul_precision(prev)
    return BenchResult(
        config={
            "m": N,
            "n": N,
            "k": N,
            "flop_per_matmul": flop,
            "inputs": "randn",
            "timing": f"3 warm-ups; each run {BURST} products after {GAP_S} s idle",
            "sustained": f"1 s warm-up; runs of about {SUSTAINED_MS:.0f} ms back to back",
            "fp32_precision": {"fp32_strict": "highest", "fp32_tf32": "high"},
        },
        variants=variants,
        headline={
            "baseline": "fp32_strict",
            "improved": "fp32_tf32",
            "what": "an fp32 matmul with TF32 off",
            "versus": "with TF32 on",
        },
    )
