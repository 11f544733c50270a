"""What every bench shares: timing with CUDA events, variants, progress and the record.

A bench is a function ``run(ctx) -> BenchResult``. For each variant it calls ``ctx.measure``:
warm up (compilation, handles, caches stay out of the figures), pick an iteration count so one
run lasts long enough to dwarf launch overhead and event resolution, then time ``runs`` runs with
CUDA events. One run's figure is the mean over its iterations; the summary is over runs.
torch is imported here only inside functions.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

from gpulint import __version__

from . import evidence
from .stats import summarize


def progress(msg: str) -> None:
    print(f"[gpulint bench] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class BenchResult:
    config: dict
    variants: list[dict]
    headline: dict | None = None
    checks: dict = dataclasses.field(default_factory=dict)
    headlines: dict = dataclasses.field(default_factory=dict)  # claim -> headline


class Context:
    """Per-invocation state: the device, the number of runs, the ceilings measured so far."""

    def __init__(
        self,
        runs: int,
        *,
        device_index: int = 0,
        options: dict | None = None,
        prior: list[dict] | None = None,
        say: Callable[[str], None] = progress,
    ):
        import torch

        self.torch = torch
        self.runs = runs
        self.options = options or {}
        self.say = say
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", device_index) if self.cuda else torch.device("cpu")
        if self.cuda:
            torch.cuda.set_device(self.device)
        self.device_info = device_info(device_index if self.cuda else None)
        self.ceilings: dict[str, dict] = {}
        self._prior = prior or []

    # ---- ceilings: the measured roofs a figure is compared with -------------------------------

    def ceiling(self, key: str) -> dict | None:
        """A measured ceiling ('bf16_tflops', 'copy_tbps') from this run or earlier evidence."""
        if key in self.ceilings:
            return self.ceilings[key]
        source = {"bf16_tflops": ("matmul", "bf16"), "copy_tbps": ("copy", "d2d_1GiB")}[key]
        rec = evidence.newest(self._prior, source[0], self.device_info["name"])
        if rec:
            v = evidence.variant(rec, source[1])
            if v and v.get("status") == "ok":
                return {"value": v["median"], "from": rec.get("_source", rec["timestamp"])}
        return None

    def annotate_compute(self, variant: dict, tflops: float, dtype: str) -> None:
        """Add TFLOP/s, % of the datasheet dense peak and % of the measured bf16 matmul."""
        from .roofline import try_lookup

        extra = variant.setdefault("extra", {})
        extra["tflops"] = tflops
        roof = try_lookup(self.device_info["name"], dtype)
        if roof is not None:
            extra["pct_peak"] = roof.pct_of_peak(tflops)
            extra["peak"] = {
                "dtype": dtype,
                "tflops": roof.peak_tflops,
                "source": roof.source,
                "estimate": roof.peak_is_estimate,
            }
        ceil = self.ceiling("bf16_tflops") if dtype in ("bf16", "fp16") else None
        if ceil:
            extra["pct_measured_ceiling"] = 100.0 * tflops / ceil["value"]

    # ---- timing --------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def measure(
        self,
        fn: Callable[[], object],
        *,
        warmup: int = 3,
        warmup_ms: float = 0.0,
        min_run_ms: float = 25.0,
        max_iters: int = 1000,
        iters: int | None = None,
        gap_s: float = 0.0,
        label: str = "",
    ) -> dict:
        """Time ``fn`` ``self.runs`` times; returns per-iteration milliseconds for each run.

        ``gap_s`` idles the GPU before each run: short bursts separated by idle time measure the
        clocks a GPU holds before its power limit pulls them down (how the anchors' matmul was
        timed); without it, back-to-back runs measure the sustained, power-limited rate.
        """
        t0 = time.perf_counter()
        done = 0
        # at least `warmup` calls, and at least `warmup_ms` of them: clocks ramp up from idle
        while done < warmup or (time.perf_counter() - t0) * 1000.0 < warmup_ms:
            fn()
            done += 1
            if done >= warmup:
                self.sync()
        self.sync()
        warm_s = time.perf_counter() - t0
        if iters is None:
            one = self._time_block(fn, 1)
            iters = max(1, min(max_iters, math.ceil(min_run_ms / max(one, 1e-3))))
        samples = []
        for r in range(self.runs):
            self.say(f"{label} run {r + 1}/{self.runs} ({iters} iterations)")
            if gap_s:
                time.sleep(gap_s)
                fn()  # one untimed call after the idle gap, as after any warm-up
                self.sync()
            samples.append(self._time_block(fn, iters))
        return {
            "ms": samples,
            "iters": iters,
            "warmup": done,
            "warmup_s": warm_s,
            "sm_clock_mhz": sm_clock_mhz(self.device.index),
        }

    def measure_interleaved(
        self,
        fns: dict[str, Callable[[], object]],
        *,
        warmup: int = 1,
        iters: int = 1,
        label: str = "",
    ) -> dict[str, list[float]]:
        """Time several variants run by run, alternating (A B A B ...), so that drift in the
        machine (clocks, a noisy host CPU) lands on every variant alike rather than on one."""
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        self.sync()
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for r in range(self.runs):
            self.say(f"{label} run {r + 1}/{self.runs} ({', '.join(fns)} alternating)")
            for name, fn in fns.items():
                samples[name].append(self._time_block(fn, iters))
        return samples

    def _time_block(self, fn: Callable[[], object], iters: int) -> float:
        if self.cuda:
            return cuda_block_ms(self.torch, fn, iters)[0]
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1000.0 / iters


def cuda_block_ms(torch, fn: Callable[[], Any], iters: int) -> tuple[float, Any]:
    """`iters` calls of `fn` timed as one block with CUDA events on the current stream: the
    mean milliseconds per call, and the last call's result (a loss to check afterwards)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    last: Any = None
    start.record()
    for _ in range(iters):
        last = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters, last


