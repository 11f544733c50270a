"""`CUDA_LAUNCH_BLOCKING=1` left set: the same train step in a fresh process with the variable
set and without it.

CUDA reads the variable once, when the process initialises its context, so each sample is a
process of its own: ``python -m gpulint.runtime.benches.launch_blocking --child`` builds the
sync bench's MLP step (3 x [Linear 2048->2048, ReLU], Linear 2048->1; batch 256; fp32; AdamW),
warms it up and times one block of steps with CUDA events. The two variants are run process by
process, alternating (on, off, on, off, ...), one process per variant per run. With launches
blocking, the host waits for every kernel before it launches the next: the host's launch work
no longer overlaps the GPU's, and a step costs their sum instead of the larger of the two.
Each child reports the value of the variable it saw; a check asserts that each variant saw
what it was meant to.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run
from . import _child

VAR = "CUDA_LAUNCH_BLOCKING"
CONFIG = {
    "batch": 256,
    "width": 2048,
    "hidden_layers": 3,
    "dtype": "float32",
    "optimizer": "AdamW(lr=1e-4)",
    "warmup_steps": 20,
    "steps_per_run": 100,
    "process_per_sample": True,
}
PLAN = {
    "blocking": ("`CUDA_LAUNCH_BLOCKING=1`", {VAR: "1"}),
    "default": ("`CUDA_LAUNCH_BLOCKING` unset (the default)", {}),
}


def child_args(cfg: dict, device_index: int) -> list[str]:
    return ["--child", "--config", json.dumps(cfg, sort_keys=True), "--device-index",
            str(device_index)]  # fmt: skip


def env_for(variant: str) -> dict:
    """The child's environment: the variable set to 1, or removed (whatever the parent has)."""
    return _child.child_env(PLAN[variant][1], unset=() if PLAN[variant][1] else (VAR,))


def run(ctx: Context) -> BenchResult:
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("launch-blocking", {}))
    cfg["parent_env"] = os.environ.get(VAR)
    device_index = ctx.device.index or 0
    outcomes: dict[str, list] = {name: [] for name in PLAN}
    for r in range(ctx.runs):
        for name in PLAN:
            ctx.say(f"launch-blocking run {r + 1}/{ctx.runs}: {name} in a fresh process")
            outcomes[name].append(
                _child.run_child(
                    "launch_blocking", child_args(cfg, device_index), env=env_for(name)
                )
            )
    return to_result(cfg, outcomes)


def to_result(cfg: dict, outcomes: dict[str, list]) -> BenchResult:
    """The record's parts from each variant's child results (``_child.ChildResult``, one per
    run): no torch needed, so it is tested on any machine."""
    variants, checks = [], {}
    for name, (label, wanted) in PLAN.items():
        got = outcomes.get(name, [])
        bad = [c for c in got if c.result is None or "error" in c.result]
        if bad or not got:
            why = "no run"
            if bad:
                why = bad[0].error or (bad[0].result or {}).get("error", "")
            variants.append(variant_not_run(name, label, "us", "lower", "failed", str(why)[:300]))
            continue
        samples = [float(c.result["us_per_step"]) for c in got]
        seen = sorted({str(c.result.get("env")) for c in got})
        variants.append(
            variant_from(
                name, label, samples, "us", "lower",
                steps_per_run=cfg["steps_per_run"], env_seen=seen,
            )
        )  # fmt: skip
        expect = wanted.get(VAR)
        checks[f"{name}_saw_{VAR}={expect or 'unset'}"] = {
            "ok": all(c.result.get("env") == expect for c in got),
            "seen": seen,
        }
        checks[f"{name}_loss_finite"] = {"ok": all(c.result.get("loss_finite") for c in got)}
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "blocking",
            "improved": "default",
            "what": "`CUDA_LAUNCH_BLOCKING=1`",
            "per": "per step",
            "paired": True,
        },
        checks=checks,
    )


def _child_main(cfg: dict, device_index: int) -> dict:
    """In the fresh process: build the step, warm up, time one block with CUDA events."""
    from ..harness import Context, cuda_block_ms
    from ..stats import MIN_RUNS
    from .sync import mlp_step

    ctx = Context(MIN_RUNS, device_index=device_index, say=lambda m: None)
    torch = ctx.torch
    if not ctx.cuda:
        return {"error": "no CUDA device in the child process"}
    torch.manual_seed(0)
    opt, train = mlp_step(ctx, cfg)

    def step():
        opt.zero_grad(set_to_none=True)
        return train()

    for _ in range(int(cfg["warmup_steps"])):
        step()
    torch.cuda.synchronize()
    ms, loss = cuda_block_ms(torch, step, int(cfg["steps_per_run"]))
    value = float(loss.item())
    return {
        "us_per_step": ms * 1000.0,
        "env": os.environ.get(VAR),
        "loss_finite": value == value and abs(value) < 1e6,
    }


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--device-index", type=int, default=0)
    a = p.parse_args()
    try:
        out = _child_main(json.loads(a.config), a.device_index)
    except Exception as exc:  # report, never crash the parent's table
        out = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    print(json.dumps(out), flush=True)
