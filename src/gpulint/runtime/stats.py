"""The figures a speedup claim may quote: never one run, always the median with its spread.

A claim needs at least three runs (``MIN_RUNS``); the default is five. Each run's figure is itself
an average over several timed iterations (see ``harness``), so a run is one sample here.
"""

from __future__ import annotations

import math
import statistics

MIN_RUNS = 3
DEFAULT_RUNS = 5


class TooFewRuns(ValueError):
    """Fewer than ``MIN_RUNS`` samples: no median worth quoting."""


def check_runs(runs: int) -> int:
    if runs < MIN_RUNS:
        raise TooFewRuns(f"--runs must be at least {MIN_RUNS} (got {runs}): one run is no evidence")
    return runs


def summarize(samples: list[float]) -> dict:
    """Median, min, max, mean, sample stdev and relative spread ((max - min) / median)."""
    values = [float(x) for x in samples]
    if len(values) < MIN_RUNS:
        raise TooFewRuns(f"{len(values)} samples; a summary needs at least {MIN_RUNS}")
    if any(math.isnan(x) or math.isinf(x) for x in values):
        raise ValueError("samples contain NaN or infinity")
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values),
        "spread": (max(values) - min(values)) / median if median else 0.0,
        "runs": len(values),
    }


def overlap(a: dict, b: dict) -> bool:
    """Whether two summaries' [min, max] ranges overlap: a difference inside run-to-run noise."""
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def fmt(value: float) -> str:
    """A figure with digits that mean something: 1,535 / 54.9 / 4.17 / 0.51."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    mag = abs(value)
    if mag >= 100:
        return f"{value:,.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    if mag >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"
