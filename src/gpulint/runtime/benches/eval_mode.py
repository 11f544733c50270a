"""Evaluation forward passes under `torch.no_grad()` with the model in training mode vs eval mode.

A small convolutional classifier (four Conv-BatchNorm-ReLU stages, 64 to 512 channels, a
dropout before the linear head), batch 256 of 3x64x64 images, bf16 autocast, channels-last.
Both variants run under `torch.no_grad()`; only the module's mode differs, as in an
evaluation loop that forgot `model.eval()`. Per variant: the time of one forward (CUDA events
after warm-up; 20 forwards per run, runs interleaved with the other variant's), the peak memory one forward
reaches above what the model and input hold, and the checks that say what training mode does
to an evaluation: the outputs of two identical forwards differ (dropout), the batch-norm
running statistics move (they are updated from the evaluation data), and the outputs differ
from eval mode's.
"""

from __future__ import annotations

from typing import Any

from ..harness import BenchResult, Context, variant_from

CONFIG = {
    "channels": [64, 128, 256, 512],
    "batch": 256,
    "image": 64,
    "dropout": 0.5,
    "classes": 1000,
    "dtype": "bfloat16 (autocast)",
    "memory_format": "channels_last",
    "grad_mode": "torch.no_grad()",
    "forwards_per_run": 20,
}


def build(torch, cfg: dict) -> Any:
    nn: Any = torch.nn
    layers: list = []
    c_in = 3
    for c in cfg["channels"]:
        layers += [
            nn.Conv2d(c_in, c, 3, padding=1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        ]
        c_in = c
    layers += [
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(cfg["dropout"]),
        nn.Linear(c_in, cfg["classes"]),
    ]
    return nn.Sequential(*layers)


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True  # as training scripts set it; put back after
    try:
        return _run(ctx, torch)
    finally:
        torch.backends.cudnn.benchmark = before


def _run(ctx: Context, torch) -> BenchResult:
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("eval-mode", {}))
    torch.manual_seed(0)
    model = build(torch, cfg).to(ctx.device, memory_format=torch.channels_last)
    g = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(cfg["batch"], 3, cfg["image"], cfg["image"], device=ctx.device, generator=g)
    x = x.contiguous(memory_format=torch.channels_last)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if ctx.cuda else _nullcontext

    def forward():
        with torch.no_grad(), autocast():
            return model(x)

    forwards = int(cfg["forwards_per_run"])

    def in_mode(training: bool):
        def one():
            model.train(training)
            return forward()

        def block():
            for _ in range(forwards):
                one()

        return one, block

    checks = _checks(torch, model, forward)
    plan = {"train_mode": in_mode(True), "eval_mode": in_mode(False)}
    for one, _ in plan.values():  # warm-up: cuDNN picks its algorithms for both modes
        for _ in range(5):
            one()
    ctx.sync()
    runs = ctx.measure_interleaved(
        {name: block for name, (_, block) in plan.items()}, warmup=1, label="eval-mode"
    )
    samples = {name: [ms / forwards for ms in values] for name, values in runs.items()}
    memory = {name: _peak_mib(ctx, one) for name, (one, _) in plan.items()} if ctx.cuda else {}
    labels = {
        "train_mode": "no_grad, model in training mode (no `.eval()`)",
        "eval_mode": "no_grad, `model.eval()`",
    }
    variants = []
    for name, ms in samples.items():
        v = variant_from(name, labels[name], ms, "ms", "lower", forwards_per_run=forwards)
        if name in memory:
            v["extra"]["forward_peak_mib"] = memory[name]
        variants.append(v)
    cfg["memory"] = memory
    cfg["parameters"] = sum(p.numel() for p in model.parameters())
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "train_mode",
            "improved": "eval_mode",
            "what": "an evaluation forward pass in training mode",
            "per": "per forward",
            "paired": True,
        },
        checks=checks,
    )


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _checks(torch, model, forward) -> dict:
    """What training mode does to an evaluation, measured on the model itself. The checks are
    expectations of PyTorch's semantics: a failed one means the bench measured something else."""
    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    model.eval()
    ref = forward().float()
    again = forward().float()
    before = bn.running_mean.detach().clone()
    model.train()
    a = forward().float()
    b = forward().float()
    moved = float((bn.running_mean - before).abs().max())
    repeat_err = float((again - ref).norm() / ref.norm())
    rel = float((a - ref).norm() / ref.norm())
    model.eval()
    return {
        "eval_mode_repeatable": {"ok": repeat_err <= 1e-3, "rel_diff": repeat_err},
        "train_mode_dropout_differs": {
            "ok": not torch.equal(a, b),
            "rel_diff": float((a - b).norm() / a.norm()),
        },
        "train_mode_updates_running_stats": {"ok": moved > 0.0, "max_abs_change": moved},
        "train_mode_output_differs_from_eval": {"ok": rel > 1e-3, "rel_diff": rel},
    }


def _peak_mib(ctx: Context, fn) -> float:
    """Peak MiB allocated above the baseline during one forward."""
    torch = ctx.torch
    ctx.sync()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    ctx.sync()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20
