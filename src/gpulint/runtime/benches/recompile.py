"""`torch.compile` inside the step loop: what a call costs when the compile is made once, made
again on the same function every step, made on a fresh closure every step (same code), and made
on a fresh closure that captures a value that changes every step (`lr` or the step index).

The step is a small MLP forward (inference). Each variant runs `steps` steps per timed run; the
per-step figure includes whatever compiling the variant does. The record carries Dynamo's own
counters for each variant (graphs compiled, frames and recompiles), which say whether a
re-wrap recompiles or hits Dynamo's cache (keyed by code object and guards), and the
`recompile_limit` in force: past it Dynamo stops compiling the frame and runs it eagerly.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run

CONFIG = {
    "width": 1024,
    "rows": 2048,
    "layers": 4,
    "dtype": "bfloat16",
    "steps": 12,
}


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("recompile", {}))
    dtype = getattr(torch, cfg["dtype"])
    nn: Any = torch.nn
    torch.manual_seed(0)
    layers = []
    for _ in range(cfg["layers"]):
        layers += [nn.Linear(cfg["width"], cfg["width"]), nn.GELU()]
    net = nn.Sequential(*layers).to(ctx.device, dtype).eval()
    x = torch.randn(cfg["rows"], cfg["width"], device=ctx.device, dtype=dtype)
    steps = int(cfg["steps"])
    cfg["recompile_limit"] = getattr(torch._dynamo.config, "recompile_limit", None) or getattr(
        torch._dynamo.config, "cache_size_limit", None
    )

    def forward(inp):
        return net(inp) * 0.5

    def once():
        compiled = torch.compile(forward)

        def go():
            for _ in range(steps):
                compiled(x)

        return go

    def rewrap():
        def go():
            for _ in range(steps):
                torch.compile(forward)(x)

        return go

    def fresh_closure():
        def go():
            for _ in range(steps):
                scale = 0.5
                torch.compile(lambda inp: net(inp) * scale)(x)  # noqa: B023 - on purpose

        return go

    counter = itertools.count()  # the step index never repeats, as in a training run

    def changing_capture():
        def go():
            for _ in range(steps):
                i = next(counter)
                torch.compile(lambda inp: net(inp) * (1.0 + i))(x)  # noqa: B023 - on purpose

        return go

    plan = {
        "once": ("compiled once, before the loop", once),
        "rewrap": ("`torch.compile(fn)` of the same def every step", rewrap),
        "fresh_closure": ("`torch.compile(lambda ...)` every step, same captures", fresh_closure),
        "changing_capture": (
            "`torch.compile(lambda ...)` every step capturing the step index",
            changing_capture,
        ),
        "eager": ("eager (context)", lambda: lambda: [forward(x) for _ in range(steps)]),
    }
    variants = []
    dynamo: dict[str, dict] = {}
    counters = torch._dynamo.utils.counters
    with torch.inference_mode():
        for name, (label, make) in plan.items():
            try:
                torch._dynamo.reset()
                counters.clear()
                go = make()
                ms = ctx.measure(go, warmup=1, iters=1, label=name)
                dynamo[name] = {
                    "graphs": int(counters["stats"]["unique_graphs"]),
                    "frames_ok": int(counters["frames"]["ok"]),
                    "recompiles": int(sum(counters["recompiles"].values()))
                    if "recompiles" in counters
                    else None,
                }
            except Exception as e:  # noqa: BLE001 - one variant failing must not sink the others
                variants.append(
                    variant_not_run(name, label, "ms", "lower", "failed", repr(e)[:300])
                )
                continue
            v = variant_from(
                name, label, [t / steps for t in ms["ms"]], "ms", "lower", steps_per_run=steps
            )
            v.setdefault("extra", {}).update(dynamo[name])
            variants.append(v)
    cfg["dynamo"] = dynamo
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "changing_capture",
            "improved": "once",
            "what": "`torch.compile` of a fresh closure every step",
            "per": "per step",
            "context": ["rewrap", "fresh_closure", "eager"],
        },
        checks={},
    )
