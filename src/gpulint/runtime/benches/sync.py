"""Host sync in the training loop: ``loss.item()`` every step vs every N steps.

An MLP train step (4 x [Linear 2048->2048, ReLU], Linear 2048->1; batch 256; AdamW) is short
enough that launching it on the host takes a real share of running it on the GPU, which is
where a sync hurts: an ``.item()`` every step drains the queue, so the GPU idles while the host
launches the next step. The per-step time is measured with CUDA events over a block of steps, so
those idle gaps are counted. The host's launch speed sets these figures, so a noisy host moves
them: the two variants are timed run by run, alternating, so drift lands on both alike.
"""

from __future__ import annotations

from ..harness import BenchResult, Context, variant_from

CONFIG = {
    "batch": 256,
    # Chosen on an H200 (2026-12-02, 5 runs each) from a sweep of shapes: 1x1024 put the step
    # at the host's launch speed, where the cost drowned in host noise (+16%, ranges
    # overlapping; another machine showed none); 4x2048 gave 1,729 -> 1,464 us (+18%).
    "width": 2048,
    "hidden_layers": 4,
    "dtype": "float32",
    "optimizer": "AdamW(lr=1e-4)",
    "steps_per_run": 300,
    "every_n": 50,
}


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg = dict(CONFIG)
    cfg.update({k: v for k, v in ctx.options.get("sync", {}).items()})
    torch.manual_seed(0)
    layers = []
    for _ in range(cfg["hidden_layers"]):
        layers += [torch.nn.Linear(cfg["width"], cfg["width"]), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(cfg["width"], 1)).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(cfg["batch"], cfg["width"], device=ctx.device)
    y = torch.randn(cfg["batch"], 1, device=ctx.device)
    steps = cfg["steps_per_run"]
    seen: list[float] = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def block(every: int):
        def go():
            for i in range(steps):
                loss = step()
                if (i + 1) % every == 0:
                    seen.append(loss.item())

        return go

    plan = {
        "every_step": (".item() every step", 1),
        f"every_{cfg['every_n']}": (f".item() every {cfg['every_n']} steps", cfg["every_n"]),
    }
    ms = ctx.measure_interleaved(
        {name: block(every) for name, (_, every) in plan.items()}, label="sync"
    )
    variants = [
        variant_from(
            name,
            label,
            [x * 1000.0 / steps for x in ms[name]],
            "us",
            "lower",
            steps_per_run=steps,
        )
        for name, (label, _) in plan.items()
    ]
    finite = all(v == v and abs(v) < 1e6 for v in seen)
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "every_step",
            "improved": f"every_{cfg['every_n']}",
            "what": "an .item() every step",
            "per": "per step",
        },
        checks={"loss_finite": {"ok": finite, "losses_read": len(seen)}},
    )