def variant_from(
    name: str, label: str, samples: list[float], unit: str, better: str, **extra: object
) -> dict:
    """An ``ok`` variant: the summary of ``samples`` plus the raw samples themselves."""
    v: dict[str, object] = {
        "name": name,
        "label": label,
        "unit": unit,
        "better": better,
        "status": "ok",
    }
    v.update(summarize(samples))
    v["samples"] = [float(s) for s in samples]
    v["extra"] = dict(extra)
    return v


def variant_not_run(
    name: str, label: str, unit: str, better: str, status: str, reason: str
) -> dict:
    return {
        "name": name,
        "label": label,
        "unit": unit,
        "better": better,
        "status": status,
        "reason": reason,
        "extra": {},
    }


def device_info(index: int | None) -> dict:
    from .roofline import table_name_for

    if index is None:
        return {
            "name": f"CPU ({platform.processor() or platform.machine()})",
            "index": None,
            "compute_capability": None,
            "sm_count": None,
            "memory_bytes": None,
            "table_name": None,
        }
    from .probe import device_properties

    d = device_properties(index)
    d["table_name"] = table_name_for(d["name"])
    return d


def versions() -> dict:
    from .probe import cudnn_version, nvml_info, torch_info

    v: dict[str, str | None] = {"gpulint": __version__, "python": sys.version.split()[0]}
    try:
        import torch

        v["torch"] = torch.__version__
        v["cuda"] = torch.version.cuda
        v["cudnn"] = cudnn_version(
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        )
        try:
            n = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, n)) if isinstance(n, tuple) else str(n)
        except Exception:
            v["nccl"] = None
    except ImportError:
        v.update(torch_info())
    v["driver"] = nvml_info().get("driver")
    return v


def command_line(argv: list[str] | None = None) -> tuple[str, list[str]]:
    args = list(sys.argv if argv is None else argv)
    if args and args[0].endswith(("gpulint", "__main__.py", "-m")):
        args[0] = "gpulint" if args[0].endswith("gpulint") else "python -m gpulint.runtime"
    return " ".join([args[0], shlex.join(args[1:])]).strip() if args else "", args


def make_record(
    bench: str, result: BenchResult, *, device: dict, vers: dict, command: str, argv: list[str]
) -> dict:
    failed_checks = [k for k, c in result.checks.items() if not c.get("ok", False)]
    failed_variants = [v["name"] for v in result.variants if v["status"] == "failed"]
    rec = {
        "schema": evidence.SCHEMA,
        "bench": bench,
        "timestamp": evidence.now_utc(),
        "command": command,
        "argv": argv,
        "config": result.config,
        "device": device,
        "versions": vers,
        "variants": result.variants,
        "headline": result.headline,
        "headlines": result.headlines,
        "checks": result.checks,
        "ok": not failed_checks and not failed_variants,
    }
    if failed_checks or failed_variants:
        rec["problems"] = [f"check failed: {k}" for k in failed_checks] + [
            f"variant failed: {n}" for n in failed_variants
        ]
    return rec


def sm_clock_mhz(index: int | None) -> int | None:
    """The SM clock NVML reports now (recorded next to a figure; None where NVML cannot say)."""
    if index is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
