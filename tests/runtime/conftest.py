"""Shared helpers for the runtime tests: a valid evidence record to start from, and a
fake NVML module for the shared-GPU guard."""

from __future__ import annotations

import copy
import types

import pytest


def _variant(name, label, samples, unit="us", better="lower"):
    from gpulint.runtime.harness import variant_from

    return variant_from(name, label, samples, unit, better)


@pytest.fixture
def sync_record():
    from gpulint.runtime.evidence import SCHEMA

    return copy.deepcopy(
        {
            "schema": SCHEMA,
            "bench": "sync",
            "timestamp": "2026-12-02T17:00:00Z",
            "command": "gpulint bench sync --runs 5",
            "argv": ["gpulint", "bench", "sync", "--runs", "5"],
            "config": {"batch": 256, "width": 1024, "runs": 5},
            "device": {"name": "NVIDIA H200", "index": 0, "compute_capability": "9.0"},
            "versions": {"gpulint": "0.1.0", "torch": "2.11.0+cu130"},
            "variants": [
                _variant("every_step", ".item() every step", [1530, 1535, 1540, 1536, 1533]),
                _variant("every_50", ".item() every 50 steps", [1330, 1334, 1338, 1336, 1331]),
            ],
            "headline": {
                "baseline": "every_step",
                "improved": "every_50",
                "what": "an .item() every step",
                "per": "per step",
            },
            "checks": {"loss_finite": {"ok": True}},
            "ok": True,
        }
    )


class FakeProc:
    def __init__(self, pid, used=1 << 30):
        self.pid = pid
        self.usedGpuMemory = used


def _fake_nvml(procs_per_gpu, util_per_gpu=None, fail_init=False):
    """A stand-in for pynvml with ``len(procs_per_gpu)`` GPUs."""
    util_per_gpu = util_per_gpu or [0] * len(procs_per_gpu)
    m = types.SimpleNamespace()

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(procs_per_gpu)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: f"GPU-0000000{h}-aaaa"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: list(procs_per_gpu[h])
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=util_per_gpu[h])
    return m


@pytest.fixture
def fake_nvml():
    """Factory: fake_nvml([[FakeProc(pid)], []], util_per_gpu=[0, 93], fail_init=False)."""
    return _fake_nvml


@pytest.fixture
def proc():
    """Factory for a process entry as NVML lists it."""
    return FakeProc
