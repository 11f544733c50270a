"""The hardware table: architectures (``sm_XX``) and named GPUs, read from ``data/hardware.toml``.

Targets in the configuration, hardware-aware rules and the runtime roofline all resolve through
here, so a figure lives in exactly one place. Unknown names are errors that list the known ones;
unknown or estimated peaks are never returned as if they were datasheet figures.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")
SPARSE_TO_DENSE = 2.0  # NVIDIA's 2:4-sparse figures are exactly twice the dense ones


class UnknownTargetError(ValueError):
    """A target name that is neither an ``sm_XX`` architecture nor a known GPU."""


@dataclass(frozen=True)
class Arch:
    name: str  # "sm_90"
    compute_capability: str
    smem_per_block: int
    bf16: bool
    fp8: bool

    @property
    def major(self) -> int:
        return int(self.compute_capability.split(".")[0])


@dataclass(frozen=True)
class GPU:
    name: str
    arch: Arch
    aliases: tuple[str, ...] = ()
    peak_tflops: dict[str, float] = field(default_factory=dict)
    memory_tbps: float | None = None
    estimated: tuple[str, ...] = ()
    source: str = ""
    note: str = ""

    def is_estimated(self, what: str) -> bool:
        return what in self.estimated


@dataclass(frozen=True)
class Target:
    """What a configured target means to a rule: an architecture, and the GPU if one was named."""

    spelling: str
    arch: Arch
    gpu: GPU | None = None

    @property
    def label(self) -> str:
        return f"{self.gpu.name} ({self.arch.name})" if self.gpu else self.arch.name


@dataclass(frozen=True)
class Table:
    archs: dict[str, Arch]
    gpus: dict[str, GPU]
    _lookup: dict[str, GPU]

    def known_names(self) -> list[str]:
        """Architectures in compute-capability order, then GPU names."""
        return sorted(self.archs, key=lambda a: int(a[3:])) + sorted(self.gpus)

    def gpu(self, name: str) -> GPU:
        found = self._lookup.get(_norm(name))
        if found is None:
            raise UnknownTargetError(f"unknown GPU {name!r}; known: {', '.join(sorted(self.gpus))}")
        return found

    def target(self, spelling: str) -> Target:
        key = spelling.strip()
        arch = _ARCH.match(key)
        if arch:
            # sm_90, sm90, SM_90, and the arch-specific spellings sm_90a / sm_100f.
            arch_key = f"sm_{arch.group(1)}"
            if arch_key in self.archs:
                return Target(spelling, self.archs[arch_key])
        gpu = self._lookup.get(_norm(key))
        if gpu is not None:
            return Target(spelling, gpu.arch, gpu)
        raise UnknownTargetError(
            f"unknown target {spelling!r}; known: {', '.join(self.known_names())}"
        )


_ARCH = re.compile(r"^sm_?(\d+)[af]?$", re.IGNORECASE)


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@functools.cache
def table() -> Table:
    import tomllib  # here: a check that resolves no target never reads the table
    from pathlib import Path

    # data/ is installed beside the modules (as levers.py reads it): importlib.resources would
    # cost a one-file check 3 ms of imports (zipfile) for the same path
    raw = tomllib.loads(Path(__file__).resolve().parent.joinpath("data/hardware.toml").read_text())
    archs = {
        name: Arch(name, v["compute_capability"], v["smem_per_block"], v["bf16"], v["fp8"])
        for name, v in raw.items()
        if name.startswith("sm_")
    }
    gpus: dict[str, GPU] = {}
    lookup: dict[str, GPU] = {}
    for name, v in raw.get("gpu", {}).items():
        gpu = GPU(
            name=name,
            arch=archs[v["arch"]],
            aliases=tuple(v.get("aliases", ())),
            peak_tflops={k: float(x) for k, x in v.get("peak_tflops", {}).items()},
            memory_tbps=v.get("memory_tbps"),
            estimated=tuple(v.get("estimated", ())),
            source=v.get("source", ""),
            note=v.get("note", ""),
        )
        gpus[name] = gpu
        for spelling in (name, *gpu.aliases):
            lookup[_norm(spelling)] = gpu
    return Table(archs, gpus, lookup)


def resolve_targets(spellings: list[str]) -> list[Target]:
    """Resolve configured target spellings; raises UnknownTargetError naming the bad one."""
    return [table().target(s) for s in spellings]


# What a hardware rule may assume when no target is configured and no local GPU is named: the
# common datacenter GPUs, each the one with the most shared memory per block for its kind of
# Triton pipeline (A100: the cp.async pipeline of sm_80/86/89/120/121, 163 KiB; H100: the
# wgmma pipeline of sm_90/100, 227 KiB). What overflows on both overflows on every GPU here.
ASSUMED_TARGETS = ("A100", "H100")


def assumed_targets() -> tuple[Target, ...]:
    return tuple(table().target(name) for name in ASSUMED_TARGETS)
