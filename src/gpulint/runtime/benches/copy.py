"""Device-to-device copy of 1 GiB, counting bytes read plus bytes written: the measured memory
ceiling, compared with the datasheet bandwidth."""

from __future__ import annotations

from ..harness import BenchResult, Context, variant_from
from ..roofline import memory_tbps

BYTES = 1 << 30


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    src = torch.randint(0, 255, (BYTES,), dtype=torch.uint8, device=ctx.device)
    dst = torch.empty_like(src)
    m = ctx.measure(lambda: dst.copy_(src), label="copy d2d", min_run_ms=30.0)
    moved = 2 * BYTES
    tbps = [moved / (ms * 1e-3) / 1e12 for ms in m["ms"]]
    v = variant_from(
        "d2d_1GiB", "device-to-device copy, 1 GiB", tbps, "TB/s", "higher", iters=m["iters"]
    )
    datasheet, source = memory_tbps(ctx.device_info["name"])
    if datasheet:
        v["extra"]["pct_datasheet"] = 100.0 * v["median"] / datasheet
        v["extra"]["datasheet"] = {"tbps": datasheet, "source": source}
    ctx.ceilings["copy_tbps"] = {"value": v["median"], "from": "this run"}
    ok = bool(torch.equal(dst[:4096], src[:4096]))
    return BenchResult(
        config={"bytes": BYTES, "counted": "bytes read + bytes written", "dtype": "uint8"},
        variants=[v],
        checks={"copy_matches": {"ok": ok}},
    )
