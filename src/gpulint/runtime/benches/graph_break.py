"""Graph breaks in compiled code: a compiled stack of MLP blocks whose forward clamps its
activations behind a data-dependent `if h.abs().max() > limit:` (GB0170, "Data-dependent
branching": one break per block, and a host sync to decide each branch), against the same
blocks clamping branchless (`h.clamp(-limit, limit)`, a no-op on these inputs), and against one
`.item()` read per block (GB0124). Beside them, the same blocks in eager mode.

Inference (under `torch.inference_mode()`), one forward per iteration, timed with CUDA events
after the warm-up that compiles every graph. The record carries, per variant, how many graphs
Dynamo made and how many breaks it counted (torch._dynamo's own counters), so the figures say
what the rule predicts: one compiled graph without breaks, one graph per fragment with them.
Every variant's output is checked against the eager one.
"""

from __future__ import annotations

from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run

CONFIG = {
    "blocks": 8,
    "width": 1024,
    "rows": 4096,  # batch x sequence, flattened
    "dtype": "bfloat16",
    "limit": 1e4,  # the clamp bound: never reached by these activations
    "mode": "inference",
}


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("graph-break", {}))
    dtype = getattr(torch, cfg["dtype"])
    nn: Any = torch.nn
    limit = float(cfg["limit"])

    class Block(nn.Module):
        def __init__(self, d: int, how: str):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)
            self.how = how

        def forward(self, x):
            h = torch.nn.functional.gelu(self.up(self.norm(x)))
            if self.how == "branch":
                if h.abs().max() > limit:  # GB0170: data-dependent branching
                    h = h.clamp(-limit, limit)
            elif self.how == "item":
                scale = h.abs().max().item()  # GB0124: Tensor.item()
                h = h * min(1.0, limit / max(scale, 1e-6))
            else:
                h = h.clamp(-limit, limit)  # branchless
            return x + self.down(h)

    def build(how: str):
        torch.manual_seed(0)
        return (
            nn.Sequential(*[Block(cfg["width"], how) for _ in range(cfg["blocks"])])
            .to(ctx.device, dtype)
            .eval()
        )

    g = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(cfg["rows"], cfg["width"], device=ctx.device, dtype=dtype, generator=g)
    with torch.inference_mode():
        reference = build("branchless")(x).float()

    plan = {
        "branchless": ("compiled, branchless clamp (one graph)", "branchless", True),
        "branch": ("compiled, `if h.abs().max() > limit:` per block (GB0170)", "branch", True),
        "item": ("compiled, `.item()` per block (GB0124)", "item", True),
        "eager": ("eager, branchless clamp (context)", "branchless", False),
    }
    variants = []
    checks: dict[str, dict] = {}
    graphs: dict[str, dict] = {}
    for name, (label, how, compiled) in plan.items():
        try:
            model = build(how)
            if compiled:
                torch._dynamo.reset()
                counters = torch._dynamo.utils.counters
                counters.clear()
                model = torch.compile(model)
            with torch.inference_mode():
                out = model(x)  # compiles every graph
                if compiled:
                    graphs[name] = {
                        "graphs": int(counters["stats"]["unique_graphs"]),
                        "breaks": int(sum(counters["graph_break"].values())),
                        "reasons": sorted(
                            str(k).splitlines()[0][:120] for k in counters["graph_break"]
                        ),
                    }
                err = (out.float() - reference).norm() / reference.norm()
                checks[f"{name}_matches_eager"] = {"ok": bool(err < 2e-2), "rel_err": float(err)}

                def fwd(model=model):
                    with torch.inference_mode():
                        return model(x)

                ms = ctx.measure(fwd, warmup=5, label=name)
        except Exception as e:  # noqa: BLE001 - one variant failing must not sink the others
            variants.append(variant_not_run(name, label, "ms", "lower", "failed", repr(e)[:300]))
            continue
        v = variant_from(name, label, ms["ms"], "ms", "lower", iters=ms["iters"])
        if name in graphs:
            v.setdefault("extra", {}).update(graphs[name])
        variants.append(v)
    cfg["dynamo"] = graphs
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "branch",
            "improved": "branchless",
            "what": f"a data-dependent `if` in each of {cfg['blocks']} compiled blocks",
            "per": "per forward",
            "context": ["item", "eager"],
        },
        checks=checks,
    )
