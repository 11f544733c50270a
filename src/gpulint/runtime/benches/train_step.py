"""A 6-layer d1024 transformer train step (b8, s1024): strict FP32, TF32, BF16 autocast, and
BF16 autocast under torch.compile.

The model is the plain PyTorch one most code starts from: ``nn.TransformerEncoderLayer`` with its
defaults (post-norm, dropout 0.1), a 4x feed-forward, and the additive causal mask from
``nn.Transformer.generate_square_subsequent_mask`` (which rules out the flash and cuDNN
kernels: the attention bench shows what that costs). FLOP counts are the useful ones (causal
attention counted half).

Same seed, same data, one variable per variant. torch.compile is regional (each layer compiled;
identical layers share one compiled graph), which keeps compile time to seconds; the compile
time is recorded, never mixed into the step time. Each variant's first loss is compared with the
strict-FP32 loss: a lower-precision variant that computes a different function fails the check.
"""

from __future__ import annotations

import time
from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run

CONFIG = {
    "layers": 6,
    "d_model": 1024,
    "heads": 16,
    "ffn": 4096,
    "batch": 8,
    "seq": 1024,
    "dropout": 0.1,
    "norm_first": False,
    # "causal": is_causal=True (flash/cuDNN eligible); "float": an explicit additive causal mask
    # (what nn.Transformer.generate_square_subsequent_mask gives; efficient/math only); "none".
    "mask": "float",
    "optimizer": "AdamW(lr=1e-4)",
    "loss": "mse against a random target",
}
LOSS_RTOL = 5e-2  # bf16 vs fp32 on the first step


def flop_per_step(cfg: dict) -> float:
    d, f, s, tokens = cfg["d_model"], cfg["ffn"], cfg["seq"], cfg["batch"] * cfg["seq"]
    dense = 2 * (4 * d * d + 2 * d * f)  # per token, forward
    attn = 4 * s * d * (1.0 if cfg["mask"] == "none" else 0.5)
    return 3.0 * tokens * cfg["layers"] * (dense + attn)  # forward + backward (2x)


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)  # the bench's settings, then what it measured
    cfg.update(ctx.options.get("train-step", {}))
    compile_ok = not ctx.options.get("no_compile", False)
    g = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d_model"], device=ctx.device, generator=g)
    target = torch.randn(x.shape, device=ctx.device, generator=g)
    mask = (
        None
        if cfg["mask"] == "none"
        else torch.nn.Transformer.generate_square_subsequent_mask(cfg["seq"], device=ctx.device)
    )
    is_causal = cfg["mask"] == "causal"

    def build(compiled: bool):
        torch.manual_seed(0)
        layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(
                cfg["d_model"],
                cfg["heads"],
                cfg["ffn"],
                dropout=cfg["dropout"],
                batch_first=True,
                norm_first=cfg["norm_first"],
            )
            for _ in range(cfg["layers"])
        ).to(ctx.device)
        opt = torch.optim.AdamW(layers.parameters(), lr=1e-4)
        # Regional compilation: identical layers share one compiled graph.
        calls = [torch.compile(layer) for layer in layers] if compiled else list(layers)
        return calls, opt

    prev_matmul = torch.get_float32_matmul_precision()
    prev_cudnn = torch.backends.cudnn.allow_tf32
    plan = [
        ("fp32_strict", "FP32, TF32 off", "highest", False, False, "fp32"),
        ("tf32", "FP32 with TF32", "high", False, False, "tf32"),
        ("bf16_autocast", "BF16 autocast", "high", True, False, "bf16"),
    ]
    if compile_ok:
        plan.append(
            ("bf16_autocast_compile", "BF16 autocast + torch.compile", "high", True, True, "bf16")
        )
    variants, first_loss = [], {}
    checks: dict[str, dict[str, object]] = {}  # name -> ok and what was compared
    flop = flop_per_step(cfg)
    try:
        for name, label, precision, bf16, compiled, roof_dtype in plan:
            torch.set_float32_matmul_precision(precision)
            torch.backends.cudnn.allow_tf32 = precision != "highest"
            layers, opt = build(compiled)

            def step(layers=layers, opt=opt, bf16=bf16):
                opt.zero_grad(set_to_none=True)
                with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=bf16):
                    h = x
                    for layer in layers:
                        h = layer(h, src_mask=mask, is_causal=is_causal)
                    loss = torch.nn.functional.mse_loss(h.float(), target)
                loss.backward()
                opt.step()
                return loss

            graphs_before = _compiled_graphs(torch)
            t0 = time.perf_counter()
            try:
                first_loss[name] = float(step().item())
            except Exception as exc:
                if not compiled:
                    raise
                # torch.compile can be missing a compiler or Triton: report, keep the rest.
                reason = f"torch.compile failed: {type(exc).__name__}: {exc}"[:300]
                variants.append(variant_not_run(name, label, "ms", "lower", "unavailable", reason))
                continue
            first_s = time.perf_counter() - t0
            graphs_after = _compiled_graphs(torch)
            graphs = None if graphs_after is None else graphs_after - (graphs_before or 0)
            m = ctx.measure(step, warmup=2, min_run_ms=150.0, label=f"train-step {name}")
            var = variant_from(
                name, label, m["ms"], "ms", "lower", iters=m["iters"], first_loss=first_loss[name]
            )
            if compiled:
                var["extra"]["compile_s"] = first_s
                var["extra"]["graphs_compiled"] = graphs
                if graphs is not None:
                    checks["compile_compiled_a_graph"] = {"ok": graphs > 0, "graphs": graphs}
            ctx.annotate_compute(var, flop / (var["median"] * 1e-3) / 1e12, roof_dtype)
            variants.append(var)
            del layers, opt
    finally:
        torch.set_float32_matmul_precision(prev_matmul)
        torch.backends.cudnn.allow_tf32 = prev_cudnn
    ref = first_loss.get("fp32_strict")
    for name, loss in first_loss.items():
        if name != "fp32_strict" and ref is not None:
            rel = abs(loss - ref) / abs(ref)
            checks[f"{name}_loss_matches_fp32"] = {
                "ok": rel <= LOSS_RTOL,
                "rel_diff": rel,
                "loss": loss,
                "fp32_loss": ref,
            }
    cfg["flop_per_step"] = flop
    cfg["compile"] = (
        "regional: torch.compile(layer) per layer" if compile_ok else "skipped (--no-compile)"
    )
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "fp32_strict",
            "improved": "bf16_autocast",
            "what": "a strict-FP32 train step",
            "versus": "BF16 autocast",
            "per": "per step",
        },
        headlines={
            "tf32": {
                "baseline": "fp32_strict",
                "improved": "tf32",
                "what": "a strict-FP32 train step",
                "versus": "TF32",
                "per": "per step",
            },
            "compile": {
                "baseline": "bf16_autocast",
                "improved": "bf16_autocast_compile",
                "what": "an uncompiled BF16 train step",
                "versus": "torch.compile",
                "per": "per step",
            },
        }
        if compile_ok
        else {
            "tf32": {
                "baseline": "fp32_strict",
                "improved": "tf32",
                "what": "a strict-FP32 train step",
                "versus": "TF32",
                "per": "per step",
            },
        },  # fmt: skip
        checks=checks,
    )


def _compiled_graphs(torch) -> int | None:
    """Graphs dynamo has compiled so far in this process (None if the counter is not there)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"].get("unique_graphs", 0))
    except Exception:
        return None
