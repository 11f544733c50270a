"""Why two bench figures move with the host: a sweep for the lent GPU machine (not a test).

``gpulint bench h2d`` (pageable) and ``gpulint bench sync`` depend on the host CPU as much as
on the GPU. This script measures, in one call, what those figures are made of:

- the host itself: CPU model, transparent huge pages, single-thread memcpy bandwidth;
- pageable host-to-device copies of 256 MiB from sources that differ only in how their pages
  came to exist (never written, written with zeros, written with random data);
- the sync bench's MLP at several shapes, with the host's own time to issue one step.

Found with it (docs/runtime.md has the numbers): pageable H2D runs at 1.2-1.5x the host's
one-thread memcpy; transparent huge pages for the source (``THP_MEM_ALLOC_ENABLE=1`` or an
``mmap`` with ``MADV_HUGEPAGE``) did not change it; a never-written source copies 2-3x faster
(the zero page) and so is not a fair source.

Run on the device machine from the repository root: ``PYTHONPATH=src python3
benchmarks/host_bound_sweep.py --out DIR``. It prints a table and writes ``sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import time


def host_facts() -> dict:
    def read(path: str) -> str | None:
        try:
            return pathlib.Path(path).read_text().strip()
        except OSError:
            return None

    cpu = None
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    import os

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "thp_enabled": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": read("/sys/kernel/mm/transparent_hugepage/defrag"),
    }


def timed_ms(fn, runs: int = 5, inner: int = 5) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) * 1000.0 / inner)
    return out


def h2d_sweep(ctx) -> list[dict]:
    torch = ctx.torch
    nbytes = 256 << 20
    n = nbytes // 4
    rows = []
    torch.set_num_threads(1)
    a = torch.randn(n)
    b = torch.empty(n)
    b.copy_(a)
    ms = timed_ms(lambda: b.copy_(a))
    rows.append(("host memcpy 256 MiB, one thread (read+write counted once)", ms))
    dst = torch.empty(n, device=ctx.device)
    sources = {
        "pageable, never written (torch.empty)": torch.empty(n),
        "pageable, written with zeros": torch.zeros(n),
        "pageable, written with randn": torch.randn(n),
        "pinned, randn, non_blocking": torch.randn(n).pin_memory(),
    }
    for label, src in sources.items():
        m = ctx.measure(
            lambda src=src: dst.copy_(src, non_blocking=src.is_pinned()),
            label=label,
            min_run_ms=40.0,
        )
        rows.append((label, m["ms"]))
    out = []
    for label, ms in rows:
        gbps = [nbytes / (x * 1e-3) / 1e9 for x in ms]
        out.append(
            {
                "what": label,
                "gbps_median": statistics.median(gbps),
                "gbps_min": min(gbps),
                "gbps_max": max(gbps),
                "samples_ms": ms,
            }
        )
    return out


def sync_sweep(ctx, shapes) -> list[dict]:
    from gpulint.runtime.benches import sync

    torch = ctx.torch
    out = []
    for layers, width, batch in shapes:
        ctx.options = {"sync": {"hidden_layers": layers, "width": width, "batch": batch}}
        res = sync.run(ctx)
        v = {x["name"]: x for x in res.variants}
        # the host's time to issue one step with an empty queue (no sync inside)
        model = torch.nn.Sequential(
            *[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())],
            torch.nn.Linear(width, 1),
        ).to(ctx.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(batch, width, device=ctx.device)
        y = torch.randn(batch, 1, device=ctx.device)

        def step(model=model, opt=opt, x=x, y=y):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

        for _ in range(5):
            step()
        issue = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                step()
            issue.append((time.perf_counter() - t0) * 1e6 / 10)
        torch.cuda.synchronize()
        every, sparse = v["every_step"], v["every_50"]
        out.append(
            {
                "shape": f"{layers}x{width} b{batch}",
                "every_step_us": every["median"],
                "every_step_range": [every["min"], every["max"]],
                "every_50_us": sparse["median"],
                "every_50_range": [sparse["min"], sparse["max"]],
                "cost_pct": 100.0 * (every["median"] / sparse["median"] - 1.0),
                "host_issue_us": statistics.median(issue),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("."))
    ap.add_argument("--skip-h2d", action="store_true")
    args = ap.parse_args()
    from gpulint.runtime.harness import Context

    ctx = Context(5, say=lambda msg: None)
    result = {"host": host_facts(), "device": ctx.device_info["name"]}
    if not args.skip_h2d:
        result["h2d"] = h2d_sweep(ctx)
    shapes = [
        (4, 2048, 256),
        (3, 2048, 256),
        (2, 2048, 256),
        (4, 2048, 128),
        (2, 4096, 128),
        (6, 1024, 256),
        (1, 1024, 256),
    ]
    result["sync"] = sync_sweep(ctx, shapes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["host"]))
    for r in result.get("h2d", []):
        print(
            f"{r['what']:<58} {r['gbps_median']:7.2f} GB/s "
            f"[{r['gbps_min']:.2f}-{r['gbps_max']:.2f}]"
        )
    for r in result["sync"]:
        print(
            f"{r['shape']:<14} every step {r['every_step_us']:7.0f} "
            f"[{r['every_step_range'][0]:.0f}-{r['every_step_range'][1]:.0f}]  every 50 "
            f"{r['every_50_us']:7.0f} [{r['every_50_range'][0]:.0f}-{r['every_50_range'][1]:.0f}]"
            f"  cost {r['cost_pct']:+5.1f}%  host issue {r['host_issue_us']:6.0f} us/step"
        )


if __name__ == "__main__":
    main()
