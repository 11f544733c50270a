"""Which PyTorch releases a project declares it runs on, as ruff reads `target-version` from
`requires-python`.

A replacement API is only advice where it exists: `torch.amp.custom_fwd(device_type=)` is new
in 2.4, `persistent_workers` in 1.7, `scaled_dot_product_attention` in 2.0, `torchrun` in 1.10.
A project that pins an older torch cannot take the advice, and an API deprecated in 2.4 is not
deprecated for a project that pins 2.3. The range comes from `torch-version` in
`[tool.gpulint]`, else from the dependency files at the configuration's root (pyproject
dependencies, requirements*.txt, a conda environment file, setup.py / setup.cfg); nothing
found means nothing is known, and rules keep their defaults.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulint.settings import Settings

Version = tuple[int, ...]

# A requirement on torch: `torch==2.0.0`, `torch>=1.7,<2.0`, `pytorch=1.11.0` (conda), `torch
# ~= 2.1`; not torchvision, torchaudio, pytorch-lightning...
_REQUIREMENT = re.compile(
    r"(?<![\w.-])(?:py)?torch(?![\w.-])\s*(?:\[[^\]]*\])?\s*"
    r"((?:(?:===?|[<>!~]=|[<>]|=)\s*[\d][\w.*+!-]*\s*,?\s*)+)"
)
_CLAUSE = re.compile(r"(===?|[<>!~]=|[<>]|=)\s*([\d][\w.*+!-]*)")
_DEPENDENCY_FILES = (
    "pyproject.toml",
    "requirements.txt",
    "requirements-gpu.txt",
    "requirements_gpu.txt",
    "environment.yaml",
    "environment.yml",
    "setup.py",
    "setup.cfg",
)
_MAX_BYTES = 256 * 1024


def parse_version(text: str) -> Version | None:
    """`2.0.0+cu117` -> (2, 0, 0); `2.1.*` -> (2, 1); None for what is not a release number."""
    parts = []
    for piece in text.split("+")[0].split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.group() != piece:
            break
    return tuple(parts) or None


def _pad(v: Version) -> Version:
    return v + (0,) * (3 - len(v)) if len(v) < 3 else v


@dataclass(frozen=True)
class TorchRange:
    """The releases a project admits: `low` the lowest (inclusive), `high` the highest bound
    (inclusive or not); None where the declaration sets no bound. `why` names the source."""

    low: Version | None
    high: Version | None
    high_inclusive: bool
    why: str

    def admits_at_least(self, version: Version) -> bool:
        """Some admitted release is `version` or newer."""
        if self.high is None:
            return True
        high, v = _pad(self.high), _pad(version)
        return high > v or (high == v and self.high_inclusive)

    def all_at_least(self, version: Version) -> bool:
        """Every admitted release is `version` or newer (unknown floor: not known to be)."""
        return self.low is not None and _pad(self.low) >= _pad(version)

    def as_option(self) -> dict[str, Any]:
        return {
            "low": ".".join(map(str, self.low)) if self.low else "",
            "high": ".".join(map(str, self.high)) if self.high else "",
            "high_inclusive": self.high_inclusive,
            "why": self.why,
        }

    @classmethod
    def from_option(cls, option: dict[str, Any] | None) -> TorchRange | None:
        if not option:
            return None
        return cls(
            parse_version(option.get("low", "")),
            parse_version(option.get("high", "")),
            bool(option.get("high_inclusive")),
            str(option.get("why", "")),
        )


def range_of(specifier: str, why: str) -> TorchRange | None:
    """The range a specifier (`>=1.7,<2.0`, `==2.0.0`, conda's `=1.11.0`) admits."""
    low: Version | None = None
    high: Version | None = None
    inclusive = False
    for op, text in _CLAUSE.findall(specifier):
        v = parse_version(text)
        if v is None:
            continue
        if op in ("==", "===", "=", "~="):
            low = v if low is None or v > low else low
            if op == "~=" and len(v) >= 2:
                upper = (*v[:-2], v[-2] + 1)
                if high is None or upper <= high:
                    high, inclusive = upper, False
            elif high is None or v < high or (v == high and not inclusive):
                # `==2.0.*` / conda `=2.0` admit the whole 2.0 series
                wide = text.endswith("*") or op == "="
                high, inclusive = ((*v, 10**6) if wide else v), True
        elif op in (">=", ">"):
            low = v if low is None or v > low else low
        elif op in ("<", "<="):
            if high is None or v < high:
                high, inclusive = v, op == "<="
    if low is None and high is None:
        return None
    return TorchRange(low, high, inclusive, why)


def _specifiers(name: str, text: str) -> list[str]:
    """The torch specifiers a dependency file declares, comments left out."""
    if name == "pyproject.toml":
        import tomllib

        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError):
            return []
        project = data.get("project")
        deps = project.get("dependencies", []) if isinstance(project, dict) else []
        lines = [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
    elif name == "setup.py":
        # only inside string literals: `install_requires=["torch>=1.7"]`
        lines = re.findall(r"[\"']([^\"'\n]*torch[^\"'\n]*)[\"']", text)
    else:
        lines = [line.split("#", 1)[0] for line in text.splitlines()]
    found = []
    for line in lines:
        m = _REQUIREMENT.search(line.split(";", 1)[0])  # `; python_version...` markers
        if m:
            found.append(m.group(1))
    return found


def declared_range(root: str) -> TorchRange | None:
    """The torch range the dependency files in `root` declare, intersected; None if none do."""
    from gpulint.safeio import read_side

    clauses: list[str] = []
    sources: list[str] = []
    for name in _DEPENDENCY_FILES:
        data = read_side(os.path.join(root, name), _MAX_BYTES)
        if not data or b"torch" not in data:  # (nothing to parse: no tomllib import)
            continue
        for spec in _specifiers(name, data.decode("utf-8", "replace")):
            clauses.append(spec)
            sources.append(f"{name}: torch{spec.strip().rstrip(',')}")
    if not clauses:
        return None
    return range_of(",".join(clauses), "; ".join(sources))


def project_range(root: str, configured: str | None) -> TorchRange | None:
    """`torch-version` from the configuration, else what the project's files declare."""
    if configured:
        return range_of(configured, f"torch-version = {configured!r} in the configuration")
    return declared_range(root)


def torch_range(settings: Settings) -> TorchRange | None:
    """The range a rule sees (`Settings.options["torch"]`), or None when nothing is declared."""
    return TorchRange.from_option(settings.options.get("torch"))
