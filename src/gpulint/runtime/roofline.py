"""Roofline denominators from the one hardware table (``gpulint/data/hardware.toml``).

A denominator that is not known is refused, not guessed: an unknown device, an unknown dtype or
a peak the table does not hold raises ``RooflineRefused`` unless the caller supplies the peak
*and* where it comes from. Peaks are dense; a user-supplied peak that is twice the table's dense
figure is refused as a 2:4-sparse figure (NVIDIA markets sparse at exactly 2x dense, and a sparse
denominator silently halves every reported percentage).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from gpulint.hardware import DTYPES, SPARSE_TO_DENSE, UnknownTargetError, table

VENDOR_PREFIXES = ("nvidia ", "tesla ", "geforce ", "quadro ")


class RooflineRefused(ValueError):
    """No trustworthy denominator: say so rather than divide by a guess."""


@dataclass(frozen=True)
class Roofline:
    device: str
    dtype: str
    peak_tflops: float
    memory_tbps: float | None
    source: str
    estimated: list[str] = field(default_factory=list)
    note: str = ""
    user_supplied: bool = False

    @property
    def ridge_flop_per_byte(self) -> float | None:
        """Arithmetic intensity below which a kernel is memory-bound."""
        if not self.memory_tbps:
            return None
        return self.peak_tflops / self.memory_tbps

    @property
    def peak_is_estimate(self) -> bool:
        return self.dtype in self.estimated

    def pct_of_peak(self, tflops: float) -> float:
        return 100.0 * tflops / self.peak_tflops

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ridge_flop_per_byte"] = self.ridge_flop_per_byte
        d["peak_is_estimate"] = self.peak_is_estimate
        return d


def table_name_for(device_name: str) -> str | None:
    """The hardware-table name for a driver-reported name ("NVIDIA H200" -> "H200"), or None.

    Exact matches only (after dropping a vendor prefix): a near match such as "H100 NVL" has
    different peaks from "H100", and a wrong denominator is worse than none.
    """
    candidates = [device_name.strip()]
    lowered = device_name.strip().lower()
    for prefix in VENDOR_PREFIXES:
        if lowered.startswith(prefix):
            candidates.append(device_name.strip()[len(prefix) :])
    for name in candidates:
        try:
            return table().gpu(name).name
        except UnknownTargetError:
            continue
    return None


def lookup(
    device: str,
    dtype: str,
    *,
    peak: float | None = None,
    source: str | None = None,
    bandwidth: float | None = None,
) -> Roofline:
    """The dense peak for ``dtype`` on ``device`` and the memory bandwidth, with their source."""
    dtype = dtype.strip().lower()
    if peak is not None:
        if not source or not source.strip():
            raise ValueError("--peak needs --source: say where the figure comes from")
        if not (peak > 0 and math.isfinite(peak)):
            raise ValueError(f"--peak must be a positive number of TFLOP/s (got {peak})")
    name = table_name_for(device)
    gpu = table().gpu(name) if name else None

    if gpu is not None and dtype in gpu.peak_tflops and peak is not None:
        dense = gpu.peak_tflops[dtype]
        if math.isclose(peak, dense * SPARSE_TO_DENSE, rel_tol=0.02):
            raise RooflineRefused(
                f"--peak {peak:g} is exactly {SPARSE_TO_DENSE:g}x the dense {dtype} peak of "
                f"{gpu.name} ({dense:g} TFLOP/s): that is a 2:4-sparse figure; use the dense one"
            )

    if peak is not None and source is not None:  # (a peak without a source was refused above)
        memory = bandwidth if bandwidth is not None else (gpu.memory_tbps if gpu else None)
        return Roofline(
            device=gpu.name if gpu else device,
            dtype=dtype,
            peak_tflops=float(peak),
            memory_tbps=memory,
            source=f"user: {source.strip()}",
            estimated=[],
            note="peak supplied by the user",
            user_supplied=True,
        )
    if gpu is None:
        raise RooflineRefused(
            f"unknown device {device!r}: no roofline without a sourced peak. Known: "
            f"{', '.join(sorted(table().gpus))}. Pass --peak TFLOPS --source TEXT to use a "
            f"datasheet figure you have checked."
        )
    if dtype not in DTYPES:
        raise RooflineRefused(
            f"unknown dtype {dtype!r}: known dtypes are {', '.join(DTYPES)}. Pass --peak TFLOPS "
            f"--source TEXT to use a datasheet figure you have checked."
        )
    if dtype not in gpu.peak_tflops:
        what = "is an unpublished estimate" if gpu.is_estimated(dtype) else "is not in the table"
        raise RooflineRefused(
            f"the dense {dtype} peak of {gpu.name} {what}; refusing to guess. "
            f"{gpu.note + '. ' if gpu.note else ''}Pass --peak TFLOPS --source TEXT."
        )
    return Roofline(
        device=gpu.name,
        dtype=dtype,
        peak_tflops=gpu.peak_tflops[dtype],
        memory_tbps=gpu.memory_tbps,
        source=gpu.source,
        estimated=[e for e in gpu.estimated if e in (dtype, "memory")],
        note=gpu.note,
    )


def try_lookup(device: str, dtype: str) -> Roofline | None:
    """``lookup`` for bench reports: None where the denominator is refused."""
    try:
        return lookup(device, dtype)
    except (RooflineRefused, ValueError):
        return None


def memory_tbps(device: str) -> tuple[float | None, str]:
    """The table's memory bandwidth for a driver-reported device name, and its source."""
    name = table_name_for(device)
    if name is None:
        return None, ""
    gpu = table().gpu(name)
    return gpu.memory_tbps, gpu.source


def render(roof: Roofline) -> str:
    est = " (ESTIMATE)" if roof.peak_is_estimate else ""
    lines = [
        f"device        {roof.device}",
        f"dtype         {roof.dtype}",
        f"dense peak    {roof.peak_tflops:,.1f} TFLOP/s{est}",
    ]
    if roof.memory_tbps:
        mem_est = " (ESTIMATE)" if "memory" in roof.estimated else ""
        lines.append(f"memory        {roof.memory_tbps:g} TB/s{mem_est}")
        lines.append(f"ridge point   {roof.ridge_flop_per_byte:,.0f} FLOP/byte")
    else:
        lines.append("memory        unknown (pass --bandwidth TBPS)")
    lines.append(f"source        {roof.source}")
    if roof.note:
        lines.append(f"note          {roof.note}")
    lines.append("sparse        2:4-sparse marketing figures are 2x these; never divide by them")
    return "\n".join(lines)
