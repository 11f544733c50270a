"""Host-to-device copy of 256 MiB from pageable memory vs pinned memory (non_blocking)."""

from __future__ import annotations

from ..harness import BenchResult, Context, variant_from

BYTES = 256 << 20


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    n = BYTES // 4
    pageable = torch.randn(n, dtype=torch.float32)  # written, so its pages exist
    pinned = pageable.clone().pin_memory()
    dst = torch.empty(n, dtype=torch.float32, device=ctx.device)
    variants = []
    for name, label, src, nb in (
        ("pageable", "H2D 256 MiB from pageable memory", pageable, False),
        ("pinned", "H2D 256 MiB from pinned memory", pinned, True),
    ):
        m = ctx.measure(
            lambda src=src, nb=nb: dst.copy_(src, non_blocking=nb),
            label=f"h2d {name}",
            min_run_ms=40.0,
        )
        gbps = [BYTES / (ms * 1e-3) / 1e9 for ms in m["ms"]]
        variants.append(variant_from(name, label, gbps, "GB/s", "higher", iters=m["iters"]))
    ok = bool(torch.equal(dst[:1024].cpu(), pageable[:1024]))
    return BenchResult(
        config={
            "bytes": BYTES,
            "dtype": "float32",
            "pinned_copy": "non_blocking=True",
            "pageable_copy": "non_blocking=False",
        },
        variants=variants,
        headline={
            "baseline": "pageable",
            "improved": "pinned",
            "what": "a host-to-device copy from pageable memory",
            "versus": "from pinned memory",
        },
        checks={"copy_matches": {"ok": ok}},
    )
