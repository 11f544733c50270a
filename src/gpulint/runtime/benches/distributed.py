"""nccl, ddp, fsdp: launched under torchrun by ``gpulint bench`` (``--nproc N``, default: every
visible GPU), one torchrun job for all three. They work with one GPU (world size 1) too.

- nccl: all-reduce of 8 KiB (latency) and 256 MiB (bandwidth). Every element must equal the sum
  of the ranks' contributions. Bus bandwidth = algorithm bandwidth x 2(n-1)/n, the nccl-tests
  convention; with one rank nothing crosses a link, so it is 0 and the record says so.
- ddp: one DDP training step on each rank's shard; the parameters after the step must match a
  single-process step on the whole batch.
- fsdp: the same with FSDP2 (``fully_shard``) on each layer and the root.
- ddp-no-sync: gradient accumulation of ``micro_steps`` micro-batches per optimizer step on a
  DDP model, once with an all-reduce after every backward (no ``no_sync``) and once with the
  non-final micro-steps under ``ddp.no_sync()``; both must give the same parameters. With one
  rank nothing crosses a link: the difference is the all-reduce floor only (DDP's bucket
  copies and an NCCL call per bucket per backward), and the record says so.

Without CUDA the worker falls back to gloo on the CPU (launcher logic can be tested anywhere).
The launcher sets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1:
NVLink multicast can take down a shared host's GPUs.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import TypedDict

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
SIZES = {"allreduce_8KiB": 8 << 10, "allreduce_256MiB": 256 << 20}


# ddp-no-sync: a model whose gradients are worth all-reducing (8 x 2048^2 fp32 = 128 MiB), and
# micro-batches small enough that the all-reduce is not hidden behind the backward pass.
class _NoSync(TypedDict):
    layers: int
    width: int
    micro_steps: int
    micro_batch_per_rank: int
    optimizer: str
    precision: str
    ddp: str


NO_SYNC: _NoSync = {
    "layers": 8,
    "width": 2048,
    "micro_steps": 8,
    "micro_batch_per_rank": 32,
    "optimizer": "SGD(lr=0.01)",
    "precision": "fp32, TF32 off",
    "ddp": "device_ids=[local_rank], bucket_cap_mb=25 (the default)",
}
NO_SYNC_ONE_RANK = (
    "one rank: no bytes cross a link; the difference is the all-reduce floor only (DDP's "
    "bucket copies and one NCCL call per bucket per backward)"
)


class _Model(TypedDict):
    layers: int
    width: int
    batch_per_rank: int
    optimizer: str
    precision: str


MODEL: _Model = {
    "layers": 4,
    "width": 1024,
    "batch_per_rank": 64,
    "optimizer": "SGD(lr=0.1)",
    "precision": "fp32, TF32 off (the check is exact to 1e-5)",
}


def launch_command(modes: list[str], nproc: int, runs: int, out: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "gpulint.runtime.benches.distributed",
        "--modes",
        ",".join(modes),
        "--runs",
        str(runs),
        "--out",
        out,
    ]


def launch_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    env.update(SAFE_ENV)
    src = str(pathlib.Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def launch(
    modes: list[str], nproc: int, runs: int, timeout: float = 300.0, say=lambda m: None
) -> dict:
    """Run the worker under torchrun; returns rank 0's results ({mode: {...}})."""
    with tempfile.TemporaryDirectory(prefix="gpulint-dist-") as tmp:
        out = str(pathlib.Path(tmp) / "result.json")
        cmd = launch_command(modes, nproc, runs, out)
        say(f"{'/'.join(modes)}: torchrun --nproc_per_node={nproc}")
        try:
            done = subprocess.run(
                cmd,
                env=launch_env(),
                timeout=timeout,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"torchrun timed out after {timeout:.0f} s", "command": cmd}
        if not pathlib.Path(out).exists():
            tail = "\n".join(done.stdout.strip().splitlines()[-15:])
            return {
                "error": f"torchrun exited {done.returncode} without results:\n{tail}",
                "command": cmd,
            }
        result = json.loads(pathlib.Path(out).read_text())
        result["command"] = cmd
        result["returncode"] = done.returncode
        return result


# ---------------------------------------------------------------- worker (inside torchrun)


def _timer(torch, cuda: bool, dist):
    def time_block(fn, iters: int) -> float:
        dist.barrier()
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(iters):
                fn()
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1000 / iters

    return time_block


def _iters_for(time_block, fn, target_ms: float) -> int:
    one = time_block(fn, 1)
    return max(1, min(2000, int(target_ms / max(one, 1e-3)) + 1))


