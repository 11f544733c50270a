"""Host-to-device copy of 256 MiB from pageable memory vs pinned memory (non_blocking).

A copy from pageable memory is a host memcpy into the driver's pinned staging buffers, so its
speed is the host's, not the GPU's: the bench also times a plain one-thread host memcpy of the
same size and records it beside the pair, so a slow pageable figure can be read against it. The
source is written before it is timed: never-written pages all map the kernel's one zero page,
which stays in cache, and such a copy runs more than twice as fast as from real data (23 against
9.8 GB/s on an H200 host, 2026-12-02).
"""

from __future__ import annotations

import functools
import time

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
            functools.partial(dst.copy_, src, non_blocking=nb),
            label=f"h2d {name}",
            min_run_ms=40.0,
        )
        gbps = [BYTES / (ms * 1e-3) / 1e9 for ms in m["ms"]]
        variants.append(variant_from(name, label, gbps, "GB/s", "higher", iters=m["iters"]))
    variants.append(host_memcpy(torch, pageable, ctx.runs))
    ok = bool(torch.equal(dst[:1024].cpu(), pageable[:1024]))
    return BenchResult(
        config={
            "bytes": BYTES,
            "dtype": "float32",
            "pinned_copy": "non_blocking=True",
            "pageable_copy": "non_blocking=False",
            "host_memcpy": "one thread, host clock, bytes copied counted once",
        },
        variants=variants,
        headline={
            "baseline": "pageable",
            "improved": "pinned",
            "what": "a host-to-device copy from pageable memory",
            "versus": "from pinned memory",
            "context": "host_memcpy",
        },
        checks={"copy_matches": {"ok": ok}},
    )


def host_memcpy(torch, src, runs: int) -> dict:
    """One-thread host memcpy of ``src``'s size, timed with the host clock (no GPU involved)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dst = src.clone()  # written, and warms the allocator
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            for _ in range(4):
                dst.copy_(src)
            samples.append(4 * BYTES / (time.perf_counter() - t0) / 1e9)
    finally:
        torch.set_num_threads(threads)
    return variant_from(
        "host_memcpy", "host memcpy 256 MiB, one thread (context)", samples, "GB/s", "higher"
    )
