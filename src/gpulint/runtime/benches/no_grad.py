"""Inference with autograd on, under `torch.no_grad()` and under `torch.inference_mode()`.

A 6-layer pre-norm transformer (attention through SDPA, causal; d_model 1024, 16 heads, FFN
4096; eval mode), batch 16, sequence 512, bf16. Two figures per mode:
the time of one forward (CUDA events after warm-up), and the peak memory an evaluation loop
reaches when it keeps each batch's output, as evaluation loops do to compute a metric over the
set (8 batches collected; peak allocated bytes above what the model and inputs hold). With
autograd on, each kept output holds its graph and every layer's saved activations.
"""

from __future__ import annotations

from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run

CONFIG = {
    "layers": 6,
    "d_model": 1024,
    "heads": 16,
    "ffn": 4096,
    "batch": 16,
    "seq": 512,
    "dtype": "bfloat16",
    "collected_batches": 8,
}


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("no-grad", {}))
    dtype = getattr(torch, cfg["dtype"])
    nn: Any = torch.nn
    torch.manual_seed(0)
    F = torch.nn.functional
    heads = cfg["heads"]

    class Block(nn.Module):
        """Pre-norm attention (SDPA) and MLP: written out, so no fused inference fast path
        (nn.TransformerEncoderLayer takes one only when autograd is off) blurs the figure."""

        def __init__(self, d: int, f: int):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, f), nn.Linear(f, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).unbind(2)
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    model = nn.Sequential(*[Block(cfg["d_model"], cfg["ffn"]) for _ in range(cfg["layers"])])
    model = model.to(ctx.device, dtype).eval()
    g = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d_model"], device=ctx.device, dtype=dtype,
                    generator=g)  # fmt: skip
    modes = {
        "grad_on": ("autograd on (no context)", None),
        "no_grad": ("`torch.no_grad()`", torch.no_grad),
        "inference_mode": ("`torch.inference_mode()`", torch.inference_mode),
    }
    variants = []
    memory: dict[str, dict] = {}
    reference = None
    checks: dict[str, dict] = {}
    for name, (label, context) in modes.items():

        def forward(context=context):
            if context is None:
                return model(x)
            with context():
                return model(x)

        try:
            out = forward().float()
            if reference is None:
                reference = out.detach()
            err = float((out.detach() - reference).norm() / reference.norm())
            checks[f"{name}_matches"] = {"ok": err < 1e-3, "rel_err": err}
            del out
            ms = ctx.measure(forward, warmup=5, label=name)
            mem = _collect_peak(ctx, forward, cfg["collected_batches"]) if ctx.cuda else None
        except Exception as e:  # noqa: BLE001 - one variant failing must not sink the others
            variants.append(variant_not_run(name, label, "ms", "lower", "failed", repr(e)[:300]))
            continue
        v = variant_from(name, label, ms["ms"], "ms", "lower", iters=ms["iters"])
        if mem is not None:
            memory[name] = mem
            v.setdefault("extra", {}).update(mem)
        variants.append(v)
    cfg["memory"] = memory
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "grad_on",
            "improved": "inference_mode",
            "what": "a forward pass with autograd on",
            "per": "per forward",
            "context": ["no_grad"],
        },
        checks=checks,
    )


def _collect_peak(ctx: Context, forward, batches: int) -> dict:
    """Peak MiB above the baseline while an evaluation keeps `batches` outputs."""
    torch = ctx.torch
    ctx.sync()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    kept = [forward() for _ in range(batches)]
    ctx.sync()
    peak = torch.cuda.max_memory_allocated() - base
    del kept
    ctx.sync()
    one = forward()
    ctx.sync()
    del one
    return {"collected_peak_mib": peak / 2**20, "collected_batches": batches}