def worker_nccl(torch, dist, dev, runs: int, time_block) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"world_size": world, "backend": dist.get_backend(), "variants": {}, "checks": {}}
    for name, nbytes in SIZES.items():
        n = nbytes // 4
        t = torch.empty(n, dtype=torch.float32, device=dev)
        # correctness: every element is the sum of (rank + 1) over ranks
        t.fill_(rank + 1.0)
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        ok = bool(torch.all(t == expected).item())
        out["checks"][f"{name}_sum"] = {
            "ok": ok,
            "expected": expected,
            "got_first": float(t[0].item()),
        }
        for _ in range(3):
            dist.all_reduce(t)

        def reduce(t=t):
            dist.all_reduce(t)

        iters = _iters_for(time_block, reduce, 20.0)
        ms = [time_block(reduce, iters) for _ in range(runs)]
        algbw = [nbytes / (m * 1e-3) / 1e9 for m in ms]
        factor = 2 * (world - 1) / world
        out["variants"][name] = {
            "us": [m * 1000 for m in ms],
            "iters": iters,
            "bytes": nbytes,
            "algbw_GBps": algbw,
            "busbw_GBps": [a * factor for a in algbw],
        }
    return out


def _mlp(torch, dev):
    torch.manual_seed(0)
    layers = []
    for _ in range(MODEL["layers"]):
        layers += [torch.nn.Linear(MODEL["width"], MODEL["width"]), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(MODEL["width"], 1)).to(dev)


def _global_batch(torch, dev, world: int):
    g = torch.Generator(device="cpu").manual_seed(1234)
    b = MODEL["batch_per_rank"] * world
    x = torch.randn(b, MODEL["width"], generator=g).to(dev)
    y = torch.randn(b, 1, generator=g).to(dev)
    return x, y


