"""Host state inside a CUDA graph capture: what a replay does with a host random number drawn
during capture and with a host tensor copied to the device there, and what replaying a graph
whose inputs are updated in place costs against running the step eagerly.

The step is an inference MLP forward (4 x [Linear 1024->1024, ReLU]; batch 64; fp32; under
`torch.no_grad()`), its input scaled by a random factor drawn on the host each step
(`random.uniform(0.5, 1.5)`), as a data augmentation or a noise scale would be. Three ways:

- eager: the forward run op by op, a fresh host draw each step;
- graph_static: the right way: the factor and the input are static device tensors, updated in
  place before each replay (`static_scale.fill_(random.uniform(...))`, `static_x.copy_(x)`);
- graph_frozen: the wrong way GPU506 reports: the factor drawn inside `torch.cuda.graph(g)`, so
  it is frozen into the graph and every replay reuses it (timed as context: its output is wrong).

Checks (expectations of CUDA graph semantics; a failed one means the bench measured something
else): the frozen graph's replays all give the same output while eager steps with fresh draws
differ; the static graph's output equals an eager forward on the same input and factor at every
replay. In a child process (a capture that fails can leave its process unusable) the bench also
tries the two host copies the rule names: a pageable host tensor moved to the device inside the
capture (`torch.arange(n).cuda()`), and a pinned one (`non_blocking=True`), after which the
pinned buffer is overwritten on the host and the graph replayed. What happened is recorded in
`config.host_copy_in_capture` as observed, not gated.
"""

from __future__ import annotations

import json
import random
from typing import Any

from ..harness import BenchResult, Context, variant_from, variant_not_run
from . import _child

CONFIG = {
    "width": 1024,
    "layers": 4,
    "batch": 64,
    "dtype": "float32",
    "grad_mode": "torch.no_grad()",
    "host_rng": "random.Random(0).uniform(0.5, 1.5)",
    "inputs": 8,
    "steps_per_run": 200,
    "max_rel_err": 1e-4,
}
LABELS = {
    "eager": "eager forward, a host draw each step",
    "graph_static": "graph replay, inputs updated in place before each replay",
    "graph_frozen": "replay with the host value frozen at capture (wrong output)",
}


def run(ctx: Context) -> BenchResult:
    if not ctx.cuda:
        reason = "refused: CUDA graphs need an NVIDIA GPU"
        return BenchResult(
            config=dict(CONFIG),
            variants=[
                variant_not_run(n, lab, "us", "lower", "failed", reason)
                for n, lab in LABELS.items()
            ],  # fmt: skip
        )
    torch = ctx.torch
    cfg: dict[str, Any] = dict(CONFIG)
    cfg.update(ctx.options.get("graph-capture", {}))
    with torch.no_grad():
        samples, raw = _measure(ctx, torch, cfg)
    ctx.say("graph-capture: host copies inside a capture, in a child process")
    child = _child.run_child(
        "graph_capture", ["--host-copy-probe", "--device-index", str(ctx.device.index or 0)],
        timeout=180,
    )  # fmt: skip
    probe = child.result if child.result is not None else {"error": child.error}
    return to_result(cfg, samples, raw, probe)


def _measure(ctx: Context, torch, cfg: dict) -> tuple[dict, dict]:
    dev = ctx.device
    nn: Any = torch.nn
    torch.manual_seed(0)
    layers: list = []
    for _ in range(int(cfg["layers"])):
        layers += [nn.Linear(cfg["width"], cfg["width"]), nn.ReLU()]
    model = nn.Sequential(*layers).to(dev).eval()
    g = torch.Generator(device=dev).manual_seed(0)
    xs = [
        torch.randn(cfg["batch"], cfg["width"], device=dev, generator=g)
        for _ in range(int(cfg["inputs"]))
    ]
    rng = random.Random(0)
    static_x = xs[0].clone()
    static_scale = torch.ones((), device=dev)

    # Warm up on a side stream before capture, as torch.cuda.graph's documentation asks.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x * static_scale)
            model(static_x * 1.0)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    frozen = torch.cuda.CUDAGraph()
    with torch.cuda.graph(frozen):
        captured_scale = rng.uniform(0.5, 1.5)  # GPU506: drawn once, at capture
        out_frozen = model(static_x * captured_scale)
    static = torch.cuda.CUDAGraph()
    with torch.cuda.graph(static):
        out_static = model(static_x * static_scale)
    torch.cuda.synchronize()

    # Correctness: what each way computes.
    static_x.copy_(xs[0])
    frozen_outs = []
    for _ in range(3):
        frozen.replay()
        frozen_outs.append(out_frozen.clone())
    eager_outs = [model(xs[0] * rng.uniform(0.5, 1.5)) for _ in range(3)]
    rel_errs, static_outs = [], []
    for i in range(3):
        s = rng.uniform(0.5, 1.5)
        static_scale.fill_(s)
        static_x.copy_(xs[i])
        static.replay()
        ref = model(xs[i] * s)
        rel_errs.append(float((out_static - ref).norm() / ref.norm()))
        static_outs.append(out_static.clone())
    torch.cuda.synchronize()
    raw = {
        "captured_scale": captured_scale,
        "frozen_replays_identical": all(torch.equal(frozen_outs[0], o) for o in frozen_outs[1:]),
        "eager_draws_differ": not any(torch.equal(eager_outs[0], o) for o in eager_outs[1:]),
        "static_rel_errs": rel_errs,
        "static_replays_differ": not any(torch.equal(static_outs[0], o) for o in static_outs[1:]),
    }

    steps = int(cfg["steps_per_run"])
    n = len(xs)

    def eager():
        for i in range(steps):
            model(xs[i % n] * rng.uniform(0.5, 1.5))

    def graph_static():
        for i in range(steps):
            static_scale.fill_(rng.uniform(0.5, 1.5))
            static_x.copy_(xs[i % n])
            static.replay()

    def graph_frozen():
        for _ in range(steps):
            frozen.replay()

    def no_grad(fn):
        def go():
            with torch.no_grad():
                fn()

        return go

    ms = ctx.measure_interleaved(
        {"eager": no_grad(eager), "graph_static": no_grad(graph_static),
         "graph_frozen": no_grad(graph_frozen)},
        warmup=2, label="graph-capture",
    )  # fmt: skip
    samples = {name: [x * 1000.0 / steps for x in values] for name, values in ms.items()}
    return samples, raw


