"""DataLoader feeding a GPU: worker processes, pinned memory, persistent workers, prefetch.

The dataset decodes a synthetic uint8 image per sample on the CPU (a stand-in for JPEG decode and
augmentation), each batch is copied to the GPU (non_blocking when pinned) and reduced there. One
run is one epoch through the same DataLoader object, so non-persistent workers pay their start-up
every epoch, as they do in training. Figures are samples per second (higher is better).
"""

from __future__ import annotations

import os
from typing import Any

from ..harness import BenchResult, Context, variant_from

CONFIG = {
    "samples": 4096,
    "batch": 64,
    "image": [3, 128, 128],
    "dtype_on_host": "uint8",
    "per_sample_work": "normalize + flip on a 3x128x128 image",
}


class SyntheticImages:
    """Module-level so worker processes can import it under any start method."""

    def __init__(self, n: int, shape: list[int]):
        self.n, self.shape = n, tuple(shape)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, self.shape, dtype=torch.uint8, generator=g)
        x = img.float().div_(255.0).sub_(0.5).div_(0.25)
        if i % 2:
            x = x.flip(-1)
        return x.to(torch.float16), i % 1000


def run(ctx: Context) -> BenchResult:
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)  # the bench's settings, then what it chose
    workers = max(2, min(8, (os.cpu_count() or 4) // 2))
    cfg["workers"] = workers
    ds = SyntheticImages(cfg["samples"], cfg["image"])
    plan = [
        ("workers0", "num_workers=0", dict(num_workers=0)),
        (f"workers{workers}", f"num_workers={workers}", dict(num_workers=workers)),
        (
            f"workers{workers}_pin",
            f"num_workers={workers}, pin_memory",
            dict(num_workers=workers, pin_memory=True),
        ),
        (
            f"workers{workers}_pin_persistent_prefetch4",
            f"num_workers={workers}, pin_memory, persistent_workers, prefetch_factor=4",
            dict(num_workers=workers, pin_memory=True, persistent_workers=True, prefetch_factor=4),
        ),
    ]
    variants, total = [], []
    for name, label, kw in plan:
        loader = torch.utils.data.DataLoader(ds, batch_size=cfg["batch"], shuffle=False, **kw)
        nb = bool(kw.get("pin_memory"))
        acc = torch.zeros((), device=ctx.device)

        def epoch(loader=loader, nb=nb, acc=acc):
            for xb, _labels in loader:
                acc.add_(xb.to(ctx.device, non_blocking=nb).float().mean())

        m = ctx.measure(epoch, warmup=1, iters=1, label=f"dataloader {name}")
        rate = [cfg["samples"] / (ms * 1e-3) for ms in m["ms"]]
        variants.append(variant_from(name, label, rate, "samples/s", "higher", loader_kwargs=kw))
        total.append(float(acc.item()))
        del loader
    agree = max(total) - min(total) <= 1e-2 * max(1.0, abs(total[0])) * (ctx.runs + 1)
    best = max(variants, key=lambda v: v["median"])["name"]
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "workers0",
            "improved": best,
            "what": "a DataLoader with num_workers=0",
            "versus": next(v["label"] for v in variants if v["name"] == best),
        },
        checks={"same_data_every_variant": {"ok": agree, "sums": total}},
        # One variable at a time, for the rules that cite one setting.
        headlines={
            "workers": {
                "baseline": "workers0",
                "improved": f"workers{workers}",
                "what": "a DataLoader with num_workers=0",
                "versus": f"num_workers={workers}",
            },
            "pin_memory": {
                "baseline": f"workers{workers}",
                "improved": f"workers{workers}_pin",
                "what": "a DataLoader without pin_memory",
                "versus": "with pin_memory=True",
            },
            "persistent": {
                "baseline": f"workers{workers}_pin",
                "improved": f"workers{workers}_pin_persistent_prefetch4",
                "what": "a DataLoader whose workers restart every epoch",
                "versus": "persistent_workers=True, prefetch_factor=4",
            },
        },  # fmt: skip
    )