def _reference_params(torch, dev, world: int) -> list:
    model = _mlp(torch, dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _global_batch(torch, dev, world)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    return [p.detach().clone() for p in model.parameters()]


def worker_train(mode: str, torch, dist, dev, runs: int, time_block) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = _mlp(torch, dev)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        wrapped = fully_shard(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    x, y = _global_batch(torch, dev, world)
    lo, hi = rank * MODEL["batch_per_rank"], (rank + 1) * MODEL["batch_per_rank"]
    xs, ys = x[lo:hi], y[lo:hi]

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(wrapped(xs), ys).backward()
        opt.step()

    step()  # the checked step
    got = []
    for p in wrapped.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        got.append(full.detach().clone())
    ref = _reference_params(torch, dev, world)
    max_diff = max(float((a - b).abs().max().item()) for a, b in zip(got, ref, strict=True))
    ok = max_diff <= 1e-5 and len(got) == len(ref)
    for _ in range(2):
        step()
    iters = _iters_for(time_block, step, 20.0)
    ms = [time_block(step, iters) for _ in range(runs)]
    grad_bytes = sum(p.numel() for p in model.parameters()) * 4 if mode == "ddp" else None
    return {
        "world_size": world,
        "backend": dist.get_backend(),
        "checks": {"params_match_single_process": {"ok": ok, "max_abs_diff": max_diff}},
        "variants": {
            "train_step": {"us": [m * 1000 for m in ms], "iters": iters, "grad_bytes": grad_bytes}
        },
    }


def worker_no_sync(torch, dist, dev, runs: int, time_block) -> dict:
    """One optimizer step of `micro_steps` accumulated micro-batches, all-reducing after every
    backward (`every_micro_step`) vs only after the last (`no_sync`)."""
    import contextlib

    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = NO_SYNC
    steps, micro, width = cfg["micro_steps"], cfg["micro_batch_per_rank"], cfg["width"]

    def build():
        torch.manual_seed(0)
        layers = []
        for _ in range(cfg["layers"]):
            layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(dev)
        ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
        return ddp, torch.optim.SGD(ddp.parameters(), lr=0.01)

    g = torch.Generator(device="cpu").manual_seed(4321 + rank)
    xs = [torch.randn(micro, width, generator=g).to(dev) for _ in range(steps)]
    ys = [torch.randn(micro, 1, generator=g).to(dev) for _ in range(steps)]

    def make_step(ddp, opt, skip_sync: bool):
        def step():
            for i in range(steps):
                last = i == steps - 1
                ctx = ddp.no_sync() if skip_sync and not last else contextlib.nullcontext()
                with ctx:
                    loss = torch.nn.functional.mse_loss(ddp(xs[i]), ys[i]) / steps
                    loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    plan = {"every_micro_step": False, "no_sync": True}
    models = {name: build() for name in plan}
    fns = {name: make_step(models[name][0], models[name][1], skip) for name, skip in plan.items()}
    for fn in fns.values():  # the checked step: both from the same initial weights
        fn()
    a = [p.detach() for p in models["every_micro_step"][0].parameters()]
    b = [p.detach() for p in models["no_sync"][0].parameters()]
    max_diff = max(float((x - y).abs().max().item()) for x, y in zip(a, b, strict=True))
    for fn in fns.values():
        fn()
    out: dict = {"world_size": world, "backend": dist.get_backend(), "variants": {}}
    out["checks"] = {
        "same_parameters_both_ways": {"ok": max_diff <= 1e-5, "max_abs_diff": max_diff}
    }
    iters = max(1, min(50, _iters_for(time_block, fns["every_micro_step"], 50.0)))
    agreed = torch.tensor([iters], device=dev)
    dist.broadcast(agreed, 0)  # every rank must run the same number of collectives
    iters = int(agreed.item())
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):  # alternating, run by run: drift lands on both alike
        for name, fn in fns.items():
            samples[name].append(time_block(fn, iters))
    grad_bytes = sum(p.numel() for p in models["no_sync"][0].parameters()) * 4
    for name, ms in samples.items():
        out["variants"][name] = {
            "ms": ms,
            "iters": iters,
            "allreduces_per_step": steps if name == "every_micro_step" else 1,
            "grad_bytes": grad_bytes,
        }
    return out


def worker_main(modes: list[str], runs: int, out: str) -> int:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl" if cuda else "gloo", device_id=dev if cuda else None)
    time_block = _timer(torch, cuda, dist)
    results: dict = {"device": torch.cuda.get_device_name(dev) if cuda else "cpu", "modes": {}}
    for mode in modes:
        try:
            if mode == "nccl":
                results["modes"][mode] = worker_nccl(torch, dist, dev, runs, time_block)
            elif mode == "ddp-no-sync":
                results["modes"][mode] = worker_no_sync(torch, dist, dev, runs, time_block)
            else:
                results["modes"][mode] = worker_train(mode, torch, dist, dev, runs, time_block)
        except Exception as exc:
            results["modes"][mode] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        dist.barrier()
    if dist.get_rank() == 0:
        tmp = out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(results, fh)
        os.replace(tmp, out)
    dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------- records (parent side)


def to_results(mode: str, raw: dict, nproc: int):
    """Turn one mode's worker output into a BenchResult for the record."""
    from ..harness import BenchResult, variant_from, variant_not_run

    config = {
        "nproc": nproc,
        "launcher": "python -m torch.distributed.run --standalone",
        "env": SAFE_ENV,
    }
    if "error" in raw:
        label = {"nccl": "all-reduce", "ddp-no-sync": "DDP accumulated step"}.get(
            mode, f"{mode} train step"
        )
        return BenchResult(
            config=config,
            variants=[variant_not_run("run", label, "us", "lower", "failed", raw["error"])],
            checks={},
        )
    world = raw["world_size"]
    config.update({"world_size": world, "backend": raw["backend"]})
    variants = []
    if mode == "nccl":
        config["sizes_bytes"] = SIZES
        for name, v in raw["variants"].items():
            var = variant_from(
                name,
                f"all-reduce {v['bytes'] // 1024} KiB"
                if v["bytes"] < 1 << 20
                else f"all-reduce {v['bytes'] >> 20} MiB",
                v["us"],
                "us",
                "lower",
                iters=v["iters"],
                bytes=v["bytes"],
            )
            from ..stats import summarize

            var["extra"]["algbw_GBps"] = summarize(v["algbw_GBps"])["median"]
            var["extra"]["busbw_GBps"] = summarize(v["busbw_GBps"])["median"]
            if world == 1:
                var["extra"]["busbw_note"] = "one rank: no bytes cross a link, bus bandwidth is 0"
            variants.append(var)
    elif mode == "ddp-no-sync":
        return _no_sync_results(config, raw, world)
    else:
        config["model"] = MODEL
        config["sharding"] = "DDP" if mode == "ddp" else "FSDP2 fully_shard per Linear + root"
        v = raw["variants"]["train_step"]
        variants.append(
            variant_from(
                "train_step",
                f"{mode.upper()} train step",
                v["us"],
                "us",
                "lower",
                iters=v["iters"],
                grad_bytes=v["grad_bytes"],
            )
        )
    return BenchResult(config=config, variants=variants, checks=raw["checks"])


def _no_sync_results(config: dict, raw: dict, world: int):
    from ..harness import BenchResult, variant_from

    config["model"] = NO_SYNC
    if world == 1:
        config["note"] = NO_SYNC_ONE_RANK
    labels = {
        "every_micro_step": f"all-reduce after every backward ({NO_SYNC['micro_steps']} per step)",
        "no_sync": "`no_sync()` on the non-final micro-steps (1 all-reduce per step)",
    }
    variants = []
    for name, v in raw["variants"].items():
        var = variant_from(
            name,
            labels[name],
            v["ms"],
            "ms",
            "lower",
            iters=v["iters"],
            allreduces_per_step=v["allreduces_per_step"],
            grad_bytes=v["grad_bytes"],
            micro_steps=NO_SYNC["micro_steps"],
        )
        if world == 1:
            var["extra"]["note"] = NO_SYNC_ONE_RANK
        variants.append(var)
    return BenchResult(
        config=config,
        variants=variants,
        headline={
            "baseline": "every_micro_step",
            "improved": "no_sync",
            "what": "gradient accumulation without `no_sync()`",
            "per": "per optimizer step",
            "paired": True,
        },
        checks=raw["checks"],
    )


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--modes", required=True)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    sys.exit(worker_main(a.modes.split(","), a.runs, a.out))
