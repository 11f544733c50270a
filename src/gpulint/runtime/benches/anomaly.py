"""Autograd anomaly detection left on in training: the same train step with
`torch.autograd.set_detect_anomaly(True)` and without.

The step is the sync bench's MLP (3 x [Linear 2048->2048, ReLU], Linear 2048->1; batch 256;
fp32; AdamW). Anomaly mode records a Python traceback for every operation of the forward pass
and checks every gradient the backward pass computes for NaN, which reads each one back on the
host: the host waits for the device at every backward node. The two variants are timed run by
run, alternating, with the mode switched inside each block and restored after it.
"""

from __future__ import annotations

from typing import Any

from ..harness import BenchResult, Context, variant_from
from .sync import mlp_step

CONFIG = {
    "batch": 256,
    "width": 2048,
    "hidden_layers": 3,
    "dtype": "float32",
    "optimizer": "AdamW(lr=1e-4)",
    "steps_per_run": 50,
}


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("anomaly", {}))
    torch.manual_seed(0)
    opt, train = mlp_step(ctx, cfg)
    steps = cfg["steps_per_run"]

    def block(anomaly: bool):
        def go():
            before = torch.is_anomaly_enabled()
            torch.autograd.set_detect_anomaly(anomaly)
            try:
                for _ in range(steps):
                    opt.zero_grad(set_to_none=True)
                    train()
            finally:
                torch.autograd.set_detect_anomaly(before)

        return go

    plan = {
        "anomaly_on": ("`set_detect_anomaly(True)`", True),
        "anomaly_off": ("anomaly detection off (the default)", False),
    }
    ms = ctx.measure_interleaved(
        {name: block(on) for name, (_, on) in plan.items()}, label="anomaly"
    )
    variants = [
        variant_from(
            name,
            label,
            [x * 1000.0 / steps for x in ms[name]],
            "us",
            "lower",
            steps_per_run=steps,
        )  # fmt: skip
        for name, (label, _) in plan.items()
    ]
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "anomaly_on",
            "improved": "anomaly_off",
            "what": "autograd anomaly detection",
            "per": "per step",
            "paired": True,
        },
        checks={},
    )
