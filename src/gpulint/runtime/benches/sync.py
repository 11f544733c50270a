"""Host sync in the training loop: ``loss.item()`` every step vs every N steps.

An MLP train step (3 x [Linear 2048->2048, ReLU], Linear 2048->1; batch 256; AdamW) is short
enough that launching it on the host takes a real share of running it on the GPU, which is
where a sync hurts: an ``.item()`` every step drains the queue, so the GPU idles while the host
launches the next step. The per-step time is measured with CUDA events over a block of steps, so
those idle gaps are counted. The host's launch speed sets these figures, so a noisy host moves
them: the two variants are timed run by run, alternating, so drift lands on both alike, and the
record carries the host's own time to issue one step (host clock, queue empty, no sync inside),
so figures from different hosts can be read against each other. Beside it, the GPU's own time
for one step: the same step captured in a CUDA graph and replayed, so no host launch sits
between its kernels (951 us on an H200, against 1,150-1,940 us for its hosts to issue it). The
slower the host relative to the GPU, the smaller the share of a step the sync's wait takes.
"""

from __future__ import annotations

import time
from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run

CONFIG = {
    "batch": 256,
    # Chosen on H200 hosts (2026-12-02, 5 runs each; benchmarks/host_bound_sweep.py): the cost
    # shows where the GPU's time for a step is comparable to the host's time to issue it. 1x1024
    # is all host (+0.6%, inside the spread); 4x2048 moved between +8% and +18% with the host;
    # 3x2048 gave 1,408 -> 1,211 us (+16%), its host issuing a step in 1,153 us, the closest to
    # the anchor's 1,535 -> 1,334 us.
    "width": 2048,
    "hidden_layers": 3,
    "dtype": "float32",
    "optimizer": "AdamW(lr=1e-4)",
    "steps_per_run": 300,
    "every_n": 50,
}


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)  # with the user's options, as given
    cfg.update({k: v for k, v in ctx.options.get("sync", {}).items()})
    torch.manual_seed(0)
    opt, train = mlp_step(ctx, cfg)
    steps = cfg["steps_per_run"]
    seen: list[float] = []

    def step():
        opt.zero_grad(set_to_none=True)
        return train()

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
        {name: block(every) for name, (_, every) in plan.items()},
        label="sync",
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
    variants.append(host_issue(ctx, step))
    variants.append(gpu_step(ctx, cfg))
    finite = all(v == v and abs(v) < 1e6 for v in seen)
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "every_step",
            "improved": f"every_{cfg['every_n']}",
            "what": "an .item() every step",
            "per": "per step",
            "context": ["host_issue", "gpu_step"],
            "paired": True,
        },
        checks={"loss_finite": {"ok": finite, "losses_read": len(seen)}},
    )


def mlp_step(ctx: Context, cfg: dict, capturable: bool = False):
    """The bench's model and optimizer, and one train step on them without `zero_grad` (the
    caller decides how grads are cleared): returns `(optimizer, step)`, `step()` -> loss."""
    torch = ctx.torch
    layers = []
    for _ in range(cfg["hidden_layers"]):
        layers += [torch.nn.Linear(cfg["width"], cfg["width"]), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(cfg["width"], 1)).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=capturable)
    x = torch.randn(cfg["batch"], cfg["width"], device=ctx.device)
    y = torch.randn(cfg["batch"], 1, device=ctx.device)

    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return opt, step


def host_issue(ctx: Context, step, steps: int = 10) -> dict:
    """Host microseconds to issue one step with an empty queue: how fast this host launches."""
    samples = []
    for _ in range(ctx.runs):
        ctx.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        samples.append((time.perf_counter() - t0) * 1e6 / steps)
    ctx.sync()
    return variant_from(
        "host_issue", "host time to issue one step (context)", samples, "us", "lower"
    )


def gpu_step(ctx: Context, cfg: dict, replays: int = 50) -> dict:
    """GPU microseconds for one step with no host in the way: a copy of the step (same shapes,
    AdamW with `capturable=True`, which graph capture requires) captured in a CUDA graph and
    replayed back to back, timed with CUDA events."""
    torch = ctx.torch
    label = "GPU time for one step (context, CUDA graph)"
    try:
        opt, step = mlp_step(ctx, cfg, capturable=True)
        # Warm up on a side stream (allocations, AdamW state), as CUDA graph capture requires.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # Grads set to None: the captured backward writes them fresh from the graph's pool on
        # every replay, as zero_grad(set_to_none=True) does in the timed loop.
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            step()
        for _ in range(5):
            graph.replay()
        samples = []
        for _ in range(ctx.runs):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / replays)
    except Exception as e:  # noqa: BLE001 - a context figure must never sink the bench
        return variant_not_run("gpu_step", label, "us", "lower", "unavailable", repr(e)[:200])
    return variant_from("gpu_step", label, samples, "us", "lower", replays_per_run=replays)
