"""matmul 8192³: bf16, and fp32 with TF32 off (strict) and on. The bf16 figure is the measured
compute ceiling later benches report against. Random inputs, never zeros (zeros run faster)."""

from __future__ import annotations

from ..harness import BenchResult, Context, variant_from

N = 8192


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    flop = 2.0 * N**3
    variants = []
    prev = torch.get_float32_matmul_precision()
    plan = [
        ("bf16", "bf16 matmul", torch.bfloat16, None, "bf16"),
        ("fp32_strict", "fp32 matmul, TF32 off", torch.float32, "highest", "fp32"),
        ("fp32_tf32", "fp32 matmul, TF32 on", torch.float32, "high", "tf32"),
    ]
    try:
        for name, label, dtype, precision, roof_dtype in plan:
            if precision:
                torch.set_float32_matmul_precision(precision)
            g = torch.Generator(device=ctx.device).manual_seed(0)
            a = torch.randn(N, N, device=ctx.device, dtype=dtype, generator=g)
            b = torch.randn(N, N, device=ctx.device, dtype=dtype, generator=g)
            c = torch.empty(N, N, device=ctx.device, dtype=dtype)
            m = ctx.measure(
                lambda a=a, b=b, c=c: torch.mm(a, b, out=c), label=f"matmul {name}", min_run_ms=60.0
            )
            tflops = [flop / (ms * 1e-3) / 1e12 for ms in m["ms"]]
            v = variant_from(
                name,
                label,
                tflops,
                "TFLOP/s",
                "higher",
                iters=m["iters"],
                ms_median=sorted(m["ms"])[len(m["ms"]) // 2],
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