def to_result(cfg: dict, samples: dict, raw: dict, probe: dict) -> BenchResult:
    """The record's parts from the measured samples (µs per step), the correctness outcomes and
    the child's host-copy probe: no torch needed, so it is tested on any machine."""
    cfg = dict(cfg)
    cfg["captured_scale"] = raw.get("captured_scale")
    cfg["host_copy_in_capture"] = probe
    variants = [
        variant_from(
            name, LABELS[name], samples[name], "us", "lower", steps_per_run=cfg["steps_per_run"]
        )  # fmt: skip
        for name in LABELS
    ]
    errs = [float(e) for e in raw.get("static_rel_errs", [])]
    checks = {
        "frozen_replays_identical": {
            "ok": bool(raw.get("frozen_replays_identical")),
            "what": "a host value drawn during capture: every replay gives the same output",
        },
        "eager_draws_differ": {"ok": bool(raw.get("eager_draws_differ"))},
        "static_graph_matches_eager": {
            "ok": bool(errs) and max(errs) <= cfg["max_rel_err"],
            "rel_errs": errs,
        },
        "static_replays_follow_inputs": {"ok": bool(raw.get("static_replays_differ"))},
    }
    return BenchResult(
        config=cfg,
        variants=variants,
        headline={
            "baseline": "eager",
            "improved": "graph_static",
            "what": "running the step eagerly instead of replaying a CUDA graph whose inputs "
            "are updated in place",
            "per": "per step",
            "context": "graph_frozen",
            "paired": True,
        },
        checks=checks,
    )


def _host_copy_probe(device_index: int) -> dict:
    """In a fresh process: a pageable and a pinned host tensor copied inside a capture."""
    import torch

    dev = torch.device("cuda", device_index)
    torch.cuda.set_device(dev)
    out: dict[str, Any] = {"torch": torch.__version__}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        (torch.arange(8, dtype=torch.float32).to(dev) * 2).sum()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    result = torch.zeros(8, device=dev)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            positions = torch.arange(8, dtype=torch.float32).cuda()  # pageable, as GPU506 flags
            result.copy_(positions * 2)
        graph.replay()
        torch.cuda.synchronize()
        out["pageable"] = {"captured": True, "replay_result": result.tolist()}
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out["pageable"] = {"captured": False, "error": f"{type(exc).__name__}: {first}"[:300]}
        try:
            torch.cuda.synchronize()
        except Exception as again:  # the context may not survive; say so and stop
            out["context_after_failed_capture"] = f"{type(again).__name__}: {again}"[:300]
            return out

    pinned = torch.full((8,), 1.0).pin_memory()
    result2 = torch.zeros(8, device=dev)
    graph2 = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph2):
            result2.copy_(pinned.to(dev, non_blocking=True) * 2)
        graph2.replay()
        torch.cuda.synchronize()
        first = result2.tolist()
        pinned.fill_(5.0)  # the host buffer changes after capture
        graph2.replay()
        torch.cuda.synchronize()
        out["pinned"] = {
            "captured": True,
            "replay_before_host_write": first,
            "replay_after_host_write": result2.tolist(),
            "replay_reads_the_buffer_now": result2.tolist() == [10.0] * 8,
        }
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out["pinned"] = {"captured": False, "error": f"{type(exc).__name__}: {first_line}"[:300]}
    return out


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--host-copy-probe", action="store_true", required=True)
    p.add_argument("--device-index", type=int, default=0)
    a = p.parse_args()
    try:
        res = _host_copy_probe(a.device_index)
    except Exception as exc:  # report, never crash the parent's table
        res = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    print(json.dumps(res), flush=True)
