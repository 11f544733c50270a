"""What a rule sees of the configuration: targets, per-language options, evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpulint.hardware import Target


@dataclass(frozen=True)
class Settings:
    targets: tuple[Target, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)  # bench name -> measured-cost sentence
    # language -> what a front-end gathered across the checked tree before linting (e.g. the
    # CUDA front-end's CudaProject); empty when files are linted one by one
    projects: dict[str, Any] = field(default_factory=dict)

    def option(self, table: str, key: str, default: Any = None) -> Any:
        return self.options.get(table, {}).get(key, default)
